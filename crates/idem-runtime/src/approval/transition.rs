//! The approval protocol as fenced transitions: pure functions from a record
//! as read to the record to write in its place and what that write expects
//! of the stored one ([`Replace`]), and the checks that decide which
//! transition applies. The executor parks a call with them, an operator
//! approves or denies it with them, and both read a recorded approval
//! through them; the write itself is a [`StoreExt::replace`], which refuses it
//! if the record changed since it was read.
//!
//! ```text
//! in flight ─ park ─► awaiting approval ─ approve ─► approved ─ claim ─► in flight
//!                       │     ▲          └ deny ────► completed (denied)
//!                       └ add ┘ (one approval more of several needed)
//! ```
//!
//! The claim of an approved call is the store's own transition
//! ([`store::transition::claim`](crate::store::transition::claim)).
//!
//! [`StoreExt::replace`]: crate::store::StoreExt::replace

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::{Approval, ApprovalDecision, GivenApproval};
use crate::clock::Timestamp;
use crate::key::Fingerprint;
use crate::record::{
    FailureCode, Fence, Outcome, Record, RecordState, Status, StoredFailure, APPROVALS_STEP,
    APPROVAL_STEP, APPROVED_AT_STEP,
};
use crate::store::{Expected, ExpectedState};

/// A fenced transition: `record` replaces the stored record only if that is
/// still as `expected` says.
#[derive(Debug)]
pub(crate) struct Replace {
    /// What the stored record must be (fence and state).
    pub(crate) expected: Expected,
    /// The record to write in its place.
    pub(crate) record: Record,
}

/// The value of [`APPROVAL_STEP`] that records `approval`.
pub(crate) fn step(approval: Approval) -> Value {
    serde_json::to_value(ApprovalDecision::Approved(approval)).expect("an approval serializes")
}

// The record's accessor lives with the protocol that writes the step, so
// that `record` does not depend on `approval` (which depends on it).
impl Record {
    /// The approval recorded under [`APPROVAL_STEP`], if any.
    pub fn approval(&self) -> Option<Approval> {
        recorded(&self.steps)
    }

    /// The approvals given so far towards this call when it needs several
    /// (under [`APPROVALS_STEP`]), oldest first, and only those given for
    /// the arguments it has now: an approval of other arguments counts for
    /// nothing.
    pub fn approvals(&self) -> Vec<GivenApproval> {
        let given: Vec<GivenApproval> = self
            .steps
            .get(APPROVALS_STEP)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default();
        given
            .into_iter()
            .filter(|g| g.approval.covers(&self.fingerprint, false))
            .collect()
    }
}

/// The approval recorded among `steps` (under [`APPROVAL_STEP`]), if any.
pub(crate) fn recorded(steps: &BTreeMap<String, Value>) -> Option<Approval> {
    match serde_json::from_value(steps.get(APPROVAL_STEP)?.clone()) {
        Ok(ApprovalDecision::Approved(approval)) => Some(approval),
        _ => None,
    }
}

/// Whether the approval among `steps` lets a call whose arguments have
/// `fingerprint` run (see [`Approval::covers`]): none recorded does not.
pub(crate) fn covers(
    steps: &BTreeMap<String, Value>,
    fingerprint: &Fingerprint,
    unbound_ok: bool,
) -> bool {
    recorded(steps).is_some_and(|approval| approval.covers(fingerprint, unbound_ok))
}

/// Park the in-flight `record`, owned by `fence`, as awaiting a person's
/// decision asked for at `now`: the owner gives up its lease, since nothing
/// runs until a person decides, and the request lapses unanswered after
/// `ttl`.
pub(crate) fn park(
    mut record: Record,
    fence: Fence,
    now: Timestamp,
    ttl: Duration,
    message: &str,
) -> Replace {
    record.state = RecordState::AwaitingApproval {
        fence,
        requested_at: now,
        expires_at: now.plus(ttl),
        message: message.to_owned(),
    };
    Replace {
        expected: Expected {
            fence,
            state: ExpectedState::InFlight,
        },
        record,
    }
}

