//! Pieces shared by the Redis store's test files (`mod redis_support;`,
//! beside `mod support;`): the server of the test binary, a server of a
//! test's own, and a plain connection to look at what the store wrote.
#![allow(dead_code)] // each test file uses its own subset

use std::time::Duration;

use idem_redis::{RedisOptions, RedisStore};
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{Fence, Record, RecordState};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{Expected, ExpectedState};
use idem_testkit::servers::ServerClockHarness;
use idem_testkit::{skip, RedisServer};

/// The URL of the server of this test binary (the kit's, started on first
/// use), or `None` after a loud skip.
pub(crate) async fn server_url(test: &str) -> Option<String> {
    Some(idem_testkit::stores::redis(test).await?.url().to_owned())
}

/// A store of the server of this test binary and a plain connection to
/// it, for looking at what the store wrote; or `None` after a loud skip.
pub(crate) async fn open_shared(
    test: &str,
) -> Option<(RedisStore, redis::aio::MultiplexedConnection)> {
    let url = server_url(test).await?;
    let store = RedisStore::connect(&url).await.unwrap();
    Some((store, raw(&url).await))
}

/// The audit retention of the conformance suites: short enough for the
/// retention case to wait out, longer than any other case takes (their
/// sweeps trim every slot's audit stream).
pub(crate) const AUDIT_RETENTION: Duration = Duration::from_secs(4);

/// The conformance harness of the store at `url`, opened and reopened with
/// `options` and [`AUDIT_RETENTION`]: completed records expire through
/// their key TTL.
pub(crate) async fn conformance_harness(
    url: String,
    options: RedisOptions,
) -> ServerClockHarness<RedisStore> {
    let options = options.audit_retention(AUDIT_RETENTION);
    let store = RedisStore::connect_with(&url, options.clone())
        .await
        .unwrap();
    ServerClockHarness::new(store)
        .expiring_natively()
        .with_audit_retention(AUDIT_RETENTION)
        .reopening(move || {
            let (url, options) = (url.clone(), options.clone());
            async move { RedisStore::connect_with(&url, options).await.unwrap() }
        })
}

/// The options of the cluster suites: the default but a longer response
/// timeout. The suite's 10,000 claims of one key queue on the connection
/// to one node, and with every case running at once in a debug build, the
/// last of them wait longer than the default 5 s on a small machine.
pub(crate) fn cluster_options() -> RedisOptions {
    RedisOptions::default().response_timeout(Duration::from_secs(30))
}

/// A server of the test's own (to count only its commands or clients, or to
/// reconfigure or stop it), or `None` after a loud skip.
pub(crate) async fn own_server(test: &str) -> Option<RedisServer> {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    if server.is_none() {
        skip(test, "redis-server");
    }
    server
}

/// A plain connection for looking at what the store wrote.
pub(crate) async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Writes the server applied since it started (`rdb_changes_since_last_save`
/// with saving off): every write command adds to it, reads do not.
pub(crate) async fn writes_applied(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query_async(raw)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .expect("INFO persistence lists rdb_changes_since_last_save")
        .trim()
        .parse()
        .unwrap()
}

/// `SET key value` through the plain connection `raw`.
pub(crate) async fn set(
    raw: &mut redis::aio::MultiplexedConnection,
    key: impl redis::ToRedisArgs,
    value: impl redis::ToRedisArgs,
) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query_async(raw)
        .await
        .unwrap();
}

/// Run `action`, then assert that the server applied no write meanwhile
/// ([`writes_applied`]); `why` says what it would have been. What
/// `action` returned.
pub(crate) async fn writes_nothing<T>(
    raw: &mut redis::aio::MultiplexedConnection,
    why: &str,
    action: impl std::future::Future<Output = T>,
) -> T {
    let before = writes_applied(raw).await;
    let done = action.await;
    assert_eq!(writes_applied(raw).await, before, "{why}");
    done
}

/// Park the in-flight call `key` owned by `fence` as awaiting approval for
/// `ttl`; returns the record's new fence.
pub(crate) async fn park(
    store: &RedisStore,
    key: &IdempotencyKey,
    fence: Fence,
    ttl: Duration,
) -> Fence {
    let now = store.now().await.unwrap();
    let mut record = store.get(key).await.unwrap().expect("in flight");
    record.state = RecordState::AwaitingApproval {
        fence,
        requested_at: now,
        expires_at: now.plus(ttl),
        message: "ask #payments-oncall".into(),
    };
    store
        .replace(
            key,
            Expected {
                fence,
                state: ExpectedState::InFlight,
            },
            Some(&record),
            None,
        )
        .await
        .unwrap()
        .expect("a fence for the new record")
}

/// Every record of the store, each once, over `page`-sized scan pages.
pub(crate) async fn scan_all(store: &RedisStore, page: usize) -> Vec<Record> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let got = store.scan(cursor.as_deref(), page).await.unwrap();
        assert!(got.records.len() <= page, "a page larger than asked for");
        all.extend(got.records);
        match got.cursor {
            Some(next) => {
                assert!(
                    cursor.as_ref().is_none_or(|c| next > *c),
                    "the scan went back"
                );
                cursor = Some(next);
            }
            None => return all,
        }
    }
}

/// A table of this one backend, as a program's table holds it: what
/// `idem::store::connect` and `migrate` do with a URL of this scheme.
pub static BACKENDS: idem_runtime::store::backend::Backends =
    idem_runtime::store::backend::Backends::new(&[&idem_redis::BACKEND]);

/// Every page of an open scan ([`StoreExt::scan_open`]) with pages of `page`:
/// the records in the order returned, and the round trips of each page.
pub(crate) async fn scan_open_all(store: &RedisStore, page: usize) -> (Vec<Record>, Vec<u64>) {
    let (mut all, mut trips) = (Vec::new(), Vec::new());
    let mut cursor: Option<String> = None;
    loop {
        let before = store.round_trips();
        let got = store.scan_open(cursor.as_deref(), page).await.unwrap();
        trips.push(store.round_trips() - before);
        assert!(got.records.len() <= page, "a page larger than asked for");
        all.extend(got.records);
        match got.cursor {
            Some(next) => cursor = Some(next),
            None => return (all, trips),
        }
    }
}
