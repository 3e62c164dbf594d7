//! Cases for what the executor's approvals and operators need of a store:
//! call details and the worker on the record, records awaiting approval,
//! fenced replacement of whole records, and scanning.

use std::collections::BTreeMap;

use serde_json::json;

use super::{
    acquire, approval_step, assert_stale, complete, fp, outcome_of, parked, random_key, req,
    success, Harness,
};
use idem_runtime::approval::Approval;
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{
    AuditAction, AuditEntry, CallInfo, FailureCode, Fence, Outcome, Reason, Record, RecordState,
    Status, StoredFailure, APPROVAL_STEP,
};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, ClaimRequest, Expected, ExpectedState, Store, StoreError};

fn info() -> CallInfo {
    let mut info = CallInfo::default();
    info.namespace = Some("tenant-7".into());
    info.call_id = Some("call_8f2Kq".into());
    info.run_id = Some("run-42".into());
    info.step = Some(3);
    info.args = Some(r#"{"amount_cents":1999,"to":"zoë@example.com"}"#.into());
    info.ttl = Some(std::time::Duration::from_secs(7 * 24 * 3600));
    // What a model may write: quotes, a line break, markup, a right-to-left
    // override and text beyond ASCII, byte for byte.
    info.reason =
        Reason::new("The customer wrote \"refund it\";\n<b>zoë</b> \u{202e}asked twice \u{1F4B8}");
    info
}

/// Claim `r` carrying the call's `details`.
fn with_details<'a>(r: ClaimRequest<'a>, details: &'a CallInfo) -> ClaimRequest<'a> {
    ClaimRequest {
        info: details.as_ref(),
        ..r
    }
}

fn expect(fence: Fence, state: ExpectedState) -> Expected {
    Expected { fence, state }
}

/// Swap `key`'s record for `new` (`None`: delete it) if `fence` owns it in
/// `state`, with no audit event.
async fn swap<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    (fence, state): (Fence, ExpectedState),
    new: Option<&Record>,
) -> Result<Option<Fence>, StoreError> {
    store.replace(key, expect(fence, state), new, None).await
}

/// Park the in-flight call `key` owned by `fence` as awaiting approval for
/// `ttl`; returns the new fence and the record as written.
async fn park<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    fence: Fence,
    ttl: std::time::Duration,
) -> (Fence, Record) {
    let now = store.now().await.unwrap();
    let record = store.get(key).await.unwrap().expect("in flight");
    let (expected, record) = parked(record, fence, now, ttl);
    let new = store
        .replace(key, expected, Some(&record), None)
        .await
        .expect("park")
        .expect("a fence for the new record");
    assert_ne!(new, fence, "a replacement gets a fresh fence");
    (new, record)
}

fn approved(mut record: Record, at: Timestamp) -> Record {
    let approval = Approval::granted_by("ana").with_note("refund ok'd — ticket #12");
    record
        .steps
        .insert(APPROVAL_STEP.into(), approval_step(approval));
    record.audit.push(AuditEntry {
        at,
        by: "ana".into(),
        action: AuditAction::Approved,
        reason: Some("refund ok'd — ticket #12".into()),
    });
    record
}

/// A claim that creates a record keeps the call's details and the worker;
/// a takeover records the new worker and keeps the details.
pub async fn claim_records_call_details_and_worker<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let details = info();
    let first = ClaimRequest {
        worker: Some("host-a:101"),
        ..with_details(req(&key, &f, h.tick()), &details)
    };
    acquire(&*store, &first).await;
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.info, details);
    assert_eq!(record.worker.as_deref(), Some("host-a:101"));
    assert!(record.audit.is_empty());

    h.advance(h.tick() * 2).await;
    let mut second = req(&key, &f, h.tick() * 10);
    second.worker = Some("host-b:202");
    match store.claim(&second).await.unwrap() {
        ClaimOutcome::Acquired {
            takeover: Some(_), ..
        } => {}
        other => panic!("expected a takeover, got {other:?}"),
    }
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        record.info, details,
        "a takeover keeps the first call's details"
    );
    assert_eq!(record.worker.as_deref(), Some("host-b:202"));
}

