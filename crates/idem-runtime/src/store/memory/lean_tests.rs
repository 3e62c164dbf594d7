//! The compact form against the record it stands for: every shape goes
//! through both and comes back equal, and every answer and write on it is
//! the one the [`transition`] functions give on the record.

use std::time::Duration;

use serde_json::json;

use super::lean::{Lean, LeanAnswer};
use super::map::{Body, Entry, Id};
use super::*;
use crate::clock::ManualClock;
use crate::key::{CanonicalArgs, Fingerprint};
use crate::record::ATTEMPT_STEP;
use crate::record::{
    AuditAction, AuditEntry, CallInfo, CallInfoRef, FailureCode, OutputJson, Reason, RecordState,
    StoredFailure,
};
use crate::store::{ClaimOutcome, StoreExt};
use crate::store::{ExpectedState, FenceHolder};

fn key() -> IdempotencyKey {
    IdempotencyKey::parse(&"7".repeat(64)).unwrap().sub("lean")
}

/// A fingerprint as the executor computes one (a digest).
fn fingerprint(n: u64) -> Fingerprint {
    CanonicalArgs::from_value(&json!({ "n": n }))
        .unwrap()
        .fingerprint
}

fn infos() -> Vec<CallInfo> {
    vec![
        CallInfo::EMPTY,
        CallInfo {
            namespace: Some("acme".into()),
            call_id: Some("call_1".into()),
            run_id: Some("run-7".into()),
            step: Some(3),
            args: Some(r#"{"n":123}"#.into()),
            ttl: Some(Duration::new(86_400, 123_456_789)),
            reason: Reason::new("the customer asked ✓ for a refund"),
        },
        // Empty texts are not absent ones; the extremes of each number.
        CallInfo {
            namespace: Some(String::new()),
            call_id: None,
            run_id: Some(String::new()),
            step: Some(0),
            args: None,
            ttl: Some(Duration::MAX),
            reason: Reason::new("why ".repeat(1_000)),
        },
        CallInfo {
            step: Some(u64::MAX),
            ttl: Some(Duration::ZERO),
            args: Some("x".repeat(usize::from(u16::MAX) - 1)),
            ..CallInfo::EMPTY
        },
    ]
}

fn outcomes() -> Vec<Outcome> {
    vec![
        Outcome::Success {
            output: OutputJson::from_value(&json!({ "n": 123 })),
        },
        Outcome::Failure {
            failure: StoredFailure {
                code: FailureCode::Permanent,
                message: "card declined".into(),
                details: Some(json!({ "code": 51 })),
            },
        },
        Outcome::Unknown {
            reason: "its owner vanished".into(),
        },
    ]
}

fn states() -> Vec<RecordState> {
    let mut states = vec![
        RecordState::InFlight {
            fence: Fence(7),
            lease_until: Timestamp(5_000),
        },
        RecordState::InFlight {
            fence: Fence(u64::MAX),
            lease_until: Timestamp(u64::MAX),
        },
    ];
    for outcome in outcomes() {
        states.push(RecordState::Completed {
            fence: Fence(8),
            outcome,
            completed_at: Timestamp(2_000),
            expires_at: Timestamp(u64::MAX),
        });
    }
    states
}

/// Every record of the compact shape these parts make.
fn lean_shapes() -> Vec<Record> {
    let mut records = Vec::new();
    for info in infos() {
        for worker in [None, Some(String::new()), Some("host:4242".to_owned())] {
            for state in states() {
                records.push(Record {
                    key: key(),
                    tool: "send_email".into(),
                    fingerprint: fingerprint(1),
                    created_at: Timestamp(1_000),
                    state,
                    steps: Default::default(),
                    info: info.clone(),
                    worker: worker.clone(),
                    audit: Vec::new(),
                });
            }
        }
    }
    records
}

#[test]
fn every_lean_shape_reads_back_as_the_record_it_was() {
    for record in lean_shapes() {
        let lean = Lean::of(&record).expect("the common shape is held compact");
        assert_eq!(lean.to_record(key()), record);
        assert_eq!(lean.expires_at(), record.expires_at());
        assert_eq!(lean.is_open(), record.is_open());
        assert_eq!(lean.created_at(), record.created_at);
        assert_eq!(lean.outcome().as_ref(), record.outcome());
        assert_eq!(lean.holder(), FenceHolder::of(Some(&record)));
        for fence in [Fence(7), Fence(8)] {
            assert_eq!(
                lean.owned_by(fence),
                transition::check_owner(Some(&record), &key(), fence).is_ok()
            );
        }
    }
}

#[test]
fn a_fingerprint_read_back_as_text_is_held_as_its_digest_and_equal() {
    let mut record = lean_shapes().remove(0);
    record.fingerprint = Fingerprint::new(fingerprint(2).as_str());
    let back = Lean::of(&record).unwrap().to_record(key());
    assert_eq!(back, record);
    assert_eq!(back.fingerprint.as_str(), record.fingerprint.as_str());
}

#[test]
fn other_shapes_are_held_whole() {
    let base = lean_shapes().remove(0);
    let mut with_step = base.clone();
    with_step.steps.insert(ATTEMPT_STEP.into(), json!(1));
    let mut audited = base.clone();
    audited.audit.push(AuditEntry {
        at: Timestamp(3_000),
        by: "ana".into(),
        action: AuditAction::ResolvedSucceeded,
        reason: None,
    });
    let mut awaiting = base.clone();
    awaiting.state = RecordState::AwaitingApproval {
        fence: Fence(9),
        requested_at: Timestamp(1_000),
        expires_at: Timestamp(60_000),
        message: "ask #payments".into(),
    };
    let mut text_fingerprint = base.clone();
    text_fingerprint.fingerprint = Fingerprint::new("f");
    let mut upper_hex = base.clone();
    upper_hex.fingerprint = Fingerprint::new("AB".repeat(32));
    let mut long_args = base.clone();
    long_args.info.args = Some("x".repeat(usize::from(u16::MAX)));
    let mut long_worker = base.clone();
    long_worker.worker = Some("w".repeat(70_000));
    for record in [
        with_step,
        audited,
        awaiting,
        text_fingerprint,
        upper_hex,
        long_args,
        long_worker,
    ] {
        assert!(Lean::of(&record).is_none(), "{record:?}");
        assert!(matches!(Body::of(record), Body::Full(_)));
    }
}

/// Claims of every call info and worker, checked or not.
fn requests<'a>(
    key: &'a IdempotencyKey,
    fingerprint: &'a Fingerprint,
    infos: &'a [CallInfo],
) -> Vec<ClaimRequest<'a>> {
    let mut requests = Vec::new();
    for info in infos {
        for worker in [None, Some("host:4242")] {
            for check_fingerprint in [true, false] {
                requests.push(ClaimRequest {
                    key,
                    tool: "send_email",
                    fingerprint,
                    check_fingerprint,
                    lease: Duration::from_secs(30),
                    info: info.as_ref(),
                    worker,
                    durable: false,
                });
            }
        }
    }
    requests
}

