//! Several processes on one PostgreSQL database: one owner for a key
//! claimed from all of them at once, and waiters woken by NOTIFY within
//! milliseconds.

use std::sync::Arc;
use std::time::Duration;

use crate::postgres_support::server_url;
use idem_conformance::random_key;
use idem_postgres::PostgresStore;
use idem_testkit::claims::{claim_from_processes, run_child};
use idem_testkit::store_cases::wake_up_latencies;

// The entry point of the child processes of the multi-process test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child processes started by the multi-process tests"]
async fn multi_process_child() {
    run_child().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_processes_claiming_one_key_have_one_owner() {
    let Some(url) = server_url("postgres several processes").await else {
        return;
    };
    // Create the schema first so the children race on claims, not setup.
    drop(PostgresStore::connect(&url).await.unwrap());
    let key = random_key();
    let report = tokio::task::spawn_blocking(move || {
        claim_from_processes("processes::multi_process_child", &url, &key, 4, 250)
    })
    .await
    .unwrap();
    assert_eq!(report.runs, 1, "more than one process ran the tool");
    assert_eq!(report.finished, 1000);
    assert_eq!(report.outcomes.len(), 1, "claimants saw different outcomes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_notify_within_milliseconds() {
    let Some(url) = server_url("postgres wake-up latency").await else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let latencies = wake_up_latencies(store.clone(), store, 10).await;
    eprintln!(
        "postgres wake-up latency over 10 waits: median {:?}, max {:?}",
        latencies[5], latencies[9]
    );
    assert!(latencies[5] < Duration::from_millis(50), "{latencies:?}");
}
