//! The PostgreSQL store against the public conformance suite, on a real
//! PostgreSQL server started for this test binary.
#![cfg(all(feature = "postgres", feature = "test-servers"))]

use std::sync::LazyLock;

use idem_runtime::store::PostgresStore;
use idem_runtime::testing::{PostgresServer, ServerClockHarness};

static SERVER: LazyLock<Option<PostgresServer>> = LazyLock::new(PostgresServer::start);

async fn harness() -> Option<ServerClockHarness<PostgresStore>> {
    let url = tokio::task::spawn_blocking(|| SERVER.as_ref().map(PostgresServer::url))
        .await
        .unwrap()?;
    let store = PostgresStore::connect(&url).await.unwrap();
    Some(ServerClockHarness::new(store))
}

idem_runtime::store_conformance_tests!(harness);