/// The reason a call was made is the first claim's: a later claim of the
/// key (a takeover, with words of its own) keeps it; the longest reason
/// idem keeps reads back byte for byte; a call without one has none.
pub async fn claim_records_the_first_reason<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let longest = Reason::new("ü".repeat(Reason::MAX_BYTES / 2)).unwrap();
    assert_eq!(longest.as_str().len(), Reason::MAX_BYTES);
    let mut first = req(&key, &f, h.tick());
    first.info.reason = Some(longest.as_str());
    acquire(&*store, &first).await;
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().info.reason,
        Some(longest.clone())
    );
    h.advance(h.tick() * 2).await;
    let mut second = req(&key, &f, h.tick() * 10);
    second.info.reason = Some("another model's words");
    acquire(&*store, &second).await;
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        record.info.reason,
        Some(longest),
        "the first claim's reason"
    );

    let plain = random_key();
    acquire(&*store, &req(&plain, &f, h.tick())).await;
    assert_eq!(store.get(&plain).await.unwrap().unwrap().info.reason, None);
}

/// A replace applies only to the record it expects (fence and state):
/// anything else is a stale fence and changes nothing. The replaced record
/// holds a fresh fence, so its previous owner can no longer write.
pub async fn replace_swaps_only_the_record_it_expects<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick() * 10)).await;
    let before = store.get(&key).await.unwrap().unwrap();
    let mut other = before.clone();
    other.steps.insert("s".into(), json!(1));
    for wrong in [
        expect(Fence(fence.0 + 1000), ExpectedState::InFlight),
        expect(fence, ExpectedState::Completed),
        expect(fence, ExpectedState::AwaitingApproval),
        expect(fence, ExpectedState::LeaseExpired),
    ] {
        assert_stale(store.replace(&key, wrong, Some(&other), None).await);
        assert_stale(store.replace(&key, wrong, None, None).await);
    }
    assert_eq!(store.get(&key).await.unwrap().unwrap(), before);
    let owned = (fence, ExpectedState::InFlight);
    assert_stale(swap(&*store, &random_key(), owned, Some(&other)).await);

    let (parked, _) = park(&*store, &key, fence, h.tick() * 10).await;
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.fence(), parked);
    assert_eq!(record.status(), Status::AwaitingApproval);
    assert_stale(store.complete(&key, fence, &success(1), h.tick()).await);
    assert_stale(store.renew(&key, fence, h.tick()).await);
    assert_stale(store.release(&key, fence).await);
    // The old fence cannot replace it again either.
    let waiting = (fence, ExpectedState::AwaitingApproval);
    assert_stale(swap(&*store, &key, waiting, None).await);
    assert_eq!(store.get(&key).await.unwrap().unwrap().fence(), parked);
}

/// A record awaiting approval holds no lease: claims find it waiting however
/// much time passes (until it expires), and never take it over; a claim
/// with other arguments is still a key reuse.
pub async fn awaiting_approval_is_never_taken_over<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick())).await;
    park(&*store, &key, fence, h.tick() * 20).await;
    for _ in 0..2 {
        h.advance(h.tick() * 2).await;
        match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
            ClaimOutcome::AwaitingApproval(record) => {
                assert_eq!(record.key, key);
                match &record.state {
                    RecordState::AwaitingApproval { message, .. } => {
                        assert_eq!(message, "ask #payments-oncall")
                    }
                    other => panic!("expected awaiting approval, got {other:?}"),
                }
            }
            other => panic!("expected awaiting approval, got {other:?}"),
        }
    }
    assert!(matches!(
        store.claim(&req(&key, &fp("b"), h.tick())).await.unwrap(),
        ClaimOutcome::KeyReused { .. }
    ));
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().status(),
        Status::AwaitingApproval
    );
}