#[test]
fn a_claim_completion_and_renewal_write_what_the_transitions_write() {
    let (k, fp, infos) = (key(), fingerprint(1), infos());
    let now = Timestamp(1_000);
    for req in requests(&k, &fp, &infos) {
        let fence = Fence(11);
        let mut lean = Lean::claimed(&req, now, fence).expect("fits");
        let decision = transition::claim(None, &req, now, || fence);
        let mut record = decision.write.unwrap();
        assert_eq!(lean.to_record(k.clone()), record);

        lean.renew(Duration::from_secs(60), Timestamp(2_000));
        transition::checkpoint_in_place(
            Some(&mut record),
            &k,
            fence,
            None,
            Duration::from_secs(60),
            Timestamp(2_000),
        )
        .unwrap();
        assert_eq!(lean.to_record(k.clone()), record);

        for (outcome, ttl) in outcomes().into_iter().zip([
            Duration::from_secs(3),
            Duration::from_millis(1),
            Duration::MAX,
        ]) {
            let (mut lean, mut record) = (lean.clone(), record.clone());
            lean.complete(outcome.clone(), ttl, Timestamp(3_000));
            transition::complete_in_place_owned(
                Some(&mut record),
                &k,
                fence,
                outcome,
                ttl,
                Timestamp(3_000),
            )
            .unwrap();
            assert_eq!(lean.to_record(k.clone()), record);
            assert_eq!(lean.expires_at(), record.expires_at());
        }
    }
}

