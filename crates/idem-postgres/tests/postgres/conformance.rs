//! The PostgreSQL store against the public conformance suite, on a real
//! PostgreSQL server started for this test binary.

use std::sync::LazyLock;

use idem_postgres::PostgresStore;
use idem_testkit::servers::{PostgresServer, ServerClockHarness};

use crate::postgres_support::conformance_harness;

static SERVER: LazyLock<Option<PostgresServer>> = LazyLock::new(PostgresServer::start);

async fn harness() -> Option<ServerClockHarness<PostgresStore>> {
    let url = tokio::task::spawn_blocking(|| SERVER.as_ref().map(PostgresServer::url))
        .await
        .unwrap()?;
    Some(conformance_harness(&url, "case_").await)
}

idem_conformance::store_conformance_tests!(harness);