/// Once its approval is recorded, the next claim owns the key with the
/// approval among its steps, as a fresh owner (no takeover), and the claim
/// after that finds it in flight.
pub async fn approved_call_is_claimed_once_with_its_approval<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick())).await;
    let (parked, record) = park(&*store, &key, fence, h.tick() * 20).await;
    let now = store.now().await.unwrap();
    let waiting = (parked, ExpectedState::AwaitingApproval);
    let approved_fence = swap(&*store, &key, waiting, Some(&approved(record, now))).await;
    let approved_fence = approved_fence.unwrap().expect("a fence for the new record");
    let read = store.get(&key).await.unwrap().unwrap();
    assert_eq!(read.status(), Status::Approved);
    assert_eq!(read.approval().unwrap().approver, "ana");
    assert_eq!(read.audit.len(), 1);
    assert_eq!(read.audit[0].action, AuditAction::Approved);

    let mut claim = req(&key, &f, h.tick() * 10);
    claim.worker = Some("host-c:303");
    let owner = match store.claim(&claim).await.unwrap() {
        ClaimOutcome::Acquired {
            fence,
            steps,
            takeover,
            ..
        } => {
            assert_eq!(takeover, None, "nothing ran before an approval");
            assert!(steps.contains_key(APPROVAL_STEP));
            fence
        }
        other => panic!("expected to acquire the approved call, got {other:?}"),
    };
    assert_ne!(owner, approved_fence);
    assert!(matches!(
        store.claim(&req(&key, &f, h.tick())).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    complete(&*store, &key, owner, &success(5), h.tick() * 10).await;
    let done = store.get(&key).await.unwrap().unwrap();
    assert_eq!(done.outcome(), Some(&success(5)));
    assert_eq!(done.worker.as_deref(), Some("host-c:303"));
    assert_eq!(done.audit.len(), 1, "the audit stays with the record");
}

/// An in-flight record is replaced as a dead owner's only once its lease has
/// run out by the store's clock; its owner is then fenced out.
pub async fn replace_overrules_only_an_expired_lease<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick() * 2)).await;
    let record = store.get(&key).await.unwrap().unwrap();
    let mut settled = record.clone();
    let now = store.now().await.unwrap();
    settled.state = RecordState::Completed {
        fence,
        outcome: success(9),
        completed_at: now,
        expires_at: now.plus(h.tick() * 50),
    };
    let lapsed = (fence, ExpectedState::LeaseExpired);
    assert_stale(swap(&*store, &key, lapsed, Some(&settled)).await);
    assert!(matches!(
        store.get(&key).await.unwrap().unwrap().state,
        RecordState::InFlight { .. }
    ));
    h.advance(h.tick() * 3).await;
    swap(&*store, &key, lapsed, Some(&settled)).await.unwrap();
    assert_stale(store.complete(&key, fence, &success(1), h.tick()).await);
    assert_eq!(outcome_of(&*store, &key).await, Some(success(9)));
}

