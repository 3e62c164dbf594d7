//! The Redis store against the public conformance suite, on a real
//! `redis-server` started for this test binary.

use std::sync::LazyLock;
use std::time::Duration;

use idem_redis::{RedisOptions, RedisStore};
use idem_testkit::servers::{RedisServer, ServerClockHarness};

static SERVER: LazyLock<Option<RedisServer>> = LazyLock::new(RedisServer::start);

/// Short enough for the retention case to wait out, longer than any other
/// case takes (their sweeps trim every slot's audit stream).
const AUDIT_RETENTION: Duration = Duration::from_secs(4);

fn options() -> RedisOptions {
    RedisOptions::default().audit_retention(AUDIT_RETENTION)
}

async fn harness() -> Option<ServerClockHarness<RedisStore>> {
    let url = tokio::task::spawn_blocking(|| SERVER.as_ref().map(RedisServer::url))
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
