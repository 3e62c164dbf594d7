//! The PostgreSQL store against the public conformance suite over TLS:
//! `sslmode=verify-full` with the test's CA as `sslrootcert`, to a server
//! that takes TLS connections only.

use idem_postgres::PostgresStore;
use idem_testkit::servers::ServerClockHarness;

use crate::postgres_support::conformance_harness;
use crate::tls::{tls_only_url, CERTS};

async fn harness() -> Option<ServerClockHarness<PostgresStore>> {
    let url = tls_only_url("postgres conformance over TLS").await?;
    // Each case in its own schema, as in the plain suite (`conformance`),
    // with its long wait for a pooled connection and short audit retention.
    let url = format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        CERTS.ca.display()
    );
    Some(conformance_harness(&url, "tls_case_").await)
}

idem_conformance::store_conformance_tests!(harness);
