//! The Redis store against the public conformance suite, on a real
//! `redis-server` started for this test binary.
#![cfg(all(feature = "redis", feature = "test-servers"))]

use std::sync::LazyLock;

use idem_runtime::store::RedisStore;
use idem_runtime::testing::{RedisServer, ServerClockHarness};

static SERVER: LazyLock<Option<RedisServer>> = LazyLock::new(RedisServer::start);

async fn harness() -> Option<ServerClockHarness<RedisStore>> {
    let url = tokio::task::spawn_blocking(|| SERVER.as_ref().map(RedisServer::url))
        .await
        .unwrap()?;
    let store = RedisStore::connect(&url).await.unwrap();
    // Completed records expire through their key TTL.
    Some(
        ServerClockHarness::new(store)
            .expiring_natively()
            .reopening(move || {
                let url = url.clone();
                async move { RedisStore::connect(&url).await.unwrap() }
            }),
    )
}

idem_runtime::store_conformance_tests!(harness);
