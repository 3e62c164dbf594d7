//! The memory store's own cases, beside the conformance suite.

use super::map::{Body, Id};
use super::*;
use crate::clock::ManualClock;
use crate::key::Fingerprint;
use crate::record::{CallInfoRef, OutputJson};
use crate::store::{ClaimOutcome, StoreExt};

/// The `n`th key, spread as idem's own (SHA-256) keys are: the store
/// hashes a key by its first 16 hex digits, and keys alike there would
/// all fall in one bucket of the map.
fn key(n: u64) -> IdempotencyKey {
    let spread = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    IdempotencyKey::parse(&format!("{spread:016x}{n:048x}")).expect("64 hex digits")
}

fn store() -> (MemoryStore, ManualClock) {
    let clock = ManualClock::new(1_000_000);
    (MemoryStore::with_clock(Arc::new(clock.clone())), clock)
}

/// A fingerprint that is a digest, as the executor's are: the store
/// holds such records compact.
fn digest() -> Fingerprint {
    Fingerprint::new("ab".repeat(32))
}

/// A claim of `key` by tool `t`, durable, with a lease of 60 s and no
/// call info or worker: what most cases claim (the interceptor's too).
pub(in crate::store) fn request<'a>(
    key: &'a IdempotencyKey,
    fingerprint: &'a Fingerprint,
) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        tool: "t",
        fingerprint,
        check_fingerprint: true,
        lease: Duration::from_secs(60),
        info: CallInfoRef::EMPTY,
        worker: None,
        durable: true,
    }
}

/// Claim `key` and complete it with `ttl`.
async fn record(store: &MemoryStore, key: &IdempotencyKey, ttl: Duration) {
    let fingerprint = digest();
    let req = request(key, &fingerprint);
    let ClaimOutcome::Acquired { fence, .. } = store.claim(&req).await.unwrap() else {
        panic!("expected to acquire {key:?}");
    };
    let outcome = Outcome::Success {
        output: OutputJson::from_value(&serde_json::json!(1)),
    };
    store.complete(key, fence, &outcome, ttl).await.unwrap();
}

fn indexed(store: &MemoryStore) -> usize {
    store.expiry.lock().unwrap().len()
}

#[tokio::test]
async fn sweep_removes_the_expired_and_only_them_once() {
    let (store, clock) = store();
    for n in 0..10_000 {
        record(&store, &key(n), Duration::from_millis(100 + n % 3_000)).await;
    }
    for n in 10_000..10_010 {
        record(&store, &key(n), Duration::from_secs(3_600)).await;
    }
    // An in-flight record, never indexed, never swept.
    let fingerprint = Fingerprint::new("f");
    let in_flight = key(99_999);
    let req = ClaimRequest {
        lease: Duration::from_millis(1),
        ..request(&in_flight, &fingerprint)
    };
    store.claim(&req).await.unwrap();
    assert_eq!(indexed(&store), 10_010);
    clock.advance(Duration::from_millis(1_599));
    // Part-way through the bucket the clock is in: exactly the records
    // expired by now (ttl 100..=1599 ms), not the rest of the bucket.
    assert_eq!(store.sweep().await.unwrap(), 5_500);
    clock.advance(Duration::from_secs(10));
    assert_eq!(store.sweep().await.unwrap(), 4_500);
    assert_eq!(store.sweep().await.unwrap(), 0);
    assert_eq!(store.len(), 11);
    assert_eq!(indexed(&store), 10);
    for n in 10_000..10_010 {
        assert!(store.get(&key(n)).await.unwrap().is_some());
    }
    assert!(store.get(&in_flight).await.unwrap().is_some());
}

#[tokio::test]
async fn a_record_given_a_later_expiry_outlives_its_first_one() {
    let (store, clock) = store();
    let k = key(1);
    record(&store, &k, Duration::from_millis(10)).await;
    clock.advance(Duration::from_millis(20));
    // Expired but not swept: claimed anew and completed with a longer
    // TTL. Its first index entry is now stale.
    record(&store, &k, Duration::from_secs(5)).await;
    assert_eq!(indexed(&store), 2);
    clock.advance(Duration::from_secs(2));
    assert_eq!(store.sweep().await.unwrap(), 0);
    assert!(store.get(&k).await.unwrap().is_some());
    assert_eq!(indexed(&store), 1, "the stale entry is dropped");
    clock.advance(Duration::from_secs(4));
    assert_eq!(store.sweep().await.unwrap(), 1);
    assert!(store.get(&k).await.unwrap().is_none());
    assert_eq!(store.len(), 0);
}

