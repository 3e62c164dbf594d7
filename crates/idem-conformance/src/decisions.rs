//! Cases for what a store must keep so that nothing decided lapses into a
//! second effect: an approval claimed only with the arguments it was given
//! for, and decisions (a granted approval, an unknown outcome, a
//! resolution) that outlive the TTLs and sweeps around them; and a caller
//! waiting for a decision ([`StoreExt::wait`] for a [`WaitFor::Decision`]) woken by it. The
//! [`Operator`] makes the decisions, as it does for people.

use std::sync::Arc;
use std::time::Duration;

use super::{acquire, complete, fp, parked, random_key, req, woken, Harness, WAITER_TIMEOUT};
use idem_runtime::approval::Approval;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::operator::{Actor, Operator, Resolution};
use idem_runtime::record::{CallInfoRef, FailureCode, Outcome, Record, Status};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, Store, StoreError, WaitFor};

/// Park the in-flight call `key` owned by `fence` as awaiting approval,
/// the request lapsing unanswered after `ttl`.
async fn park<S: Store + ?Sized>(
    store: &S,
    key: &idem_runtime::key::IdempotencyKey,
    fence: idem_runtime::record::Fence,
    ttl: Duration,
) {
    let now = store.now().await.unwrap();
    let record = store.get(key).await.unwrap().expect("in flight");
    let (expected, parked) = parked(record, fence, now, ttl);
    store
        .replace(key, expected, Some(&parked), None)
        .await
        .expect("park");
}

/// A call approved for arguments `a` is not acquired by a claim for
/// arguments `b`, even one that does not check fingerprints (a natural
/// key): the claim is answered with the approved request and changes
/// nothing. The claim for `a` then acquires it.
pub async fn an_approval_is_claimed_only_with_the_arguments_it_was_given_for<H: Harness>(h: H) {
    let store = h.store();
    let operator = Operator::new(h.store() as Arc<dyn Store>);
    let (key, a, b) = (random_key(), fp("a"), fp("b"));
    let fence = acquire(&*store, &req(&key, &a, h.tick())).await;
    park(&*store, &key, fence, h.tick() * 20).await;

    let mut other = req(&key, &b, h.tick() * 10);
    other.check_fingerprint = false;
    match store.claim(&other).await.unwrap() {
        ClaimOutcome::AwaitingApproval(record) => {
            assert_eq!(record.fingerprint, a, "answered with the pending request");
        }
        got => panic!("a pending request taken by other arguments: {got:?}"),
    }
    let approved = operator
        .approve(&key, Approval::granted_by("ana"))
        .await
        .unwrap();
    assert_eq!(approved.approval().unwrap().fingerprint, Some(a.clone()));

    match store.claim(&other).await.unwrap() {
        ClaimOutcome::AwaitingApproval(record) => {
            assert_eq!(record.status(), Status::Approved);
            assert_eq!(record.fingerprint, a);
        }
        got => panic!("an approval taken by other arguments: {got:?}"),
    }
    let read = store.get(&key).await.unwrap().unwrap();
    assert_eq!(read.status(), Status::Approved, "nothing changed");
    assert_eq!(read.fence(), approved.fence(), "nothing changed");

    let mut own = req(&key, &a, h.tick() * 10);
    own.check_fingerprint = false;
    match store.claim(&own).await.unwrap() {
        ClaimOutcome::Acquired {
            takeover, steps, ..
        } => {
            assert_eq!(takeover, None);
            assert!(steps.contains_key(idem_runtime::record::APPROVAL_STEP));
        }
        got => panic!("the approved arguments did not acquire the call: {got:?}"),
    }
}

