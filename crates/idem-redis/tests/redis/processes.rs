//! Several processes on one `redis-server`: one owner for a key claimed
//! from all of them at once, and waiters woken by pub/sub within
//! milliseconds.

use crate::redis_support::server_url;
use idem_redis::RedisStore;
use idem_testkit::claims::assert_one_owner_across_processes;
use idem_testkit::store_cases::assert_woken_by_notification;

idem_testkit::multi_process_child!();

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_processes_claiming_one_key_have_one_owner() {
    let Some(url) = server_url("redis several processes").await else {
        return;
    };
    assert_one_owner_across_processes(url, 250).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_pub_sub_within_milliseconds() {
    let Some(url) = server_url("redis wake-up latency").await else {
        return;
    };
    let store = RedisStore::connect(&url).await.unwrap();
    assert_woken_by_notification("redis", store).await;
}