/// Why a record cannot be approved or denied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Undecidable {
    /// It is approved already, by `by` (`unknown` if the approval cannot be
    /// read).
    AlreadyApproved {
        /// Who approved it.
        by: String,
    },
    /// It does not await approval; it is in this status.
    NotPending(Status),
}

/// Whether `record` awaits a person's decision, not yet approved.
pub(crate) fn awaits_decision(record: &Record) -> bool {
    record.status() == Status::AwaitingApproval
}

/// Check that `record` may be approved or denied: it awaits a decision.
pub(crate) fn decidable(record: &Record) -> Result<(), Undecidable> {
    match record.status() {
        Status::AwaitingApproval => Ok(()),
        Status::Approved => Err(Undecidable::AlreadyApproved {
            by: record
                .approval()
                .map(|a| a.approver)
                .unwrap_or_else(|| "unknown".into()),
        }),
        status => Err(Undecidable::NotPending(status)),
    }
}

/// Approve `record` (one [`decidable`] accepts) at `at` with `approval`,
/// bound to the arguments recorded with the request, and kept for
/// `kept_for`, like an outcome: a granted approval does not lapse with the
/// request.
pub(crate) fn approve(
    record: &Record,
    approval: Approval,
    at: Timestamp,
    kept_for: Duration,
) -> Replace {
    let mut new = record.clone();
    let approval = approval.for_arguments(record.fingerprint.clone());
    new.steps.insert(APPROVAL_STEP.to_owned(), step(approval));
    // When it was given, for a rule's `valid_for`.
    new.steps
        .insert(APPROVED_AT_STEP.to_owned(), Value::from(at.as_millis()));
    if let RecordState::AwaitingApproval { expires_at, .. } = &mut new.state {
        *expires_at = at.plus(kept_for);
    }
    Replace {
        expected: awaiting(record),
        record: new,
    }
}

/// Add `approval`, given at `at`, to those recorded towards `record` (one
/// [`decidable`] accepts), bound to the arguments recorded with the
/// request. The record still awaits approval, and lapses when the request
/// does: an approval given towards it lapses with it, never before.
pub(crate) fn add(record: &Record, approval: Approval, at: Timestamp) -> Replace {
    let mut new = record.clone();
    let mut given = record.approvals();
    given.push(GivenApproval {
        approval: approval.for_arguments(record.fingerprint.clone()),
        at,
    });
    new.steps.insert(
        APPROVALS_STEP.to_owned(),
        serde_json::to_value(given).expect("approvals serialize"),
    );
    Replace {
        expected: awaiting(record),
        record: new,
    }
}

/// Deny `record` (one [`decidable`] accepts) at `at` for `reason`: it is
/// completed as the denial, kept for `kept_for`.
pub(crate) fn deny(record: &Record, reason: &str, at: Timestamp, kept_for: Duration) -> Replace {
    let mut new = record.clone();
    new.state = RecordState::Completed {
        fence: record.fence(),
        outcome: denial(reason.to_owned()),
        completed_at: at,
        expires_at: at.plus(kept_for),
    };
    Replace {
        expected: awaiting(record),
        record: new,
    }
}

/// The outcome of a call whose approval was denied for `reason`: a
/// definite failure, so that the tool never runs.
pub(crate) fn denial(reason: String) -> Outcome {
    Outcome::Failure {
        failure: StoredFailure {
            code: FailureCode::ApprovalDenied,
            message: reason,
            details: None,
        },
    }
}

/// What a decision about `record` expects of the stored record: still
/// awaiting approval, under the fence it was read with.
fn awaiting(record: &Record) -> Expected {
    Expected {
        fence: record.fence(),
        state: ExpectedState::AwaitingApproval,
    }
}
