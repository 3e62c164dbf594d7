//! The Redis store beyond the conformance suite, on a real `redis-server`:
//! round trips, several processes, retention and leases, wake-up latency,
//! bad data and a server that goes away.
#![cfg(feature = "redis")]

mod support;

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use idem_runtime::conformance::random_key;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{Fence, Outcome, OutputJson, Record, RecordState, Status};
use idem_runtime::store::redis::RedisOptions;
use idem_runtime::store::{ClaimOutcome, Expected, ExpectedState, RedisStore, Store, StoreError};
use idem_testkit::servers::{claim_from_processes, run_child, skip, RedisServer};
use serde_json::json;
use support::{
    acquire, closed_port, driver_error, every_write_is_refused_read_only,
    fails_closed_when_the_server_goes_away, fingerprint, request, sent, wake_up_latencies,
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
            None,
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
            None,
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

/// Every record of the store, each once, over `page`-sized scan pages.
async fn scan_all(store: &RedisStore, page: usize) -> Vec<Record> {
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

/// Scans page through the slots' indexes: records of other prefixes are
/// not read, every record comes once in key order, records that lapsed are
/// left out although their keys are still indexed, and a claim creating a
/// record next to such a key drops it from the index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_read_each_record_once_in_key_order_from_the_indexes() {
    let Some(url) = server_url("redis scan").await else {
        return;
    };
    let prefix = format!("idem-scan-{}", &random_key().as_str()[..8]);
    let store = RedisStore::connect_with(&url, RedisOptions::default().prefix(&prefix))
        .await
        .unwrap();
    let mut raw = raw(&url).await;
    assert!(
        scan_all(&store, 10).await.is_empty(),
        "a new prefix is empty"
    );

    // Two keys of one slot, a lapsing record under the greater.
    let slot = random_key().as_str()[..3].to_owned();
    let low = IdempotencyKey::parse(&format!("{slot}{}", "0".repeat(61))).unwrap();
    let high = IdempotencyKey::parse(&format!("{slot}{}", "1".repeat(61))).unwrap();
    let fence = acquire(&store, &high).await;
    store
        .complete(&high, fence, &sent("m-0"), Duration::from_millis(50))
        .await
        .unwrap();
    let mut keys = Vec::new();
    for i in 0..30 {
        let key = random_key();
        let fence = acquire(&store, &key).await;
        if i % 2 == 0 {
            store
                .complete(&key, fence, &sent("m-1"), Duration::from_secs(600))
                .await
                .unwrap();
        }
        keys.push(key);
    }
    keys.sort();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let index = format!("{prefix}:{{{slot}}}:keys");
    let indexed: Vec<String> = redis::cmd("ZRANGE")
        .arg(&index)
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(indexed.contains(&high.as_str().to_owned()), "{indexed:?}");

    for page in [1, 4, 1000] {
        let found: Vec<IdempotencyKey> = scan_all(&store, page)
            .await
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(found, keys, "page size {page}");
    }
    // RESP3 answers HGETALL with a map, not a list.
    let resp3 = RedisStore::connect_with(
        &format!("{url}?protocol=resp3"),
        RedisOptions::default().prefix(&prefix),
    )
    .await
    .unwrap();
    let found: Vec<IdempotencyKey> = scan_all(&resp3, 7)
        .await
        .into_iter()
        .map(|r| r.key)
        .collect();
    assert_eq!(found, keys, "over RESP3");

    // A claim next to the lapsed key drops it from the index.
    acquire(&store, &low).await;
    let indexed: Vec<String> = redis::cmd("ZRANGE")
        .arg(&index)
        .arg(0)
        .arg(-1)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(indexed.contains(&low.as_str().to_owned()), "{indexed:?}");
    assert!(!indexed.contains(&high.as_str().to_owned()), "{indexed:?}");

    // A released record leaves its index.
    let gone = random_key();
    let fence = acquire(&store, &gone).await;
    store.release(&gone, fence).await.unwrap();
    let rank: Option<i64> = redis::cmd("ZRANK")
        .arg(format!("{prefix}:{{{}}}:keys", &gone.as_str()[..3]))
        .arg(gone.as_str())
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(rank, None, "a released key is still indexed");

    for bad in ["", "xyz", "abcd", &"g".repeat(64)] {
        assert!(
            matches!(store.scan(Some(bad), 10).await, Err(StoreError::Config(_))),
            "cursor {bad:?} accepted"
        );
    }
}

/// Data written by idem 0.1 (schema version 1: hashes without call details,
/// worker or audit, and no indexes) is migrated when a store connects: the
/// version becomes 2, its records read unchanged and are found by scans,
/// its fences continue, and an operator can settle its unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_written_by_schema_version_1_is_migrated_and_reads() {
    let Some(url) = server_url("redis schema 1").await else {
        return;
    };
    let prefix = format!("idem-v1-{}", &random_key().as_str()[..8]);
    let mut raw = raw(&url).await;
    let (done, unknown, running) = (random_key(), random_key(), random_key());
    let fp = "f".repeat(64);
    let far = 4_000_000_000_000u64;
    let hset = |key: &IdempotencyKey, fields: &[(&str, String)]| {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(format!(
            "{prefix}:{{{}}}:r:{}",
            &key.as_str()[..3],
            key.as_str()
        ));
        for (name, value) in fields {
            cmd.arg(*name).arg(value);
        }
        cmd
    };
    let common = |fence: u64| {
        vec![
            ("tool", "send_email".to_owned()),
            ("fp", fp.clone()),
            ("created", "1700000000000".to_owned()),
            ("fence", fence.to_string()),
        ]
    };
    let completed = |fence: u64, outcome: &str| {
        let mut fields = common(fence);
        fields.extend([
            ("state", "c".to_owned()),
            ("outcome", outcome.to_owned()),
            ("done", "1700000000100".to_owned()),
            ("exp", far.to_string()),
        ]);
        fields
    };
    let mut pipe = redis::pipe();
    pipe.add_command(hset(
        &done,
        &completed(1, r#"{"status":"success","output":"{\"id\":\"m-1\"}"}"#),
    ))
    .add_command(hset(&unknown, &{
        let mut fields = completed(2, r#"{"status":"unknown","reason":"owner vanished"}"#);
        fields.push(("s:idem:attempt", "1".to_owned()));
        fields
    }))
    .add_command(hset(&running, &{
        let mut fields = common(3);
        fields.extend([("state", "f".to_owned()), ("lease", far.to_string())]);
        fields
    }));
    for key in [&done, &unknown] {
        pipe.cmd("PEXPIREAT")
            .arg(format!(
                "{prefix}:{{{}}}:r:{}",
                &key.as_str()[..3],
                key.as_str()
            ))
            .arg(far);
    }
    for key in [&done, &unknown, &running] {
        pipe.cmd("SET")
            .arg(format!("{prefix}:{{{}}}:fence", &key.as_str()[..3]))
            .arg(3);
    }
    pipe.cmd("SET").arg(format!("{prefix}:schema")).arg(1);
    let _: () = pipe.query_async(&mut raw).await.unwrap();

    let store = RedisStore::connect_with(&url, RedisOptions::default().prefix(&prefix))
        .await
        .unwrap();
    let version: String = redis::cmd("GET")
        .arg(format!("{prefix}:schema"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(version, "2");

    let f = fingerprint();
    match store.claim(&request(&done, &f)).await.unwrap() {
        ClaimOutcome::Completed(record) => {
            assert_eq!(
                record.outcome(),
                Some(&Outcome::Success {
                    output: OutputJson::from_value(&json!({ "id": "m-1" }))
                })
            );
            assert!(record.info.is_empty() && record.worker.is_none() && record.audit.is_empty());
        }
        other => panic!("expected the 0.1 record, got {other:?}"),
    }
    assert!(matches!(
        store.claim(&request(&running, &f)).await.unwrap(),
        ClaimOutcome::InFlight {
            fence: Fence(3),
            ..
        }
    ));
    let mut expected = vec![done.clone(), unknown.clone(), running.clone()];
    expected.sort();
    for page in [1, 2, 10] {
        let found: Vec<IdempotencyKey> = scan_all(&store, page)
            .await
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(found, expected, "page size {page}");
    }

    // An operator settles the unknown outcome.
    let record = store.get(&unknown).await.unwrap().unwrap();
    assert_eq!(record.status(), Status::Unknown);
    let now = store.now().await.unwrap();
    let mut settled = record.clone();
    settled.state = RecordState::Completed {
        fence: record.fence(),
        outcome: sent("ch_1"),
        completed_at: now,
        expires_at: now.plus(Duration::from_secs(600)),
    };
    let fence = store
        .replace(
            &unknown,
            Expected {
                fence: Fence(2),
                state: ExpectedState::Completed,
            },
            Some(&settled),
            None,
        )
        .await
        .unwrap()
        .unwrap();
    assert!(fence.0 > 3, "fences continue after 0.1's, got {fence}");
    let read = store.get(&unknown).await.unwrap().unwrap();
    assert_eq!(read.status(), Status::Succeeded);
    assert_eq!(read.steps.get("idem:attempt"), Some(&json!(1)));

    // A second store finds the data migrated.
    RedisStore::connect_with(&url, RedisOptions::default().prefix(&prefix))
        .await
        .unwrap();
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
        .arg(99)
        .query_async(&mut raw)
        .await
        .unwrap();
    match RedisStore::connect_with(&url, RedisOptions::default().prefix(&prefix)).await {
        Err(StoreError::SchemaTooNew {
            found, supported, ..
        }) => assert_eq!(
            (found, supported),
            (99, idem_runtime::store::redis::SCHEMA_VERSION)
        ),
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

/// Two applications share one server, each with its own `?prefix=`: a key
/// one of them recorded is unknown to the other, which runs its own call
/// under it, and each scan lists only its own records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_prefixes_on_one_server_do_not_see_each_others_records() {
    let Some(url) = server_url("two_prefixes_on_one_server_do_not_see_each_others_records").await
    else {
        return;
    };
    let app1 = RedisStore::connect(&format!("{url}?prefix=app1"))
        .await
        .unwrap();
    let app2 = RedisStore::connect(&format!("{url}?prefix=app2"))
        .await
        .unwrap();
    let key = random_key();
    let f = fingerprint();
    let fence = acquire(&app1, &key).await;
    app1.complete(&key, fence, &sent("app1"), Duration::from_secs(600))
        .await
        .unwrap();

    assert!(
        app2.get(&key).await.unwrap().is_none(),
        "app2 read app1's record"
    );
    let ClaimOutcome::Acquired { fence, .. } = app2.claim(&request(&key, &f)).await.unwrap() else {
        panic!("app2 did not own the key app1 recorded");
    };
    app2.complete(&key, fence, &sent("app2"), Duration::from_secs(600))
        .await
        .unwrap();
    let outcome = |r: Option<Record>| r.and_then(|r| r.outcome().cloned());
    assert_eq!(outcome(app1.get(&key).await.unwrap()), Some(sent("app1")));
    assert_eq!(outcome(app2.get(&key).await.unwrap()), Some(sent("app2")));

    for (store, tag) in [(&app1, "app1"), (&app2, "app2")] {
        let listed = scan_all(store, 100).await;
        assert_eq!(listed.len(), 1, "{tag} lists another prefix's records");
        assert_eq!(outcome(listed.into_iter().next()), Some(sent(tag)));
    }
    let mut raw = raw(&url).await;
    let app1_keys: Vec<String> = redis::cmd("KEYS")
        .arg("app1:*")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!app1_keys.is_empty() && app1_keys.iter().all(|k| k.starts_with("app1:")));
}

/// A misspelt URL option is refused by name, before anything connects.
#[tokio::test]
async fn an_unknown_url_option_is_refused_by_name() {
    let err = RedisStore::connect("redis://127.0.0.1:1/?prefx=app1")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Config(_)), "{err:?}");
    assert!(err.to_string().contains(r#""prefx""#), "{err}");
}

/// This build has no Redis TLS feature: a TLS cluster URL is a
/// configuration error, as a TLS single-server URL is, not a connection
/// attempt in clear text.
#[tokio::test]
async fn a_tls_cluster_url_is_refused_without_a_tls_build() {
    for url in ["rediss+cluster://127.0.0.1:1", "rediss://127.0.0.1:1"] {
        let err = RedisStore::connect(url).await.unwrap_err();
        assert!(matches!(err, StoreError::Config(_)), "{url}: {err:?}");
    }
}

/// Connected read-only, a store writes nothing at all: a prefix no idem
/// store ever used is refused as not an idem store (and stays empty), an
/// idem store reads as usual and refuses every write, and data of layout
/// version 1 is refused naming `idem migrate`, not migrated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_connected_read_only_writes_nothing() {
    let Some(server) = own_server("redis read-only").await else {
        return;
    };
    let url = server.url();
    let mut raw = raw(&url).await;
    let _: () = redis::cmd("SET")
        .arg("other-app:session")
        .arg("x")
        .query_async(&mut raw)
        .await
        .unwrap();

    let writes = writes_applied(&mut raw).await;
    for prefix in ["idem", "other-app"] {
        match RedisStore::connect_read_only(&format!("{url}?prefix={prefix}")).await {
            Err(e @ StoreError::NotAnIdemStore { .. }) => {
                assert!(e.to_string().contains("is not an idem store"), "{e}")
            }
            other => panic!("prefix {prefix}: expected NotAnIdemStore, got {other:?}"),
        }
    }
    assert_eq!(
        writes_applied(&mut raw).await,
        writes,
        "nothing was written"
    );

    let live = RedisStore::connect(&url).await.unwrap();
    assert_eq!(
        live.schema_found(),
        None,
        "the first store writes the layout"
    );
    let (done, running) = (random_key(), random_key());
    let fence = acquire(&live, &done).await;
    live.complete(&done, fence, &sent("m-1"), Duration::from_secs(3600))
        .await
        .unwrap();
    let running_fence = acquire(&live, &running).await;

    let writes = writes_applied(&mut raw).await;
    let reader = idem_runtime::store::connect_read_only(&url).await.unwrap();
    assert_eq!(reader.scan(None, 100).await.unwrap().records.len(), 2);
    assert_eq!(
        reader.get(&done).await.unwrap().unwrap().outcome(),
        Some(&sent("m-1"))
    );
    every_write_is_refused_read_only(&*reader, &running, running_fence).await;
    reader.close().await;
    assert_eq!(
        writes_applied(&mut raw).await,
        writes,
        "nothing was written"
    );

    // Layout version 1, under a prefix of its own.
    let _: () = redis::cmd("SET")
        .arg("old:schema")
        .arg("1")
        .query_async(&mut raw)
        .await
        .unwrap();
    let writes = writes_applied(&mut raw).await;
    match RedisStore::connect_read_only(&format!("{url}?prefix=old")).await {
        Err(e @ StoreError::SchemaTooOld { found: 1, .. }) => {
            assert!(e.to_string().contains("idem migrate"), "{e}")
        }
        other => panic!("expected SchemaTooOld, got {other:?}"),
    }
    assert_eq!(
        writes_applied(&mut raw).await,
        writes,
        "nothing was migrated"
    );
    let migration = idem_runtime::store::url::migrate(&format!("{url}?prefix=old"))
        .await
        .unwrap();
    assert_eq!((migration.from, migration.to), (Some(1), 2));
    live.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_corrupt_hash_does_not_fail_a_scan_it_is_reported_beside_the_rest() {
    let Some(url) = server_url("redis corrupt scan").await else {
        return;
    };
    let prefix = format!("idem-corrupt-{}", &random_key().as_str()[..8]);
    let store = RedisStore::connect(&format!("{url}?prefix={prefix}"))
        .await
        .unwrap();
    let keys = [random_key(), random_key(), random_key()];
    for key in &keys {
        let fence = acquire(&store, key).await;
        store
            .complete(key, fence, &sent("m"), Duration::from_secs(3600))
            .await
            .unwrap();
    }
    let mut raw = raw(&url).await;
    let _: () = redis::cmd("HSET")
        .arg(store.record_key(&keys[1]))
        .arg("state")
        .arg("nonsense")
        .query_async(&mut raw)
        .await
        .unwrap();
    let page = store.scan(None, 100).await.unwrap();
    let mut listed: Vec<_> = page.records.iter().map(|r| r.key.clone()).collect();
    listed.sort();
    let mut good = vec![keys[0].clone(), keys[2].clone()];
    good.sort();
    assert_eq!(listed, good);
    assert_eq!(page.corrupt.len(), 1);
    assert_eq!(page.corrupt[0].key, keys[1].as_str());
    store.close().await;
}

/// A store written before unknown outcomes were kept until settled holds
/// them with their record's retention as the key's TTL, which Redis would
/// act on by deleting them. The first read-write connect of this build
/// makes each never lapse, and leaves every other record's TTL alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_outcomes_stored_with_a_key_ttl_are_kept_once_this_build_connects() {
    let Some(url) = server_url("redis keep unknown outcomes").await else {
        return;
    };
    let prefix = format!("idem-keep-{}", &random_key().as_str()[..8]);
    let url = format!("{url}?prefix={prefix}");
    let old = RedisStore::connect(&url).await.unwrap();
    let (unknown, done) = (random_key(), random_key());
    let outcome = Outcome::Unknown {
        reason: "the owner vanished".into(),
    };
    // As idem 0.2 stored them: with a retention.
    let fence = acquire(&old, &unknown).await;
    old.complete(&unknown, fence, &outcome, Duration::from_secs(2))
        .await
        .unwrap();
    let fence = acquire(&old, &done).await;
    old.complete(&done, fence, &sent("m"), Duration::from_secs(2))
        .await
        .unwrap();
    let mut raw = raw(&url).await;
    // The store predates the fix.
    let _: () = redis::cmd("DEL")
        .arg(format!("{prefix}:unknown_kept"))
        .query_async(&mut raw)
        .await
        .unwrap();
    let pttl = |key: String| {
        let mut raw = raw.clone();
        async move {
            let ms: i64 = redis::cmd("PTTL")
                .arg(key)
                .query_async(&mut raw)
                .await
                .unwrap();
            ms
        }
    };
    assert!(pttl(old.record_key(&unknown)).await > 0);
    old.close().await;

    let new = RedisStore::connect(&url).await.unwrap();
    assert_eq!(pttl(new.record_key(&unknown)).await, -1, "no key TTL left");
    assert!(
        pttl(new.record_key(&done)).await > 0,
        "other records keep theirs"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let kept = new
        .get(&unknown)
        .await
        .unwrap()
        .expect("kept until settled");
    assert_eq!(kept.outcome(), Some(&outcome));
    assert_eq!(kept.expires_at(), None);
    assert!(new.get(&done).await.unwrap().is_none(), "expired as before");
    new.close().await;
}
