//! The Redis store against the public conformance suite, on a real Redis
//! Cluster of three primaries started for this test binary: every
//! transition is one script on one slot, and scans visit every node.

use std::sync::LazyLock;
use std::time::Duration;

use idem_redis::{RedisOptions, RedisStore};
use idem_testkit::servers::{RedisCluster, ServerClockHarness};

static CLUSTER: LazyLock<Option<RedisCluster>> = LazyLock::new(RedisCluster::start);

/// The default options but a longer response timeout: the suite's 10,000
/// claims of one key queue on the connection to one node, and with every
/// case running at once in a debug build, the last of them wait longer
/// than the default 5 s on a small machine.
/// The audit retention is short enough for the retention case to wait
/// out, longer than any other case takes (their sweeps trim every slot's
/// audit stream).
fn options() -> RedisOptions {
    RedisOptions::default()
        .response_timeout(Duration::from_secs(30))
        .audit_retention(AUDIT_RETENTION)
}

const AUDIT_RETENTION: Duration = Duration::from_secs(4);

async fn harness() -> Option<ServerClockHarness<RedisStore>> {
    let url = tokio::task::spawn_blocking(|| CLUSTER.as_ref().map(RedisCluster::url))
        .await
        .unwrap()?;
    let store = RedisStore::connect_with(&url, options()).await.unwrap();
    // Completed records expire through their key TTL.
    Some(
        ServerClockHarness::new(store)
            .expiring_natively()
            .with_audit_retention(AUDIT_RETENTION)
            .reopening(move || {
                let url = url.clone();
                async move { RedisStore::connect_with(&url, options()).await.unwrap() }
            }),
    )
}

idem_conformance::store_conformance_tests!(harness);
