//! What a call costs on a real `redis-server`: one round trip to claim,
//! one to complete and one for a duplicate, which writes nothing.

use std::time::Duration;

use crate::redis_support::{own_server, park, raw, writes_applied, writes_nothing};
use futures_util::StreamExt;
use idem_conformance::random_key;
use idem_redis::RedisStore;
use idem_runtime::store::ClaimOutcome;
use idem_runtime::store::StoreExt;
use idem_testkit::store_cases::{acquire, completed, fingerprint, request, sent};

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
    completed(&store, &key, &sent("m-1"), Duration::from_secs(600)).await;
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
    let why = "a duplicate of a call awaiting approval wrote";
    writes_nothing(&mut raw, why, async {
        for _ in 0..100 {
            let dup = store.claim(&request(&waiting, &f)).await.unwrap();
            assert!(matches!(dup, ClaimOutcome::AwaitingApproval(_)), "{dup:?}");
        }
    })
    .await;
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

/// A page of the whole audit log reads the audit index, then the streams
/// of the slots it names: two round trips for a page of 100, with events
/// spread over about 900 of the 4,096 slots (before the index: eight, one
/// per 512 slots). Every event is read once, in order, across the pages;
/// a page for one key reads its slot alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_the_whole_audit_log_costs_two_round_trips() {
    use idem_runtime::audit::{AuditEvent, AuditQuery};
    use idem_runtime::clock::Timestamp;
    use idem_runtime::record::AuditAction;
    let Some(server) = own_server("redis audit round trips").await else {
        return;
    };
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let start = store.now().await.unwrap().as_millis();
    let keys: Vec<_> = (0..1000).map(|_| random_key()).collect();
    for (n, key) in keys.iter().enumerate() {
        let event = AuditEvent {
            seq: None,
            // Three events a millisecond, some in one slot.
            at: Timestamp(start + n as u64 / 3),
            by: "ops".into(),
            action: AuditAction::Released,
            reason: Some(format!("event {n}")),
            key: key.clone(),
            tool: "send_email".into(),
            namespace: None,
            fingerprint: fingerprint(),
            before: None,
            after: None,
        };
        store.append_audit(&event).await.unwrap();
    }
    let (mut cursor, mut read, mut trips) = (None, Vec::new(), Vec::new());
    loop {
        let before = store.round_trips();
        let page = store
            .audit(&AuditQuery::default(), cursor.as_deref(), 100)
            .await
            .unwrap();
        trips.push(store.round_trips() - before);
        read.extend(page.events.into_iter().map(|e| e.reason.unwrap()));
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    eprintln!(
        "redis audit: {} pages of 100, round trips {trips:?}",
        trips.len()
    );
    // Oldest first (events of one millisecond in the order of their
    // slots), each once.
    let ms = |reason: &String| reason[6..].parse::<u64>().unwrap() / 3;
    assert!(read.windows(2).all(|w| ms(&w[0]) <= ms(&w[1])), "{read:?}");
    let mut sorted = read.clone();
    sorted.sort_by_key(|r| r[6..].parse::<u64>().unwrap());
    let expected: Vec<String> = (0..1000).map(|n| format!("event {n}")).collect();
    assert_eq!(sorted, expected, "every event once");
    assert!(
        trips.iter().all(|&t| t <= 2),
        "round trips per page: {trips:?}"
    );

    // The same log read as a store without the index reads it: every
    // slot's stream, 512 a round trip.
    let mut raw = crate::redis_support::raw(&server.url()).await;
    let _: () = redis::cmd("DEL")
        .arg("idem:{audit}:indexed_since")
        .query_async(&mut raw)
        .await
        .unwrap();
    let unindexed = RedisStore::connect_read_only(&server.url()).await.unwrap();
    let before = unindexed.round_trips();
    let page = unindexed
        .audit(&AuditQuery::default(), None, 100)
        .await
        .unwrap();
    let merged = unindexed.round_trips() - before;
    eprintln!("redis audit: a page of 100 without the index took {merged} round trips");
    assert_eq!(page.events.len(), 100);
    assert!(merged >= 8, "every slot's stream: {merged}");

    let before = store.round_trips();
    let one = store
        .audit(&AuditQuery::for_key(keys[500].clone()), None, 100)
        .await
        .unwrap();
    assert_eq!(one.events.len(), 1);
    assert_eq!(
        store.round_trips() - before,
        1,
        "a key's page reads its slot"
    );
}

/// A page of the open records reads the slots' open sets, never the
/// settled records: with 4,000 records of which 300 are open, a page of 50
/// costs three round trips (every slot's newest open key, the few slots
/// that may hold more of the page, the page's records), where reading the
/// store for each page costs 20 here, and grows with the store. Every open
/// record once, newest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_open_records_costs_three_round_trips() {
    use crate::redis_support::scan_open_all;
    use idem_runtime::record::Outcome;
    use idem_runtime::store::{scan_open_by_scanning, OpenCursor};
    let Some(server) = own_server("redis open round trips").await else {
        return;
    };
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let mut open = Vec::new();
    for n in 0..4000 {
        let key = random_key();
        let fence = acquire(&store, &key).await;
        match n % 20 {
            0 => open.push(key),
            10 if n % 40 == 10 => {
                let unknown = Outcome::Unknown {
                    reason: "timed out".into(),
                };
                store
                    .complete(&key, fence, &unknown, Duration::from_secs(600))
                    .await
                    .unwrap();
                open.push(key);
            }
            _ => store
                .complete(&key, fence, &sent("m"), Duration::from_secs(600))
                .await
                .unwrap(),
        }
    }
    let started = std::time::Instant::now();
    let (read, trips) = scan_open_all(&store, 50).await;
    let took = started.elapsed();
    eprintln!(
        "redis open: {} open of 4000 in {} pages of 50, round trips {trips:?}, {took:?} in all",
        open.len(),
        trips.len()
    );
    assert!(read
        .windows(2)
        .all(|w| OpenCursor::after(&w[0]).precedes(&w[1])));
    let mut keys: Vec<_> = read.iter().map(|r| r.key.clone()).collect();
    keys.sort();
    open.sort();
    assert_eq!(keys, open, "every open record once");
    assert_eq!(trips.len(), open.len().div_ceil(50));
    assert!(
        trips.iter().all(|&t| t == 3),
        "round trips per page: {trips:?}"
    );

    let before = store.round_trips();
    let page = scan_open_by_scanning(&store, None, 50).await.unwrap();
    let scanning = store.round_trips() - before;
    eprintln!("redis open: a page of 50 by scanning the store took {scanning} round trips");
    assert_eq!(page.records, read[..50]);
    assert!(scanning > 10, "{scanning}");
}
