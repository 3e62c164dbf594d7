//! The Redis store against the public conformance suite, on a real
//! `redis-server` started for this test binary.
#![cfg(all(feature = "redis", feature = "test-servers"))]

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use idem_runtime::conformance::Harness;
use idem_runtime::store::RedisStore;
use idem_runtime::testing::RedisServer;

static SERVER: LazyLock<Option<RedisServer>> = LazyLock::new(RedisServer::start);

struct RedisHarness {
    store: Arc<RedisStore>,
}

impl Harness for RedisHarness {
    type Store = RedisStore;
    fn store(&self) -> Arc<RedisStore> {
        self.store.clone()
    }
    // Leases and TTLs run on the server's clock: time passes by sleeping.
    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }
    fn tick(&self) -> Duration {
        Duration::from_millis(200)
    }
    fn expires_natively(&self) -> bool {
        true
    }
}

async fn harness() -> Option<RedisHarness> {
    let url = tokio::task::spawn_blocking(|| SERVER.as_ref().map(RedisServer::url))
        .await
        .unwrap()?;
    let store = RedisStore::connect(&url).await.unwrap();
    Some(RedisHarness {
        store: Arc::new(store),
    })
}

idem_runtime::store_conformance_tests!(harness);
