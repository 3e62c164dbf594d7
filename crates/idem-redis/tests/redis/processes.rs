//! Several processes on one `redis-server`: one owner for a key claimed
//! from all of them at once, and waiters woken by pub/sub within
//! milliseconds.

use std::sync::Arc;
use std::time::Duration;

use crate::redis_support::server_url;
use idem_conformance::random_key;
use idem_redis::RedisStore;
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
    let Some(url) = server_url("redis several processes").await else {
        return;
    };
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
async fn waiters_are_woken_by_pub_sub_within_milliseconds() {
    let Some(url) = server_url("redis wake-up latency").await else {
        return;
    };
    let store = Arc::new(RedisStore::connect(&url).await.unwrap());
    let latencies = wake_up_latencies(store.clone(), store, 10).await;
    eprintln!(
        "redis wake-up latency over 10 waits: median {:?}, max {:?}",
        latencies[5], latencies[9]
    );
    // The waiters' polling back-off had reached 160 ms: anything well
    // below that was a notification.
    assert!(latencies[5] < Duration::from_millis(50), "{latencies:?}");
}