/// A completed record can be replaced by a settled one (its audit kept
/// exactly) and deleted; after a delete the key is claimed anew.
pub async fn completed_record_is_replaced_and_deleted<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let details = info();
    let fence = acquire(&*store, &with_details(req(&key, &f, h.tick()), &details)).await;
    let unknown = Outcome::Unknown {
        reason: "owner vanished mid-call".into(),
    };
    complete(&*store, &key, fence, &unknown, h.tick() * 50).await;
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.status(), Status::Unknown);

    let now = store.now().await.unwrap();
    let mut settled = record.clone();
    let failed = Outcome::Failure {
        failure: StoredFailure {
            code: FailureCode::Permanent,
            message: "the bank says it never arrived".into(),
            details: None,
        },
    };
    settled.state = RecordState::Completed {
        fence,
        outcome: failed.clone(),
        completed_at: now,
        expires_at: now.plus(h.tick() * 50),
    };
    settled.audit = vec![
        AuditEntry {
            at: now,
            by: "ana".into(),
            action: AuditAction::ResolvedFailed,
            reason: Some("checked the ledger: \"no transfer\"".into()),
        },
        AuditEntry {
            at: now.plus(std::time::Duration::from_millis(1)),
            by: "bo".into(),
            action: AuditAction::Approved,
            reason: None,
        },
    ];
    let done = (fence, ExpectedState::Completed);
    let new = swap(&*store, &key, done, Some(&settled)).await.unwrap();
    let new = new.expect("a fence for the new record");
    let read = store.get(&key).await.unwrap().unwrap();
    assert_eq!(read.fence(), new);
    assert_eq!(read.outcome(), Some(&failed));
    assert_eq!(read.audit, settled.audit);
    assert_eq!(read.info, details);
    assert_eq!(read.status(), Status::Failed);
    // The old fence no longer matches.
    assert_stale(swap(&*store, &key, done, None).await);
    assert_eq!(
        swap(&*store, &key, (new, ExpectedState::Completed), None)
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.get(&key).await.unwrap(), None);
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::Acquired { takeover, .. } => assert_eq!(takeover, None),
        other => panic!("expected a fresh claim after the delete, got {other:?}"),
    }
}

/// An approval request that nobody answers lapses like a completed record:
/// it reads as absent, the key is claimed anew, and a sweep removes it.
pub async fn unanswered_approval_request_expires<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick())).await;
    park(&*store, &key, fence, h.tick()).await;
    h.advance(h.tick() * 3).await;
    assert_eq!(store.get(&key).await.unwrap(), None);
    if !h.expires_natively() {
        assert!(store.sweep().await.unwrap() >= 1);
    }
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::Acquired {
            takeover, steps, ..
        } => {
            assert_eq!(takeover, None);
            assert!(steps.is_empty());
        }
        other => panic!("expected a fresh claim, got {other:?}"),
    }
}

/// A scan pages through every record exactly once, whatever the page size,
/// in every state, and leaves out expired records.
pub async fn scan_returns_every_record_once<H: Harness>(h: H) {
    let store = h.store();
    let f = fp("a");
    // Long enough that no record lapses while the others are made, even
    // with every case running at once against one server (200 s there).
    let long = h.tick() * 1000;
    let mut ours: BTreeMap<IdempotencyKey, Status> = BTreeMap::new();
    for i in 0..23u32 {
        let key = random_key();
        let fence = acquire(&*store, &req(&key, &f, long)).await;
        let status = match i % 4 {
            0 => Status::InFlight,
            1 => {
                complete(&*store, &key, fence, &success(i64::from(i)), long).await;
                Status::Succeeded
            }
            2 => {
                park(&*store, &key, fence, long).await;
                Status::AwaitingApproval
            }
            _ => {
                let unknown = Outcome::Unknown { reason: "?".into() };
                store.complete(&key, fence, &unknown, long).await.unwrap();
                Status::Unknown
            }
        };
        ours.insert(key, status);
    }
    let lapsing = random_key();
    let fence = acquire(&*store, &req(&lapsing, &f, h.tick())).await;
    complete(&*store, &lapsing, fence, &success(0), h.tick()).await;
    h.advance(h.tick() * 2).await;

    for page_size in [1, 7, 1000] {
        let mut seen: BTreeMap<IdempotencyKey, Status> = BTreeMap::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let page = store.scan(cursor.as_deref(), page_size).await.unwrap();
            pages += 1;
            assert!(pages < 100_000, "the scan does not end");
            for record in page.records {
                assert_ne!(record.key, lapsing, "an expired record was scanned");
                if ours.contains_key(&record.key) {
                    let status = record.status();
                    assert!(
                        seen.insert(record.key.clone(), status).is_none(),
                        "{} returned twice with page size {page_size}",
                        record.key
                    );
                }
            }
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, ours, "page size {page_size}");
    }
}
