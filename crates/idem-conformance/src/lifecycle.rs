//! Cases for one call's life on a store: claims, completions, takeovers,
//! leases and renewals, releases, sweeps, values kept exactly, waiters.

use std::collections::BTreeMap;
use std::time::Duration;

use idem_runtime::record::{FailureCode, Fence, Outcome, RecordState, StoredFailure};
use idem_runtime::store::{ClaimOutcome, FenceHolder, StoreError};
use serde_json::json;

use super::{
    acquire, assert_stale, complete, fp, outcome_of, random_key, req, success, woken_waiter,
    Harness,
};
use idem_runtime::store::StoreExt;

/// A new key is acquired, and the record is in flight under that fence.
pub async fn claim_of_a_new_key_acquires<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let lease = h.tick();
    let fence = acquire(&*store, &req(&key, &f, lease)).await;
    let record = store.get(&key).await.unwrap().expect("record exists");
    assert_eq!(record.key, key);
    assert_eq!(record.tool, "conformance_tool");
    assert_eq!(record.fingerprint, f);
    assert!(matches!(record.state, RecordState::InFlight { fence: x, .. } if x == fence));
}

/// A second claim while the first owner's lease is live reports in flight.
pub async fn claim_while_in_flight_reports_owner<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick() * 5)).await;
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::InFlight { fence: owner, .. } => assert_eq!(owner, fence),
        other => panic!("expected in flight, got {other:?}"),
    }
}

/// A completed outcome is returned to later claims exactly as stored.
pub async fn completed_outcome_is_returned_exactly<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick())).await;
    complete(&*store, &key, fence, &success(7), h.tick() * 10).await;
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::Completed(record) => {
            assert_eq!(record.outcome(), Some(&success(7)));
            assert_eq!(record.fence(), fence);
        }
        other => panic!("expected completed, got {other:?}"),
    }
    // Failures and unknown outcomes are stored as faithfully.
    for outcome in [
        Outcome::Failure {
            failure: StoredFailure {
                code: FailureCode::Permanent,
                message: "card declined".into(),
                details: Some(json!({"decline_code": "insufficient_funds"})),
            },
        },
        Outcome::Unknown {
            reason: "owner vanished".into(),
        },
    ] {
        let key = random_key();
        let fence = acquire(&*store, &req(&key, &f, h.tick())).await;
        complete(&*store, &key, fence, &outcome, h.tick() * 10).await;
        let got = store.get(&key).await.unwrap().unwrap();
        assert_eq!(got.outcome(), Some(&outcome));
    }
}

