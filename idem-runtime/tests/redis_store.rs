//! The Redis store beyond the conformance suite, on a real `redis-server`:
//! round trips, several processes, retention and leases, wake-up latency,
//! bad data and a server that goes away.
#![cfg(all(feature = "redis", feature = "test-servers"))]

mod support;

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use idem_runtime::conformance::random_key;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{Fence, RecordState};
use idem_runtime::store::redis::RedisOptions;
use idem_runtime::store::{ClaimOutcome, Expected, ExpectedState, RedisStore, Store, StoreError};
use idem_runtime::testing::{claim_from_processes, run_child, skip, RedisServer};
use serde_json::json;
use support::{
    acquire, closed_port, driver_error, fails_closed_when_the_server_goes_away, fingerprint,
    request, sent, wake_up_latencies,
};

static SERVER: LazyLock<Option<RedisServer>> = LazyLock::new(RedisServer::start);

async fn server_url(test: &str) -> Option<String> {
    support::server_url(test, "redis-server", || {
        SERVER.as_ref().map(RedisServer::url)
    })
    .await
}

/// Run `line` (words separated by spaces) on `raw`, expecting `OK`.
async fn command(raw: &mut redis::aio::MultiplexedConnection, line: &str) {
    let words: Vec<&str> = line.split(' ').collect();
    let _: () = redis::cmd(words[0])
        .arg(&words[1..])
        .query_async(raw)
        .await
        .unwrap();
}

/// A server of the test's own (to count only its commands or clients, or to
/// reconfigure or stop it), or `None` after a loud skip.
async fn own_server(test: &str) -> Option<RedisServer> {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    if server.is_none() {
        skip(test, "redis-server");
    }
    server
}

/// A plain connection for looking at what the store wrote.
async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Writes the server applied since it started (`rdb_changes_since_last_save`
/// with saving off): every write command adds to it, reads do not.
async fn writes_applied(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
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

/// A replayed run asks for calls that are already recorded: answering them
/// runs the claim script, which must take its read-only branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_of_a_completed_call_writes_nothing() {
    let Some(server) = own_server("redis duplicate writes").await else {
        return;
    };
    let url = server.url();
    let mut raw = raw(&url).await;
    let store = RedisStore::connect(&url).await.unwrap();
    let (key, f) = (random_key(), fingerprint());
    let fence = acquire(&store, &key).await;
    store
        .complete(&key, fence, &sent("m-1"), Duration::from_secs(600))
        .await
        .unwrap();
    let before = writes_applied(&mut raw).await;
    for _ in 0..100 {
        let dup = store.claim(&request(&key, &f)).await.unwrap();
        assert!(matches!(dup, ClaimOutcome::Completed(_)), "{dup:?}");
    }
    let after = writes_applied(&mut raw).await;
    eprintln!("redis: 100 duplicates applied {} writes", after - before);
    assert_eq!(after, before, "a duplicate wrote");
    // The counter does count the script's writes: a first call's claim.
    acquire(&store, &random_key()).await;
    assert!(writes_applied(&mut raw).await > after);

    // Nor does a duplicate of a call awaiting approval write.
    let waiting = random_key();
    let fence = acquire(&store, &waiting).await;
    park(&store, &waiting, fence, Duration::from_secs(600)).await;
    let before = writes_applied(&mut raw).await;
    for _ in 0..100 {
        let dup = store.claim(&request(&waiting, &f)).await.unwrap();
        assert!(matches!(dup, ClaimOutcome::AwaitingApproval(_)), "{dup:?}");
    }
    assert_eq!(
        writes_applied(&mut raw).await,
        before,
        "a duplicate of a call awaiting approval wrote"
    );
}

/// Park the in-flight call `key` owned by `fence` as awaiting approval for
/// `ttl`; returns the record's new fence.
async fn park(store: &RedisStore, key: &IdempotencyKey, fence: Fence, ttl: Duration) -> Fence {
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
        )
        .await
        .unwrap()
        .expect("a fence for the new record")
}

