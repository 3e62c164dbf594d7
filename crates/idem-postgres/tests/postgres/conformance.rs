//! The PostgreSQL store against the public conformance suite, on a real
//! PostgreSQL server started for this test binary.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use idem_postgres::{PostgresOptions, PostgresStore};
use idem_testkit::servers::{PostgresServer, ServerClockHarness};

static SERVER: LazyLock<Option<PostgresServer>> = LazyLock::new(PostgresServer::start);

/// Numbers each case's schema.
static CASES: AtomicU32 = AtomicU32::new(0);

async fn harness() -> Option<ServerClockHarness<PostgresStore>> {
    let url = tokio::task::spawn_blocking(|| SERVER.as_ref().map(PostgresServer::url))
        .await
        .unwrap()?;
    // Each case in its own schema, as if each were its own application:
    // the cases run in parallel on one server, and a case that counts what
    // its sweep deleted must not have another case's sweep take its records.
    let url = format!(
        "{url}?schema=case_{}",
        CASES.fetch_add(1, Ordering::Relaxed)
    );
    // The concurrency case sends 10,000 claims (and their waits) through a
    // pool of 16 connections; on a busy machine the last of them waited more
    // than the default 5 s for a connection and failed closed, which is
    // right under overload but not what the case is about.
    // A short audit retention, for the retention case to wait out.
    let audit_retention = Duration::from_secs(3);
    let options = PostgresOptions::default()
        .connect_timeout(Duration::from_secs(60))
        .audit_retention(audit_retention);
    let store = PostgresStore::connect_with(&url, options.clone())
        .await
        .unwrap();
    Some(
        ServerClockHarness::new(store)
            .with_audit_retention(audit_retention)
            .reopening(move || {
                let (url, options) = (url.clone(), options.clone());
                async move { PostgresStore::connect_with(&url, options).await.unwrap() }
            }),
    )
}

idem_conformance::store_conformance_tests!(harness);
