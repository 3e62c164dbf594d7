//! Records: what a store keeps under a key.
//!
//! A record is born *in flight* when a call claims its key, holding a lease
//! (until when the owner is presumed alive) and a fencing token (which owner
//! it is). It becomes *completed* with the call's [`Outcome`], and is kept
//! until it expires (24 h by default), after which a sweeper may delete it.
//! In-flight records are never swept.
//!
//! The record's parts live beside it: its state and status (`state.rs`),
//! what the first claim recorded about the call (`info.rs`), what operators
//! did to it (`audit.rs`) and its encoding as bytes (`codec.rs`).

mod audit;
mod codec;
mod info;
mod state;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};

pub use audit::{AuditAction, AuditEntry};
pub use codec::CorruptRecord;
pub use info::{CallInfo, CallInfoRef, Reason};
pub use state::{FailureCode, Fence, Outcome, OutputJson, RecordState, Status, StoredFailure};

/// How long completed records are kept unless a tool says otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The prefix of the step names idem records itself (the approval, the
/// attempt, the intent, a lease renewal); a tool's own step may not start
/// with it.
pub const RESERVED_STEP_PREFIX: &str = "idem:";

/// The step name under which an approval decision is recorded: by the
/// executor before an `irreversible` tool runs, or by an operator approving
/// a call that awaits approval.
pub const APPROVAL_STEP: &str = "idem:approval";

/// The step name under which the approvals given so far towards a call
/// that needs more than one (a two-person rule) are recorded, oldest first,
/// each bound to the arguments it was given for. They grant nothing: the
/// call is approved only once [`APPROVAL_STEP`] is written, by the approval
/// that makes the count
/// ([`Operator::add_approval`](crate::operator::Operator::add_approval)).
pub const APPROVALS_STEP: &str = "idem:approvals";

/// The step name under which the executor records, when it parks a call
/// awaiting approval, who asked for it: the principal as authenticated
/// ([`RunContext::principal`](crate::executor::RunContext::principal)),
/// else the call's namespace whole. The approval rules compare an
/// approver with it (`forbid_self_approval`); it is never parsed back out
/// of a namespace, where a principal `mallory/erin` would read as `erin`.
pub const ASKER_STEP: &str = "idem:asker";

/// The step name under which the executor records, when an approval rule
/// parks a call for people, the rule's name: the rule whose approvers,
/// count and `forbid_self_approval` then govern every decision on it,
/// whatever its arguments read like later.
pub const RULE_STEP: &str = "idem:rule";

/// The step name under which an approver's edit of a call awaiting
/// approval is recorded on the original, denied in its favour: a
/// [`EditedTo`] naming the edited call's key, who edited it, and the
/// edited arguments' fingerprint
/// ([`Operator::edit_record`](crate::operator::Operator::edit_record)).
/// A step, like every other decision on the record, so that every store
/// keeps it with no change to its schema and records written before it
/// read as they did.
pub const EDITED_STEP: &str = "idem:edited";

/// What [`EDITED_STEP`] holds: where an edited call went.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EditedTo {
    /// The edited call's key.
    pub key: IdempotencyKey,
    /// Who edited the arguments.
    pub by: String,
    /// The fingerprint of the edited arguments.
    pub fingerprint: Fingerprint,
}

/// The step name under which the time the call was approved is recorded
/// (the approval that made the count), by the store's clock: a rule's
/// `valid_for` counts from it.
pub const APPROVED_AT_STEP: &str = "idem:approved_at";

/// The step name under which the number of the attempt about to start is
/// recorded, before the tool body runs, for classes that are never re-run
/// (`non_idempotent_write`, `irreversible`), and before every retry. A
/// takeover that finds no such step knows the previous owner never started
/// the tool, so the call simply runs.
pub const ATTEMPT_STEP: &str = "idem:attempt";

/// The step under which [`ToolCtx::intent`](crate::ctx::ToolCtx::intent)
/// records what a tool is about to do.
pub const INTENT_STEP: &str = "idem:intent";

/// The step under which an owner that took a key over from a vanished
/// owner writes that it waits out that owner's attempt before asking the
/// reconcile hook: until when, and whose attempt ([`Outlast`]). While it
/// waits, an operator may settle the key.
pub const OUTLAST_STEP: &str = "idem:outlast";

/// What [`OUTLAST_STEP`] holds: owner `by` waits until `until` (by the
/// store's clock) for the attempt of the vanished owner `previous` to be
/// over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Outlast {
    /// When the vanished owner's attempt must be over.
    pub until: Timestamp,
    /// The vanished owner.
    pub previous: Fence,
    /// The owner waiting.
    pub by: Fence,
}

impl Outlast {
    /// The step's value.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("two numbers and a timestamp serialize")
    }
}

/// The step a lease renewal is recorded as by a store without a renewal
/// of its own (the default [`StoreExt::renew`](crate::store::StoreExt::renew)).
pub const LEASE_STEP: &str = "idem:lease";