/// The same key with other arguments is a key reuse; nothing changes. With
/// `check_fingerprint: false` (natural keys) it finds the existing record.
pub async fn key_reuse_with_other_arguments_is_reported<H: Harness>(h: H) {
    let store = h.store();
    let (key, a, b) = (random_key(), fp("a"), fp("b"));
    let fence = acquire(&*store, &req(&key, &a, h.tick())).await;
    match store.claim(&req(&key, &b, h.tick())).await.unwrap() {
        ClaimOutcome::KeyReused { tool, fingerprint } => {
            assert_eq!(tool, "conformance_tool");
            assert_eq!(fingerprint, a);
        }
        other => panic!("expected key reuse, got {other:?}"),
    }
    let mut natural = req(&key, &b, h.tick());
    natural.check_fingerprint = false;
    assert!(matches!(
        store.claim(&natural).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    // Another tool under the same key is refused even without the check.
    natural.tool = "another_tool";
    assert!(matches!(
        store.claim(&natural).await.unwrap(),
        ClaimOutcome::KeyReused { .. }
    ));
    complete(&*store, &key, fence, &success(1), h.tick()).await;
    assert_eq!(store.get(&key).await.unwrap().unwrap().fingerprint, a);
}

/// An owner whose lease expired and was taken over cannot complete, and the
/// new owner's outcome stands.
pub async fn stale_owner_cannot_complete<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let old = acquire(&*store, &req(&key, &f, h.tick())).await;
    h.advance(h.tick() * 2).await;
    let new = match store.claim(&req(&key, &f, h.tick() * 10)).await.unwrap() {
        ClaimOutcome::Acquired {
            fence,
            takeover: Some(t),
            ..
        } => {
            assert_eq!(t.previous, old);
            fence
        }
        other => panic!("expected a takeover, got {other:?}"),
    };
    assert_ne!(old, new);
    assert_stale(store.complete(&key, old, &success(1), h.tick() * 10).await);
    assert_stale(store.checkpoint(&key, old, "s", &json!(1), h.tick()).await);
    assert_stale(store.release(&key, old).await);
    complete(&*store, &key, new, &success(2), h.tick() * 10).await;
    assert_eq!(outcome_of(&*store, &key).await, Some(success(2)));
}

/// A completed outcome is never overwritten, not even by its own owner.
pub async fn completed_outcome_is_never_overwritten<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick())).await;
    complete(&*store, &key, fence, &success(1), h.tick() * 10).await;
    match store
        .complete(&key, fence, &success(2), h.tick() * 10)
        .await
    {
        Err(StoreError::StaleFence { current, .. }) => {
            assert_eq!(current, FenceHolder::Completed(fence))
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_stale(store.release(&key, fence).await);
    assert_eq!(outcome_of(&*store, &key).await, Some(success(1)));
}

/// Completing or releasing a key nobody holds is rejected.
pub async fn writes_to_an_absent_key_are_rejected<H: Harness>(h: H) {
    let store = h.store();
    let key = random_key();
    match store.complete(&key, Fence(1), &success(1), h.tick()).await {
        Err(StoreError::StaleFence { current, .. }) => assert_eq!(current, FenceHolder::Nobody),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_stale(store.release(&key, Fence(1)).await);
    assert!(store.get(&key).await.unwrap().is_none());
}

/// Step checkpoints are kept, extend the lease, and are handed to the owner
/// that takes over after a crash.
pub async fn steps_survive_a_takeover<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let old = acquire(&*store, &req(&key, &f, h.tick() * 2)).await;
    store
        .checkpoint(
            &key,
            old,
            "charge",
            &json!({"charge_id": "ch_1"}),
            h.tick() * 2,
        )
        .await
        .unwrap();
    h.advance(h.tick() * 3).await;
    match store.claim(&req(&key, &f, h.tick() * 10)).await.unwrap() {
        ClaimOutcome::Acquired {
            steps,
            takeover: Some(_),
            ..
        } => {
            let mut want = BTreeMap::new();
            want.insert("charge".to_owned(), json!({"charge_id": "ch_1"}));
            assert_eq!(steps, want);
        }
        other => panic!("expected a takeover with steps, got {other:?}"),
    }
}

/// A checkpoint extends the owner's lease.
pub async fn checkpoint_extends_the_lease<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick() * 2)).await;
    h.advance(h.tick()).await;
    store
        .checkpoint(&key, fence, "one", &json!(1), h.tick() * 4)
        .await
        .unwrap();
    h.advance(h.tick() * 2).await;
    // Without the extension the lease would have run out by now.
    assert!(matches!(
        store.claim(&req(&key, &f, h.tick())).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    complete(&*store, &key, fence, &success(1), h.tick() * 10).await;
}

/// A renewal extends the owner's lease and changes nothing else; a stale
/// fence cannot renew (the superseded owner learns it lost the key).
pub async fn renewal_extends_the_lease_and_is_fenced<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick() * 2)).await;
    h.advance(h.tick()).await;
    store.renew(&key, fence, h.tick() * 4).await.unwrap();
    h.advance(h.tick() * 2).await;
    // Without the renewal the lease would have run out by now.
    assert!(matches!(
        store.claim(&req(&key, &f, h.tick())).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.steps.is_empty(), "a renewal records no step");
    // Once the lease runs out and another owner takes over, the first
    // owner's renewal is refused.
    h.advance(h.tick() * 3).await;
    let ClaimOutcome::Acquired { fence: second, .. } =
        store.claim(&req(&key, &f, h.tick() * 10)).await.unwrap()
    else {
        panic!("the lapsed lease is taken over");
    };
    assert_stale(store.renew(&key, fence, h.tick() * 10).await);
    store.renew(&key, second, h.tick() * 10).await.unwrap();
    // A renewal never revives a completed or absent record.
    complete(&*store, &key, second, &success(1), h.tick() * 10).await;
    assert_stale(store.renew(&key, second, h.tick()).await);
    assert_stale(store.renew(&random_key(), second, h.tick()).await);
}

/// A released key can be claimed again, under a fence never used before, and
/// the earlier fence cannot write to the new claim.
pub async fn released_key_is_claimed_with_a_new_fence<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let first = acquire(&*store, &req(&key, &f, h.tick())).await;
    store.release(&key, first).await.unwrap();
    assert!(store.get(&key).await.unwrap().is_none());
    let second = acquire(&*store, &req(&key, &f, h.tick())).await;
    assert_ne!(first, second);
    assert_stale(store.complete(&key, first, &success(1), h.tick()).await);
    complete(&*store, &key, second, &success(2), h.tick() * 10).await;
}

/// An expired completed record reads as absent, is swept, and the key can be
/// claimed anew.
pub async fn expired_record_is_swept_and_key_reclaimed<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick())).await;
    complete(&*store, &key, fence, &success(1), h.tick() * 2).await;
    h.advance(h.tick() * 3).await;
    assert!(
        store.get(&key).await.unwrap().is_none(),
        "expired record still readable"
    );
    let swept = store.sweep().await.unwrap();
    assert!(
        swept >= 1 || h.expires_natively(),
        "sweep deleted nothing though a record had expired"
    );
    let again = acquire(&*store, &req(&key, &f, h.tick())).await;
    assert_ne!(again, fence);
}