#[tokio::test]
async fn a_key_indexed_twice_is_counted_once() {
    let (store, clock) = store();
    let k = key(2);
    record(&store, &k, Duration::from_millis(10)).await;
    clock.advance(Duration::from_millis(20));
    record(&store, &k, Duration::from_millis(10)).await;
    assert_eq!(indexed(&store), 2);
    clock.advance(Duration::from_secs(5));
    assert_eq!(store.sweep().await.unwrap(), 1);
    assert_eq!(store.sweep().await.unwrap(), 0);
    assert_eq!(indexed(&store), 0);
}

#[tokio::test]
async fn a_replaced_record_is_swept_at_its_new_expiry() {
    let (store, clock) = store();
    let k = key(3);
    record(&store, &k, Duration::from_millis(10)).await;
    let mut longer = store.get(&k).await.unwrap().unwrap();
    if let crate::record::RecordState::Completed { expires_at, .. } = &mut longer.state {
        *expires_at = clock.now().plus(Duration::from_secs(60));
    }
    let current = store.get(&k).await.unwrap().unwrap();
    store
        .replace(
            &k,
            Expected {
                fence: current.fence(),
                state: super::super::ExpectedState::Completed,
            },
            Some(&longer),
            None,
        )
        .await
        .unwrap();
    clock.advance(Duration::from_secs(30));
    assert_eq!(store.sweep().await.unwrap(), 0);
    assert!(store.get(&k).await.unwrap().is_some());
    clock.advance(Duration::from_secs(31));
    assert_eq!(store.sweep().await.unwrap(), 1);
}

/// A key whose first 64 bits are `bits`, told apart by `n`.
fn key_with_bits(bits: u64, n: u64) -> IdempotencyKey {
    IdempotencyKey::parse(&format!("{bits:016x}{n:048x}")).expect("64 hex digits")
}

fn is_lean(store: &MemoryStore, key: &IdempotencyKey) -> bool {
    let id = Id::of(key);
    let shard = store.records.read(&id);
    matches!(shard.get(&id).map(|e| &e.body), Some(Body::Lean(_)))
}

