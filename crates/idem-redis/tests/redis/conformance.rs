//! The Redis store against the public conformance suite, on a real
//! `redis-server` started for this test binary.

use std::sync::LazyLock;

use idem_redis::{RedisOptions, RedisStore};
use idem_testkit::servers::{RedisServer, ServerClockHarness};

use crate::redis_support::conformance_harness;

static SERVER: LazyLock<Option<RedisServer>> = LazyLock::new(RedisServer::start);

async fn harness() -> Option<ServerClockHarness<RedisStore>> {
    let url = tokio::task::spawn_blocking(|| SERVER.as_ref().map(RedisServer::url))
        .await
        .unwrap()?;
    Some(conformance_harness(url, RedisOptions::default()).await)
}

idem_conformance::store_conformance_tests!(harness);
