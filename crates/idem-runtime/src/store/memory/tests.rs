//! The memory store's own cases, beside the conformance suite.

use super::*;
use crate::clock::ManualClock;
use crate::key::Fingerprint;
use crate::record::{CallInfoRef, OutputJson};

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

/// Claim `key` and complete it with `ttl`.
async fn record(store: &MemoryStore, key: &IdempotencyKey, ttl: Duration) {
    let fingerprint = Fingerprint::new("f");
    let req = ClaimRequest {
        key,
        tool: "t",
        fingerprint: &fingerprint,
        check_fingerprint: true,
        lease: Duration::from_secs(60),
        info: CallInfoRef::EMPTY,
        worker: None,
        durable: true,
    };
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
        key: &in_flight,
        tool: "t",
        fingerprint: &fingerprint,
        check_fingerprint: true,
        lease: Duration::from_millis(1),
        info: CallInfoRef::EMPTY,
        worker: None,
        durable: true,
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