/// What [`transition::answer`] gives, with a completed record's outcome
/// alone, as [`LeanAnswer`] gives it.
fn answered(record: &Record, req: &ClaimRequest<'_>, now: Timestamp) -> Option<String> {
    transition::answer(&Arc::new(record.clone()), req, now).map(|claim| match claim {
        ClaimOutcome::Completed(record) => format!("completed {:?}", record.outcome()),
        other => format!("{other:?}"),
    })
}

fn lean_answered(lean: &Lean, req: &ClaimRequest<'_>, now: Timestamp) -> Option<String> {
    lean.answer(req, now).map(|answer| match answer {
        LeanAnswer::Completed(outcome) => format!("completed {:?}", Some(&outcome)),
        LeanAnswer::Claim(claim) => format!("{claim:?}"),
    })
}

#[test]
fn a_claim_is_answered_as_the_transitions_answer_it() {
    let k = key();
    let (same, other, text) = (fingerprint(1), fingerprint(2), Fingerprint::new("f"));
    for record in lean_shapes().into_iter().step_by(7) {
        let lean = Lean::of(&record).unwrap();
        for fp in [&same, &other, &text] {
            for tool in ["send_email", "refund"] {
                for check_fingerprint in [true, false] {
                    let req = ClaimRequest {
                        key: &k,
                        tool,
                        fingerprint: fp,
                        check_fingerprint,
                        lease: Duration::from_secs(30),
                        info: CallInfoRef::EMPTY,
                        worker: None,
                        durable: true,
                    };
                    // Before, at and after the lease's end.
                    for now in [4_999, 5_000, 5_001].map(Timestamp) {
                        assert_eq!(
                            lean_answered(&lean, &req, now),
                            answered(&record, &req, now)
                        );
                    }
                }
            }
        }
    }
}

/// An entry holds a compact record in 176 bytes (a glibc chunk of 192):
/// the key's digest, the waiters' pointer and the record.
#[test]
fn an_entry_is_at_most_176_bytes() {
    assert!(
        std::mem::size_of::<Entry>() <= 176,
        "{}",
        std::mem::size_of::<Entry>()
    );
}

#[tokio::test]
async fn a_record_of_any_shape_reads_back_from_the_store_as_it_was_written() {
    let store = MemoryStore::with_clock(Arc::new(ManualClock::new(1_000)));
    let k = key();
    let mut shapes = lean_shapes();
    let mut whole = shapes[0].clone();
    whole.steps.insert(ATTEMPT_STEP.into(), json!(1));
    shapes.push(whole);
    // The first record goes in with a claim, then each replaces the last.
    let fp = fingerprint(1);
    let req = ClaimRequest {
        key: &k,
        tool: "send_email",
        fingerprint: &fp,
        check_fingerprint: true,
        lease: Duration::from_secs(30),
        info: CallInfoRef::EMPTY,
        worker: None,
        durable: true,
    };
    let ClaimOutcome::Acquired { mut fence, .. } = store.claim(&req).await.unwrap() else {
        panic!("a first claim acquires");
    };
    let mut state = ExpectedState::InFlight;
    for shape in shapes {
        fence = store
            .replace(&k, Expected { fence, state }, Some(&shape), None)
            .await
            .unwrap()
            .expect("a new fence");
        let written = transition::replacement(&k, &shape, fence);
        assert_eq!(store.get(&k).await.unwrap().as_ref(), Some(&written));
        state = match written.state {
            RecordState::InFlight { .. } => ExpectedState::InFlight,
            RecordState::AwaitingApproval { .. } => ExpectedState::AwaitingApproval,
            RecordState::Completed { .. } => ExpectedState::Completed,
        };
        let id = Id::of(&k);
        let lean = matches!(
            store.records.read(&id).get(&id).map(|e| &e.body),
            Some(Body::Lean(_))
        );
        assert_eq!(lean, Lean::of(&written).is_some());
    }
}
