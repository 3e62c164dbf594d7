//! The Redis store against the public conformance suite over TLS:
//! `rediss://` to a `redis-server` whose one port is a TLS port, trusting
//! the certificate authority the test made.

use idem_redis::{RedisOptions, RedisStore};
use idem_testkit::servers::ServerClockHarness;

use crate::redis_support::conformance_harness;
use crate::tls::tls_url;

async fn harness() -> Option<ServerClockHarness<RedisStore>> {
    let url = tls_url("redis conformance over TLS").await?;
    Some(conformance_harness(url, RedisOptions::default()).await)
}

idem_conformance::store_conformance_tests!(harness);
