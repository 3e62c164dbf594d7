//! The PostgreSQL store against the public conformance suite, on a real
//! PostgreSQL server started for this test binary.
#![cfg(all(feature = "postgres", feature = "test-servers"))]

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use idem_runtime::conformance::Harness;
use idem_runtime::store::PostgresStore;
use idem_runtime::testing::PostgresServer;

static SERVER: LazyLock<Option<PostgresServer>> = LazyLock::new(PostgresServer::start);

struct PostgresHarness {
    store: Arc<PostgresStore>,
}

impl Harness for PostgresHarness {
    type Store = PostgresStore;
    fn store(&self) -> Arc<PostgresStore> {
        self.store.clone()
    }
    // Leases and TTLs run on the server's clock: time passes by sleeping.
    async fn advance(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }
    fn tick(&self) -> Duration {
        Duration::from_millis(200)
    }
}

async fn harness() -> Option<PostgresHarness> {
    let url = tokio::task::spawn_blocking(|| SERVER.as_ref().map(PostgresServer::url))
        .await
        .unwrap()?;
    let store = PostgresStore::connect(&url).await.unwrap();
    Some(PostgresHarness {
        store: Arc::new(store),
    })
}

idem_runtime::store_conformance_tests!(harness);