#[tokio::test]
async fn a_sweep_spares_live_and_in_flight_records_that_share_an_expired_ones_bits() {
    let (store, clock) = store();
    let bits = 0xdead_beef_0123_4567;
    let (expired, live, in_flight) = (
        key_with_bits(bits, 1),
        key_with_bits(bits, 2),
        key_with_bits(bits, 3),
    );
    assert_eq!(expired.bits(), live.bits());
    record(&store, &expired, Duration::from_millis(10)).await;
    record(&store, &live, Duration::from_secs(3_600)).await;
    let fingerprint = digest();
    let req = ClaimRequest {
        lease: Duration::from_millis(1),
        ..request(&in_flight, &fingerprint)
    };
    store.claim(&req).await.unwrap();
    clock.advance(Duration::from_secs(5));
    // The in-flight record's lease ran out long ago: still never swept.
    assert_eq!(store.sweep().await.unwrap(), 1);
    assert!(store.get(&expired).await.unwrap().is_none());
    assert!(store.get(&live).await.unwrap().is_some());
    assert!(store.get(&in_flight).await.unwrap().is_some());
    assert_eq!(store.len(), 2);
    // Both expired now: each removed once, though one's index entry
    // finds the other too.
    record(&store, &expired, Duration::from_millis(10)).await;
    clock.advance(Duration::from_secs(3_600));
    assert_eq!(store.sweep().await.unwrap(), 2);
    assert_eq!(store.sweep().await.unwrap(), 0);
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn a_duplicate_of_a_completed_call_is_answered_with_its_outcome_alone() {
    let (store, _clock) = store();
    let k = key(7);
    record(&store, &k, Duration::from_secs(60)).await;
    assert!(is_lean(&store, &k));
    let fingerprint = digest();
    let req = request(&k, &fingerprint);
    let stored = store.get(&k).await.unwrap().expect("recorded");
    let local = store.claim_local(&req).unwrap().unwrap();
    assert_eq!(
        local,
        LocalClaim::Completed(stored.outcome().unwrap().clone())
    );
    // The general path answers with the whole record.
    let ClaimOutcome::Completed(record) = store.claim(&req).await.unwrap() else {
        panic!("completed");
    };
    assert_eq!(*record, stored);
    // Another tool under the key: a key reuse, on both paths alike.
    let other = ClaimRequest { tool: "u", ..req };
    let reused = store.claim(&other).await.unwrap();
    assert!(matches!(&reused, ClaimOutcome::KeyReused { tool, .. } if tool == "t"));
    assert_eq!(
        store.claim_local(&other).unwrap().unwrap(),
        LocalClaim::Claim(reused)
    );
}

/// Claim `key` with `args` and `fingerprint`, complete it, and check that
/// it reads back as the transitions would have written it.
async fn round_trip(
    store: &MemoryStore,
    key: &IdempotencyKey,
    args: &str,
    fingerprint: &Fingerprint,
) {
    let req = ClaimRequest {
        info: CallInfoRef {
            namespace: Some("default"),
            args: Some(args),
            ..CallInfoRef::EMPTY
        },
        worker: Some("host:1"),
        ..request(key, fingerprint)
    };
    let now = store.clock.now();
    let ClaimOutcome::Acquired { fence, .. } = store.claim(&req).await.unwrap() else {
        panic!("acquired");
    };
    let mut expected = transition::claim(None, &req, now, || fence).write.unwrap();
    assert_eq!(store.get(key).await.unwrap().as_ref(), Some(&expected));
    let outcome = Outcome::Success {
        output: OutputJson::from_value(&serde_json::json!("ok")),
    };
    let ttl = Duration::from_secs(60);
    store.complete(key, fence, &outcome, ttl).await.unwrap();
    transition::complete_in_place(Some(&mut expected), key, fence, &outcome, ttl, now).unwrap();
    assert_eq!(store.get(key).await.unwrap().as_ref(), Some(&expected));
}

#[tokio::test]
async fn long_texts_and_text_fingerprints_are_held_whole_and_read_back_exactly() {
    let (store, _clock) = store();
    let digest = crate::key::CanonicalArgs::from_value(&serde_json::json!({}))
        .unwrap()
        .fingerprint;
    let long = format!("\"{}\"", "é".repeat(40_000));
    round_trip(&store, &key(1), &long, &digest).await;
    assert!(!is_lean(&store, &key(1)), "args of 80 KB");
    round_trip(&store, &key(2), "{}", &Fingerprint::new("f")).await;
    assert!(
        !is_lean(&store, &key(2)),
        "a fingerprint that is not a digest"
    );
    round_trip(&store, &key(3), "{}", &digest).await;
    assert!(is_lean(&store, &key(3)));
}

#[tokio::test]
async fn a_step_makes_a_compact_record_whole_and_a_stale_fence_is_refused_alike() {
    let (store, _clock) = store();
    let k = key(4);
    let fingerprint = Fingerprint::new("ab".repeat(32));
    let req = request(&k, &fingerprint);
    let ClaimOutcome::Acquired { fence, .. } = store.claim(&req).await.unwrap() else {
        panic!("acquired");
    };
    assert!(is_lean(&store, &k));
    let stale = Fence(fence.0 + 100);
    let refused = store
        .checkpoint(
            &k,
            stale,
            "charge",
            &serde_json::json!(1),
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
    assert!(matches!(
        refused,
        StoreError::StaleFence { given, current: super::super::FenceHolder::InFlight(f), .. }
            if given == stale && f == fence
    ));
    store
        .renew(&k, fence, Duration::from_secs(90))
        .await
        .unwrap();
    assert!(is_lean(&store, &k), "a renewal keeps it compact");
    store
        .checkpoint(
            &k,
            fence,
            "charge",
            &serde_json::json!(1),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    assert!(!is_lean(&store, &k));
    let record = store.get(&k).await.unwrap().unwrap();
    assert_eq!(record.steps.get("charge"), Some(&serde_json::json!(1)));
    store.release(&k, fence).await.unwrap();
    assert!(matches!(
        store.release(&k, fence).await.unwrap_err(),
        StoreError::StaleFence {
            current: super::super::FenceHolder::Nobody,
            ..
        }
    ));
}
