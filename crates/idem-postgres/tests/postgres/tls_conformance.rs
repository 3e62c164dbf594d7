//! The PostgreSQL store against the public conformance suite over TLS:
//! `sslmode=verify-full` with the test's CA as `sslrootcert`, to a server
//! that takes TLS connections only.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::tls::{tls_only_url, CERTS};
use idem_postgres::{PostgresOptions, PostgresStore};
use idem_testkit::servers::ServerClockHarness;

/// Numbers each case's schema.
static CASES: AtomicU32 = AtomicU32::new(0);

async fn harness() -> Option<ServerClockHarness<PostgresStore>> {
    let url = tls_only_url("postgres conformance over TLS").await?;
    // Each case in its own schema, as in the plain suite (`conformance`).
    let url = format!(
        "{url}?sslmode=verify-full&sslrootcert={}&schema=tls_case_{}",
        CERTS.ca.display(),
        CASES.fetch_add(1, Ordering::Relaxed)
    );
    // As the plain suite's: a long wait for a pooled connection, a short
    // audit retention.
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
