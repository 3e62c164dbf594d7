//! The Redis store against the public conformance suite, on a real Redis
//! Cluster of three primaries started for this test binary: every
//! transition is one script on one slot, and scans visit every node.

use std::sync::LazyLock;

use idem_redis::RedisStore;
use idem_testkit::servers::{RedisCluster, ServerClockHarness};

use crate::redis_support::{cluster_options, conformance_harness};

static CLUSTER: LazyLock<Option<RedisCluster>> = LazyLock::new(RedisCluster::start);

async fn harness() -> Option<ServerClockHarness<RedisStore>> {
    let url = tokio::task::spawn_blocking(|| CLUSTER.as_ref().map(RedisCluster::url))
        .await
        .unwrap()?;
    Some(conformance_harness(url, cluster_options()).await)
}

idem_conformance::store_conformance_tests!(harness);