/// With sweeps between: an approval granted before its request would have
/// lapsed is kept for the tool's TTL (recorded with the claim), past the
/// request's lapse; an unknown outcome outlives that TTL; a resolution is
/// kept for the tool's TTL, not the operator's shorter default.
///
/// On a server's clock every wait is real and the machine may be busy, so
/// what must *not* have lapsed by a read has a margin of many ticks: only
/// what must have lapsed is timed closely, and a slow machine only makes
/// that later.
pub async fn decisions_outlive_the_ttls_around_them<H: Harness>(h: H) {
    let store = h.store();
    let tick = h.tick();
    // The operator's own default is one tick: shorter than the tool's.
    let operator = Operator::new(h.store() as Arc<dyn Store>).ttl(tick);
    let (key, f) = (random_key(), fp("a"));
    let tool_ttl = tick * 20;
    let mut claim = req(&key, &f, tick * 30);
    claim.info = CallInfoRef {
        ttl: Some(tool_ttl),
        ..CallInfoRef::EMPTY
    };
    let fence = acquire(&*store, &claim).await;
    let request_ttl = tick * 5;
    park(&*store, &key, fence, request_ttl).await;

    operator
        .approve(&key, Approval::granted_by("ana"))
        .await
        .expect("approved within the request's TTL");
    h.advance(request_ttl + tick).await;
    store.sweep().await.unwrap();
    let read = store.get(&key).await.unwrap();
    assert_eq!(
        read.map(|r| r.status()),
        Some(Status::Approved),
        "a granted approval lapsed with the request's TTL"
    );

    let owner = match store.claim(&claim).await.unwrap() {
        ClaimOutcome::Acquired { fence, .. } => fence,
        got => panic!("the approved call was not acquired: {got:?}"),
    };
    let unknown = Outcome::Unknown {
        reason: "the owner vanished mid-call".into(),
    };
    // As the executor records it: never to lapse.
    complete(&*store, &key, owner, &unknown, Duration::MAX).await;
    h.advance(tool_ttl + tick).await;
    store.sweep().await.unwrap();
    match store.claim(&claim).await.unwrap() {
        ClaimOutcome::Completed(record) => {
            assert_eq!(record.outcome(), Some(&unknown));
            assert_eq!(record.expires_at(), None);
        }
        got => panic!("an unknown outcome lapsed: {got:?}"),
    }

    let resolved = operator
        .resolve(
            &key,
            Resolution::Failed("not charged".into()),
            &Actor::new("ops"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resolved.status(), Status::Failed);
    h.advance(tick * 2).await;
    store.sweep().await.unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().map(|r| r.status()),
        Some(Status::Failed),
        "a resolution was kept for the operator's default, not the tool's TTL"
    );
}

/// A call of `key` parked as awaiting approval, for a while longer than
/// any wake-up case takes, and an operator on another handle to the store.
async fn parked_request<H: Harness>(h: &H) -> (IdempotencyKey, Operator) {
    let store = h.store();
    let key = random_key();
    let fence = acquire(&*store, &req(&key, &fp("a"), h.tick())).await;
    park(&*store, &key, fence, h.tick() * 1000).await;
    (key, Operator::new(h.store() as Arc<dyn Store>))
}

/// A task waiting up to [`WAITER_TIMEOUT`] for a decision on `key`.
fn decision_waiter<S: Store>(
    store: &Arc<S>,
    key: &IdempotencyKey,
) -> tokio::task::JoinHandle<Result<Option<Record>, StoreError>> {
    let (store, key) = (store.clone(), key.clone());
    tokio::spawn(async move { store.wait(&key, WaitFor::Decision, WAITER_TIMEOUT).await })
}

/// A caller waits for a decision on a parked call; an operator approves it
/// → the caller is woken long before its timeout and sees the approval.
pub async fn an_approval_wakes_a_waiter_for_it<H: Harness>(h: H) {
    let (key, operator) = parked_request(&h).await;
    let waiter = decision_waiter(&h.store(), &key);
    let seen = woken(waiter, || async {
        operator
            .approve(&key, Approval::granted_by("ana"))
            .await
            .unwrap();
    })
    .await
    .expect("the approved request");
    assert_eq!(seen.status(), Status::Approved);
    assert_eq!(seen.approval().map(|a| a.approver).as_deref(), Some("ana"));
}

/// A caller waits for a decision on a parked call; an operator denies it →
/// the caller is woken long before its timeout and sees the denial.
pub async fn a_denial_wakes_a_waiter_for_it<H: Harness>(h: H) {
    let (key, operator) = parked_request(&h).await;
    let waiter = decision_waiter(&h.store(), &key);
    let seen = woken(waiter, || async {
        operator
            .deny(&key, "ana", "not this quarter")
            .await
            .unwrap();
    })
    .await
    .expect("the denied call");
    match seen.outcome() {
        Some(Outcome::Failure { failure }) => {
            assert_eq!(failure.code, FailureCode::ApprovalDenied);
            assert_eq!(failure.message, "not this quarter");
        }
        got => panic!("the waiter saw {got:?}, not the denial"),
    }
}

/// Nobody decides: the waiter returns at its timeout with the request,
/// still awaiting approval. A key with no record has nothing to wait for,
/// and one decided before the wait began is answered as it is.
pub async fn a_waiter_for_a_decision_nobody_makes_returns_the_request<H: Harness>(h: H) {
    let store = h.store();
    let (key, operator) = parked_request(&h).await;
    let seen = store
        .wait(&key, WaitFor::Decision, Duration::from_millis(50))
        .await
        .unwrap()
        .expect("the request");
    assert_eq!(seen.status(), Status::AwaitingApproval);

    // Nothing to wait for in either: answered well before the timeout.
    let absent = woken(decision_waiter(&store, &random_key()), || async {}).await;
    assert_eq!(absent, None);
    operator
        .approve(&key, Approval::granted_by("ana"))
        .await
        .unwrap();
    let seen = woken(decision_waiter(&store, &key), || async {})
        .await
        .expect("the approved request");
    assert_eq!(seen.status(), Status::Approved);
}