/// The commands clients sent to the server while `op` ran, as MONITOR saw
/// them; commands run inside scripts (`[0 lua]`) are not round trips and
/// are left out.
async fn client_commands<T>(
    url: &str,
    op: impl std::future::Future<Output = T>,
) -> (T, Vec<String>) {
    let client = redis::Client::open(url).unwrap();
    let monitor = client.get_async_monitor().await.unwrap();
    let mut lines = monitor.into_on_message::<String>();
    let mut probe = client.get_multiplexed_async_connection().await.unwrap();
    let marker = |what: &str| format!("idem-{what}-{}", random_key());
    let (begin, end) = (marker("begin"), marker("end"));
    let echo = |text: String| redis::cmd("ECHO").arg(text).clone();
    let _: String = echo(begin.clone()).query_async(&mut probe).await.unwrap();
    while !lines.next().await.unwrap().contains(&begin) {}
    let out = op.await;
    let _: String = echo(end.clone()).query_async(&mut probe).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(5), lines.next())
            .await
            .expect("MONITOR went quiet")
            .unwrap();
        if line.contains(&end) {
            break;
        }
        if !line.contains(" lua]") {
            seen.push(line);
        }
    }
    (out, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_call_costs_one_round_trip_to_claim_and_one_to_complete_and_a_duplicate_one() {
    // A server of its own, so no other test's commands are counted.
    let Some(server) = own_server("redis round trips").await else {
        return;
    };
    let url = server.url();
    let store = RedisStore::connect(&url).await.unwrap();
    let key = random_key();
    let f = fingerprint();

    let (claim, sent_claim) = client_commands(&url, store.claim(&request(&key, &f))).await;
    let ClaimOutcome::Acquired { fence, .. } = claim.unwrap() else {
        panic!("fresh key not acquired");
    };
    let (done, sent_complete) = client_commands(
        &url,
        store.complete(&key, fence, &sent("m-1"), Duration::from_secs(60)),
    )
    .await;
    done.unwrap();
    let (dup, sent_dup) = client_commands(&url, store.claim(&request(&key, &f))).await;
    assert!(matches!(dup.unwrap(), ClaimOutcome::Completed(_)));

    eprintln!("redis round trips: claim {sent_claim:?}, complete {sent_complete:?}, duplicate {sent_dup:?}");
    for (what, sent) in [
        ("claim", &sent_claim),
        ("complete", &sent_complete),
        ("duplicate", &sent_dup),
    ] {
        assert_eq!(
            sent.len(),
            1,
            "{what} took {} round trips: {sent:?}",
            sent.len()
        );
        assert!(sent[0].contains("\"EVALSHA\""), "{what}: {sent:?}");
    }
}

// The entry point of the child processes of the multi-process test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child processes started by the multi-process tests"]
async fn multi_process_child() {
    run_child().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_processes_claiming_one_key_have_one_owner() {
    let Some(url) = server_url("redis several processes").await else {
        return;
    };
    let key = random_key();
    let report = tokio::task::spawn_blocking(move || {
        claim_from_processes("multi_process_child", &url, &key, 4, 250)
    })
    .await
    .unwrap();
    assert_eq!(report.runs, 1, "more than one process ran the tool");
    assert_eq!(report.finished, 1000);
    assert_eq!(report.outcomes.len(), 1, "claimants saw different outcomes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_is_the_key_ttl_and_the_lease_is_a_field() {
    let Some(url) = server_url("redis retention").await else {
        return;
    };
    let store = RedisStore::connect(&url).await.unwrap();
    let mut raw = raw(&url).await;
    let key = random_key();
    let fence = acquire(&store, &key).await;
    let redis_key = store.record_key(&key);
    assert!(redis_key.contains(&format!("{{{}}}", &key.as_str()[..3])));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&redis_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(pttl, -1, "an in-flight record must not expire by itself");
    let lease: Option<u64> = redis::cmd("HGET")
        .arg(&redis_key)
        .arg("lease")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(lease.is_some(), "the lease is a field of the record");

    store
        .complete(&key, fence, &sent("m-1"), Duration::from_secs(600))
        .await
        .unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&redis_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(
        (590_000..=600_000).contains(&pttl),
        "the record's retention is its key TTL, got {pttl} ms"
    );
}

/// A request for approval lapses through its key's TTL, like a completed
/// record; once approved, the claim that runs the call makes the record
/// in flight again, without a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_request_lapses_by_its_key_ttl_until_an_approved_claim_owns_it() {
    let Some(url) = server_url("redis approval retention").await else {
        return;
    };
    let store = RedisStore::connect(&url).await.unwrap();
    let mut raw = raw(&url).await;
    let (key, f) = (random_key(), fingerprint());
    let fence = acquire(&store, &key).await;
    let parked = park(&store, &key, fence, Duration::from_secs(600)).await;
    let redis_key = store.record_key(&key);
    let pttl = |raw: &mut redis::aio::MultiplexedConnection| {
        let mut raw = raw.clone();
        let redis_key = redis_key.clone();
        async move {
            redis::cmd("PTTL")
                .arg(&redis_key)
                .query_async::<i64>(&mut raw)
                .await
                .unwrap()
        }
    };
    let left = pttl(&mut raw).await;
    assert!(
        (590_000..=600_000).contains(&left),
        "a request's retention is its key TTL, got {left} ms"
    );

    let mut approved = store.get(&key).await.unwrap().unwrap();
    approved.steps.insert(
        idem_runtime::record::APPROVAL_STEP.into(),
        json!({ "approved": { "approver": "ana" } }),
    );
    store
        .replace(
            &key,
            Expected {
                fence: parked,
                state: ExpectedState::AwaitingApproval,
            },
            Some(&approved),
        )
        .await
        .unwrap();
    match store.claim(&request(&key, &f)).await.unwrap() {
        ClaimOutcome::Acquired { takeover: None, .. } => {}
        other => panic!("expected the approved call, got {other:?}"),
    }
    assert_eq!(
        pttl(&mut raw).await,
        -1,
        "an in-flight record must not lapse"
    );
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(store.record_key(&key))
        .query_async(&mut raw)
        .await
        .unwrap();
    for gone in ["req", "exp", "msg"] {
        assert!(
            !fields.iter().any(|f| f == gone),
            "{gone} left in {fields:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_pub_sub_within_milliseconds() {
    let Some(url) = server_url("redis wake-up latency").await else {
        return;
    };
    let store = Arc::new(RedisStore::connect(&url).await.unwrap());
    let latencies = wake_up_latencies(store.clone(), store, 10).await;
    eprintln!(
        "redis wake-up latency over 10 waits: median {:?}, max {:?}",
        latencies[5], latencies[9]
    );
    // The waiters' polling back-off had reached 160 ms: anything well
    // below that was a notification.
    assert!(latencies[5] < Duration::from_millis(50), "{latencies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_with_a_missing_field_is_corrupt_and_left_untouched() {
    let Some(url) = server_url("redis corrupt record").await else {
        return;
    };
    let store = RedisStore::connect(&url).await.unwrap();
    let mut raw = raw(&url).await;
    let key = random_key();
    let fence = acquire(&store, &key).await;
    store
        .complete(&key, fence, &sent("m-1"), Duration::from_secs(600))
        .await
        .unwrap();
    let redis_key = store.record_key(&key);
    let _: i64 = redis::cmd("HDEL")
        .arg(&redis_key)
        .arg("tool")
        .query_async(&mut raw)
        .await
        .unwrap();
    let before: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&redis_key)
        .query_async(&mut raw)
        .await
        .unwrap();

    let f = fingerprint();
    match store.claim(&request(&key, &f)).await {
        Err(StoreError::Corrupt(c)) => assert!(c.detail.contains("missing"), "{c}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(matches!(store.get(&key).await, Err(StoreError::Corrupt(_))));
    assert!(matches!(
        store.release(&key, fence).await,
        Err(StoreError::Corrupt(_))
    ));
    let after: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&redis_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(before, after, "the corrupt record was changed");

    // Garbage in a field is corrupt too.
    let _: i64 = redis::cmd("HSET")
        .arg(&redis_key)
        .arg("tool")
        .arg("send_email")
        .arg("outcome")
        .arg("{not json")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(matches!(
        store.claim(&request(&key, &f)).await,
        Err(StoreError::Corrupt(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_from_a_newer_idem_is_refused() {
    let Some(url) = server_url("redis newer schema").await else {
        return;
    };
    let prefix = format!("idem-test-{}", &random_key().as_str()[..8]);
    let mut raw = raw(&url).await;
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}:schema"))
        .arg(2)
        .query_async(&mut raw)
        .await
        .unwrap();
    match RedisStore::connect_with(&url, RedisOptions::default().prefix(&prefix)).await {
        Err(StoreError::SchemaTooNew {
            found, supported, ..
        }) => assert_eq!((found, supported), (2, 1)),
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_fails_closed_naming_the_store() {
    let port = closed_port();
    let url = format!("redis://:secret@127.0.0.1:{port}/");
    let started = Instant::now();
    match RedisStore::connect(&url).await {
        Err(StoreError::Unavailable { store, cause }) => {
            assert_eq!(store, format!("redis://:***@127.0.0.1:{port}/"));
            assert!(!cause.is_empty());
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// The redis crate's error stays the source of the store's error, for
/// reporters that print the chain and callers that look at the driver's
/// error kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_keeps_the_driver_error_as_source() {
    let url = format!("redis://:secret@127.0.0.1:{}/", closed_port());
    let e = RedisStore::connect(&url).await.unwrap_err();
    assert!(matches!(e, StoreError::Unavailable { .. }), "{e:?}");
    let driver: &redis::RedisError = driver_error(&e);
    assert!(driver.is_connection_refusal(), "{driver:?}");
    assert!(!e.to_string().contains("secret"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_going_away_fails_writes_closed() {
    let Some(mut server) = own_server("redis server going away").await else {
        return;
    };
    let store = RedisStore::connect(&server.url()).await.unwrap();
    fails_closed_when_the_server_goes_away(store, || server.stop()).await;
}

/// A server out of memory under `noeviction` refuses the claim as `Full`,
/// and a read-only replica as `ReadOnly`: the classification reads the
/// redis crate's error kinds, which changed shape in its 1.0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_and_read_only_servers_are_told_apart() {
    // A server of its own: it is made full, then a replica.
    let Some(server) = own_server("redis full and read-only").await else {
        return;
    };
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let mut raw = raw(&server.url()).await;
    let f = fingerprint();
    command(&mut raw, "CONFIG SET maxmemory-policy noeviction").await;
    command(&mut raw, "CONFIG SET maxmemory 1").await;
    match store.claim(&request(&random_key(), &f)).await {
        Err(StoreError::Full { store: name, .. }) => assert_eq!(name, store.describe()),
        other => panic!("a full server must refuse the claim as Full, got {other:?}"),
    }
    command(&mut raw, "CONFIG SET maxmemory 0").await;
    command(&mut raw, &format!("REPLICAOF 127.0.0.1 {}", closed_port())).await;
    match store.claim(&request(&random_key(), &f)).await {
        Err(StoreError::ReadOnly { store: name, .. }) => assert_eq!(name, store.describe()),
        other => panic!("a replica must refuse the claim as ReadOnly, got {other:?}"),
    }
}

/// `close` drops the store's connection and its subscriber's; the server
/// sees them go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_closes_every_connection() {
    // A server of its own, so only this test's clients are counted.
    let Some(server) = own_server("redis close").await else {
        return;
    };
    let mut raw = raw(&server.url()).await;
    let clients = || {
        let mut raw = raw.clone();
        async move {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut raw)
                .await
                .unwrap();
            list.lines().count()
        }
    };
    let alone = clients().await;
    let store = RedisStore::connect(&server.url()).await.unwrap();
    acquire(&store, &random_key()).await;
    assert!(
        clients().await >= alone + 2,
        "the store and its subscriber are connected"
    );
    store.close().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while clients().await > alone {
        assert!(
            Instant::now() < deadline,
            "connections still open 10 s after close"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _: () = redis::cmd("PING").query_async(&mut raw).await.unwrap();
}
