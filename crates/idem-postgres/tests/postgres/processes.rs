//! Several processes on one PostgreSQL database: one owner for a key
//! claimed from all of them at once, and waiters woken by NOTIFY within
//! milliseconds.

use crate::postgres_support::server_url;
use idem_postgres::PostgresStore;
use idem_testkit::claims::assert_one_owner_across_processes;
use idem_testkit::store_cases::assert_woken_by_notification;

idem_testkit::multi_process_child!();

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_processes_claiming_one_key_have_one_owner() {
    let Some(url) = server_url("postgres several processes").await else {
        return;
    };
    // Create the schema first so the children race on claims, not setup.
    drop(PostgresStore::connect(&url).await.unwrap());
    assert_one_owner_across_processes(url, 250).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_notify_within_milliseconds() {
    let Some(url) = server_url("postgres wake-up latency").await else {
        return;
    };
    let store = PostgresStore::connect(&url).await.unwrap();
    assert_woken_by_notification("postgres", store).await;
}
