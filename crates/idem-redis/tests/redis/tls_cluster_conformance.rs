//! The Redis store on a Redis Cluster over TLS: three primaries that
//! speak TLS only, to clients and on their cluster bus, reached through
//! `rediss+cluster://` with the test's CA. The cases of the conformance
//! suite that a cluster changes (keys on every node, scans and sweeps that
//! visit each, wake-ups through pub/sub, the audit stream of every slot);
//! the whole suite runs on a plain cluster (`cluster_conformance`) and
//! over TLS on one server (`tls_conformance`), and all of it here would
//! cost CI 20 s more.

use std::sync::LazyLock;

use idem_redis::RedisStore;
use idem_testkit::servers::{RedisCluster, ServerClockHarness};

use crate::redis_support::{cluster_options, conformance_harness};
use crate::tls::CERTS;

static CLUSTER: LazyLock<Option<RedisCluster>> =
    LazyLock::new(|| RedisCluster::start_tls(&CERTS.server, &CERTS.ca));

async fn harness() -> Option<ServerClockHarness<RedisStore>> {
    let url =
        idem_testkit::store_cases::server_url("redis cluster over TLS", "redis-server", || {
            CLUSTER
                .as_ref()
                .map(|c| format!("{}?ca={}", c.url(), CERTS.ca.display()))
        })
        .await?;
    Some(conformance_harness(url, cluster_options()).await)
}

idem_conformance::store_conformance_tests!(@cases harness;
    claim_of_a_new_key_acquires,
    completed_outcome_is_returned_exactly,
    stale_owner_cannot_complete,
    waiter_is_woken_by_completion,
    waiter_is_woken_by_release,
    an_approval_wakes_a_waiter_for_it,
    scan_returns_every_record_once,
    expired_record_is_swept_and_key_reclaimed,
    audit_events_read_back_exactly_in_pages,
    close_flushes_and_refuses_further_writes,
);