/// Everything a store keeps under a key.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
// Read through a flat mirror: serde's `flatten` over the internally tagged
// state buffers the whole record into an intermediate tree first, which
// was most of the cost of answering a duplicate from SQLite.
#[serde(try_from = "codec::RecordWire")]
pub struct Record {
    /// The key.
    pub key: IdempotencyKey,
    /// The tool that claimed it.
    pub tool: String,
    /// Fingerprint of the first call's canonical arguments.
    pub fingerprint: Fingerprint,
    /// When the key was first claimed.
    pub created_at: Timestamp,
    /// In flight, awaiting approval, or completed.
    #[serde(flatten)]
    pub state: RecordState,
    /// Progress of a multi-step tool: step name → stored step result.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steps: BTreeMap<String, Value>,
    /// What the first claim recorded about the call.
    #[serde(default, skip_serializing_if = "CallInfo::is_empty")]
    pub info: CallInfo,
    /// The worker that holds the key, or last held it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// Operator actions on the record, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub audit: Vec<AuditEntry>,
}

impl Record {
    /// The outcome, if completed.
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.state {
            RecordState::Completed { outcome, .. } => Some(outcome),
            RecordState::InFlight { .. } | RecordState::AwaitingApproval { .. } => None,
        }
    }

    /// The current fence.
    pub fn fence(&self) -> Fence {
        match &self.state {
            RecordState::InFlight { fence, .. }
            | RecordState::AwaitingApproval { fence, .. }
            | RecordState::Completed { fence, .. } => *fence,
        }
    }

    /// Where the record stands.
    pub fn status(&self) -> Status {
        match &self.state {
            RecordState::InFlight { .. } => Status::InFlight,
            RecordState::AwaitingApproval { .. } if self.steps.contains_key(APPROVAL_STEP) => {
                Status::Approved
            }
            RecordState::AwaitingApproval { .. } => Status::AwaitingApproval,
            RecordState::Completed { outcome, .. } => match outcome {
                Outcome::Success { .. } => Status::Succeeded,
                Outcome::Failure { .. } => Status::Failed,
                Outcome::Unknown { .. } => Status::Unknown,
            },
        }
    }

    /// When the record lapses: a completed record's or an approval
    /// request's expiry; `None` when it never lapses — in flight, or
    /// completed with an [`Outcome::Unknown`], which is kept until a person
    /// settles it, whatever expiry it was written with (records written
    /// before idem 0.3 carried one).
    pub fn expires_at(&self) -> Option<Timestamp> {
        match &self.state {
            RecordState::InFlight { .. }
            | RecordState::Completed {
                outcome: Outcome::Unknown { .. },
                ..
            } => None,
            RecordState::AwaitingApproval { expires_at, .. }
            | RecordState::Completed { expires_at, .. } => Some(*expires_at),
        }
    }

    /// How long a decision about this call is kept: the TTL the tool's
    /// outcomes have (recorded at the first claim), else `fallback` for
    /// records written before idem 0.3.
    pub fn ttl_or(&self, fallback: Duration) -> Duration {
        self.info.ttl.unwrap_or(fallback)
    }

    /// Where this call went when an approver edited its arguments
    /// ([`EDITED_STEP`]): `None` for a call nobody edited.
    pub fn edited(&self) -> Option<EditedTo> {
        serde_json::from_value(self.steps.get(EDITED_STEP)?.clone()).ok()
    }

    /// Whether this is the executor's own bookkeeping rather than a call:
    /// its tool is named with the reserved prefix
    /// ([`RESERVED_STEP_PREFIX`], as a repeat window's index
    /// `idem:window:TOOL`). Operators' listings and counts leave it out.
    pub fn is_bookkeeping(&self) -> bool {
        self.tool.starts_with(RESERVED_STEP_PREFIX)
    }

    /// Whether the record is *open*: in flight, awaiting approval (or
    /// approved and not yet run), or completed with an unknown outcome —
    /// a call that is still running or that may need a person. Only a
    /// success or a definite failure settles a record.
    /// [`StoreExt::scan_open`](crate::store::StoreExt::scan_open) pages through
    /// the open records alone.
    pub fn is_open(&self) -> bool {
        self.status().is_open()
    }

    /// The wait of an owner that took this in-flight record over from a
    /// vanished owner and waits out that owner's attempt before
    /// reconciling it ([`OUTLAST_STEP`]); `None` otherwise.
    pub fn outlast(&self) -> Option<Outlast> {
        let RecordState::InFlight { fence, .. } = self.state else {
            return None;
        };
        let wait: Outlast = serde_json::from_value(self.steps.get(OUTLAST_STEP)?.clone()).ok()?;
        (wait.by == fence).then_some(wait)
    }

    /// Whether the record is in flight with a lease that ran out at `now`.
    pub fn lease_expired(&self, now: Timestamp) -> bool {
        matches!(self.state, RecordState::InFlight { lease_until, .. } if lease_until <= now)
    }

    /// Whether the record is completed, or awaiting an approval, and past
    /// its expiry at `now`: it then reads as absent and may be swept.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at().is_some_and(|at| at <= now)
    }
}
