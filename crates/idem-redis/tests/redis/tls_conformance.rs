//! The Redis store against the public conformance suite over TLS:
//! `rediss://` to a `redis-server` whose one port is a TLS port, trusting
//! the certificate authority the test made.

use std::time::Duration;

use crate::tls::tls_url;
use idem_redis::{RedisOptions, RedisStore};
use idem_testkit::servers::ServerClockHarness;

/// As the plain suite's (`conformance`).
const AUDIT_RETENTION: Duration = Duration::from_secs(4);

fn options() -> RedisOptions {
    RedisOptions::default().audit_retention(AUDIT_RETENTION)
}

async fn harness() -> Option<ServerClockHarness<RedisStore>> {
    let url = tls_url("redis conformance over TLS").await?;
    let store = RedisStore::connect_with(&url, options()).await.unwrap();
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