/// The sweeper deletes expired completed records only: never an in-flight
/// record, however old, and never a live completed one.
pub async fn sweep_spares_in_flight_and_live_records<H: Harness>(h: H) {
    let store = h.store();
    let f = fp("a");
    let (in_flight, live, expired) = (random_key(), random_key(), random_key());
    acquire(&*store, &req(&in_flight, &f, h.tick())).await;
    let fl = acquire(&*store, &req(&live, &f, h.tick())).await;
    complete(&*store, &live, fl, &success(1), h.tick() * 100).await;
    let fe = acquire(&*store, &req(&expired, &f, h.tick())).await;
    complete(&*store, &expired, fe, &success(2), h.tick()).await;
    h.advance(h.tick() * 3).await;
    store.sweep().await.unwrap();
    assert!(store.get(&expired).await.unwrap().is_none());
    let record = store
        .get(&in_flight)
        .await
        .unwrap()
        .expect("in-flight record kept");
    assert!(record.outcome().is_none());
    assert_eq!(outcome_of(&*store, &live).await, Some(success(1)));
}

/// Step values and outputs come back exactly as written, through every
/// encoding a store uses: empty arrays stay arrays and empty objects stay
/// objects, integers beyond 2^53 keep every digit, escapes survive.
pub async fn values_round_trip_exactly<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick() * 10)).await;
    let steps = [
        ("empty_array", json!([])),
        ("empty_object", json!({})),
        (
            "integers",
            json!({
                "u64_max": u64::MAX,
                "i64_min": i64::MIN,
                "two_53_plus_1": 9_007_199_254_740_993_u64,
                "array": [[], {}, 0, -0.0],
            }),
        ),
        ("float", json!(0.1)),
        ("text", json!("é \u{0} \"quoted\" \\ 𝄞 </script>")),
        ("null", serde_json::Value::Null),
        ("", json!("a step with an empty name")),
    ];
    for (name, value) in &steps {
        store
            .checkpoint(&key, fence, name, value, h.tick() * 10)
            .await
            .unwrap();
    }
    // Output text is kept byte for byte, even where a JSON parser would
    // round (an integer beyond u64) or respell (1.0).
    let text = r#"{"id":123456789012345678901234567890,"list":[],"map":{},"x":1.0,"y":1e400}"#;
    let outcome = Outcome::Success {
        output: serde_json::from_value(json!(text)).expect("output text"),
    };
    complete(&*store, &key, fence, &outcome, h.tick() * 10).await;
    let want: BTreeMap<String, serde_json::Value> = steps
        .iter()
        .map(|(name, value)| (name.to_string(), value.clone()))
        .collect();
    let record = store.get(&key).await.unwrap().expect("record");
    assert_eq!(record.steps, want);
    assert_eq!(record.outcome(), Some(&outcome));
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::Completed(record) => {
            assert_eq!(record.outcome(), Some(&outcome));
            assert_eq!(record.steps, want);
        }
        other => panic!("expected completed, got {other:?}"),
    }
}

/// A lease or TTL too long to add to a timestamp (`Duration::MAX`, a TTL of
/// "forever") is as long as the store can keep: the owner keeps its lease,
/// the outcome stays recorded and is never swept. It must not wrap around
/// into the past, fail the write, or be rounded into another number.
pub async fn very_long_leases_and_ttls_mean_forever<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, Duration::MAX)).await;
    h.advance(h.tick() * 2).await;
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::InFlight { fence: owner, .. } => assert_eq!(owner, fence),
        other => panic!("a lease of Duration::MAX ran out: {other:?}"),
    }
    store
        .checkpoint(&key, fence, "one", &json!(1), Duration::MAX)
        .await
        .unwrap();
    assert!(matches!(
        store.claim(&req(&key, &f, h.tick())).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    complete(&*store, &key, fence, &success(4), Duration::MAX).await;
    h.advance(h.tick() * 2).await;
    store.sweep().await.unwrap();
    let record = store
        .get(&key)
        .await
        .unwrap()
        .expect("the outcome was lost");
    assert_eq!(record.outcome(), Some(&success(4)));
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::Completed(record) => assert_eq!(record.outcome(), Some(&success(4))),
        other => panic!("a TTL of Duration::MAX expired: {other:?}"),
    }
}

/// A waiter is woken when the owner completes, and sees the outcome.
pub async fn waiter_is_woken_by_completion<H: Harness>(h: H) {
    let (store, key) = (h.store(), random_key());
    let fence = acquire(&*store, &req(&key, &fp("a"), h.tick() * 100)).await;
    let record = woken_waiter(&store, &key, || async {
        store
            .complete(&key, fence, &success(3), h.tick() * 10)
            .await
            .unwrap()
    })
    .await
    .expect("record");
    assert_eq!(record.outcome(), Some(&success(3)));
}

/// A waiter is woken when the owner releases the key, and sees no record.
pub async fn waiter_is_woken_by_release<H: Harness>(h: H) {
    let (store, key) = (h.store(), random_key());
    let fence = acquire(&*store, &req(&key, &fp("a"), h.tick() * 100)).await;
    let record = woken_waiter(&store, &key, || async {
        store.release(&key, fence).await.unwrap()
    })
    .await;
    assert!(record.is_none());
}
