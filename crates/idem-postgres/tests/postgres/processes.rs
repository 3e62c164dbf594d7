//! Several processes on one PostgreSQL database: one owner for a key
//! claimed from all of them at once, and waiters woken by NOTIFY within
//! milliseconds.

use std::sync::Arc;

use crate::postgres_support::server_url;
use idem_postgres::PostgresStore;
use idem_testkit::claims::{assert_one_owner_across_processes, run_child};
use idem_testkit::store_cases::assert_woken_by_notification;

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
    assert_one_owner_across_processes("processes::multi_process_child", url, 250).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_notify_within_milliseconds() {
    let Some(url) = server_url("postgres wake-up latency").await else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).await.unwrap());
    assert_woken_by_notification("postgres", store).await;
}
