//! Cases for the writes a store may make more cheaply than usual: claims
//! that need not be durable ([`ClaimRequest::durable`] `false`, an
//! `idempotent_write`'s), which it may commit without a flush, by another
//! statement or another path, and completions on the caller's thread
//! ([`FastPath::complete_local`](idem_runtime::store::FastPath::complete_local)). What such a write decides must be exactly
//! what the usual one decides.

use std::collections::BTreeMap;

use serde_json::json;

use super::{complete, fp, random_key, req, success, Harness};
use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::record::RecordState;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, ClaimRequest, Store};

/// A claim of `key` that need not be durable, with `lease`.
fn relaxed<'a>(
    key: &'a IdempotencyKey,
    fingerprint: &'a Fingerprint,
    lease: std::time::Duration,
) -> ClaimRequest<'a> {
    ClaimRequest {
        durable: false,
        ..req(key, fingerprint, lease)
    }
}

/// A claim that need not be durable acquires a new key, reports the owner
/// in flight, key reuse and a completed outcome, takes over an expired
/// lease with its steps, and claims an expired record anew, exactly as a
/// durable claim does; a durable claim sees what it wrote.
pub async fn a_claim_that_need_not_be_durable_decides_as_any_claim<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));

    let ClaimOutcome::Acquired {
        fence: first,
        takeover: None,
        ..
    } = store
        .claim(&relaxed(&key, &f, h.tick() * 20))
        .await
        .unwrap()
    else {
        panic!("a new key was not acquired");
    };
    let record = store.get(&key).await.unwrap().expect("the claim wrote");
    assert!(matches!(record.state, RecordState::InFlight { fence, .. } if fence == first));
    for claim in [relaxed(&key, &f, h.tick()), req(&key, &f, h.tick())] {
        match store.claim(&claim).await.unwrap() {
            ClaimOutcome::InFlight { fence, .. } => assert_eq!(fence, first),
            other => panic!("expected the owner in flight, got {other:?}"),
        }
    }
    let other = fp("b");
    assert!(matches!(
        store.claim(&relaxed(&key, &other, h.tick())).await.unwrap(),
        ClaimOutcome::KeyReused { .. }
    ));

    // The owner vanishes after a step (which renews its lease to two
    // ticks); a relaxed claim takes over.
    store
        .checkpoint(&key, first, "charge", &json!({"id": 1}), h.tick() * 2)
        .await
        .unwrap();
    h.advance(h.tick() * 3).await;
    let ClaimOutcome::Acquired {
        fence: second,
        takeover: Some(takeover),
        steps,
        ..
    } = store
        .claim(&relaxed(&key, &f, h.tick() * 10))
        .await
        .unwrap()
    else {
        panic!("an expired lease was not taken over");
    };
    assert_eq!(takeover.previous, first);
    assert_eq!(
        steps,
        BTreeMap::from([("charge".to_owned(), json!({"id": 1}))])
    );

    // Completed: answered as recorded, to every kind of claim.
    complete(&*store, &key, second, &success(7), h.tick() * 5).await;
    for claim in [relaxed(&key, &f, h.tick()), req(&key, &f, h.tick())] {
        match store.claim(&claim).await.unwrap() {
            ClaimOutcome::Completed(record) => assert_eq!(record.outcome(), Some(&success(7))),
            other => panic!("expected the recorded outcome, got {other:?}"),
        }
    }

    // Expired: claimed anew, as a fresh call.
    h.advance(h.tick() * 6).await;
    match store.claim(&relaxed(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::Acquired {
            fence,
            takeover: None,
            steps,
            ..
        } => {
            assert!(fence != first && fence != second);
            assert!(steps.is_empty(), "an expired call's steps came back");
        }
        other => panic!("an expired record was not claimed anew: {other:?}"),
    }
}

/// Concurrent claims of one key that need not be durable: exactly one
/// acquires it.
pub async fn relaxed_concurrent_claims_have_one_owner<H: Harness>(h: H) {
    let store = h.store();
    let key = random_key();
    let lease = h.tick() * 100;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..h.concurrency().min(1_000) {
        let (store, key) = (store.clone(), key.clone());
        set.spawn(async move {
            let f = fp("same");
            let acquired = matches!(
                store.claim(&relaxed(&key, &f, lease)).await.expect("claim"),
                ClaimOutcome::Acquired { .. }
            );
            usize::from(acquired)
        });
    }
    let owners: usize = set.join_all().await.into_iter().sum();
    assert_eq!(owners, 1, "more than one owner of one key");
}

/// A completion on the caller's thread ([`FastPath::complete_local`](idem_runtime::store::FastPath::complete_local)), where
/// the store makes one, is a completion: a stale owner is refused, the
/// owner's outcome is recorded and read back, and a completed outcome is
/// never overwritten. A store that declines hands the outcome back.
pub async fn a_completion_on_the_callers_thread_is_a_completion<H: Harness>(h: H) {
    use super::{acquire, assert_stale};
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let old = acquire(&*store, &req(&key, &f, h.tick())).await;
    h.advance(h.tick() * 2).await;
    let new = acquire(&*store, &req(&key, &f, h.tick() * 10)).await;
    let ttl = h.tick() * 10;
    let complete_local = |fence, outcome| match store.fast_path() {
        Some(fast) => fast.complete_local(&key, fence, outcome, ttl),
        None => Err(outcome),
    };

    match complete_local(old, success(1)) {
        Ok(answer) => assert_stale(answer),
        Err(handed_back) => assert_eq!(handed_back, success(1)),
    }
    match complete_local(new, success(2)) {
        Ok(answer) => answer.expect("the owner completes"),
        Err(handed_back) => store
            .complete(&key, new, &handed_back, ttl)
            .await
            .expect("the owner completes"),
    }
    if let Ok(answer) = complete_local(new, success(3)) {
        assert_stale(answer);
    }
    let f2 = f.clone();
    match store.claim(&req(&key, &f2, h.tick())).await.unwrap() {
        ClaimOutcome::Completed(record) => assert_eq!(record.outcome(), Some(&success(2))),
        other => panic!("expected the owner's outcome, got {other:?}"),
    }
}
