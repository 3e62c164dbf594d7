//! Several processes on one SQLite file: one owner for a key claimed from
//! all of them at once, and waiters woken at once in process and within
//! the poll across processes.

use crate::sqlite_support::fresh_file;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::StoreExt;
use idem_sqlite::SqliteStore;
use idem_testkit::claims::assert_one_owner_across_processes;
use idem_testkit::store_cases::wake_up_latencies;
use idem_testkit::TempDir;

idem_testkit::multi_process_child!();

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_processes_claiming_one_key_in_one_file_have_one_owner() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("shared.db");
    // Create the file first so the children race on claims, not on setup.
    SqliteStore::open(&path).await.unwrap().close().await;
    let url = format!("sqlite://{}", path.display());
    assert_one_owner_across_processes(url, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_at_once_in_process_and_within_the_poll_across_processes() {
    let (_dir, path) = fresh_file();
    let one = Arc::new(SqliteStore::open(&path).await.unwrap());
    // A second store on the same file stands for another process: the
    // first one's writer cannot notify it.
    let other = Arc::new(SqliteStore::open(&path).await.unwrap());

    let same = wake_up_latencies(one.clone(), one.clone(), 5).await[2];
    let across = wake_up_latencies(one, other, 5).await[2];
    eprintln!(
        "sqlite wake-up latency (median of 5): same process {same:?}, other process {across:?}"
    );
    // The back-off had grown to 160 ms: only a notification is this fast.
    assert!(same < Duration::from_millis(50), "{same:?}");
    assert!(
        across <= idem_sqlite::CROSS_PROCESS_POLL + Duration::from_millis(50),
        "{across:?}"
    );
}
