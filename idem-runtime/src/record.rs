//! Records: what a store keeps under a key.
//!
//! A record is born *in flight* when a call claims its key, holding a lease
//! (until when the owner is presumed alive) and a fencing token (which owner
//! it is). It becomes *completed* with the call's [`Outcome`], and is kept
//! until it expires (24 h by default), after which a sweeper may delete it.
//! In-flight records are never swept.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde_json::Value;

use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};

/// How long completed records are kept unless a tool says otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// A fencing token: identifies one owner of a key. Each claim or takeover of
/// a key gets a fence never handed out before for that key, and only the
/// current fence may checkpoint, complete or release the record.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Fence(pub u64);

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fence {}", self.0)
    }
}

/// A tool's output as JSON text, exactly as it was first serialized:
/// duplicates are answered with these bytes, and a record holds one string
/// rather than a tree of JSON values.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct OutputJson(String);

impl OutputJson {
    /// Serialize `output`.
    pub fn new<T: serde::Serialize + ?Sized>(output: &T) -> Result<Self, serde_json::Error> {
        serde_json::to_string(output).map(OutputJson)
    }

    /// The JSON text of `value`.
    pub fn from_value(value: &Value) -> Self {
        OutputJson(value.to_string())
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Parse the text as `T`.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.0)
    }
}

/// What a completed call produced.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The tool succeeded; its output as JSON.
    Success {
        /// The output, as JSON text.
        output: OutputJson,
    },
    /// The tool failed definitely (a permanent error, or a refusal such as a
    /// denied approval); duplicates get the same failure.
    Failure {
        /// The failure.
        failure: StoredFailure,
    },
    /// Nobody knows whether the effect happened: an owner of a
    /// non-idempotent tool vanished mid-call and no reconcile hook could
    /// tell. Never re-run, and never expires: the record is kept until an
    /// operator settles it.
    Unknown {
        /// What is known about it.
        reason: String,
    },
}

/// Why a call failed definitely, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureCode {
    /// The tool returned a permanent error.
    Permanent,
    /// An approval was denied; the tool never ran.
    ApprovalDenied,
}

impl FailureCode {
    /// The code as stored (`"permanent"`, `"approval_denied"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureCode::Permanent => "permanent",
            FailureCode::ApprovalDenied => "approval_denied",
        }
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A definite failure as recorded.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredFailure {
    /// Why it failed.
    pub code: FailureCode,
    /// The message.
    pub message: String,
    /// Optional structured details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// The state of a record.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum RecordState {
    /// A call owns the key and is running.
    InFlight {
        /// The owner.
        fence: Fence,
        /// The owner is presumed dead after this instant.
        lease_until: Timestamp,
    },
    /// An `irreversible` call waits for a person's decision. Nothing runs
    /// and no lease is held. Once approved (the approval is recorded as the
    /// step [`APPROVAL_STEP`]) the next claim of the key owns it and runs
    /// the call; a denial completes the record as a failure.
    AwaitingApproval {
        /// The fence of the last writer (the owner that asked, or the
        /// operator that approved); operator actions are fenced with it.
        fence: Fence,
        /// When the approval was asked for.
        requested_at: Timestamp,
        /// When the request lapses: unanswered, the approval TTL after it
        /// was asked for (the record is then swept like an expired
        /// completed record, and a later call asks again); once approved,
        /// the tool's TTL after the approval, like an outcome.
        expires_at: Timestamp,
        /// What the approval policy said when it left the call pending.
        message: String,
    },
    /// The call finished.
    Completed {
        /// The owner that completed it.
        fence: Fence,
        /// What it produced.
        outcome: Outcome,
        /// When it finished.
        completed_at: Timestamp,
        /// When the record may be swept.
        expires_at: Timestamp,
    },
}

/// The step name under which an approval decision is recorded: by the
/// executor before an `irreversible` tool runs, or by an operator approving
/// a call that awaits approval.
pub const APPROVAL_STEP: &str = "idem:approval";

/// Where a record stands, as an operator filters and counts records.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A call owns the key (its lease may have run out: see
    /// [`Record::lease_expired`]).
    InFlight,
    /// Waiting for a person to approve or deny it.
    AwaitingApproval,
    /// Approved, and not yet claimed by the call that will run it.
    Approved,
    /// Completed with an output.
    Succeeded,
    /// Completed with a definite failure (a denial included).
    Failed,
    /// Completed as unknown: nobody knows whether the effect happened.
    Unknown,
}

impl Status {
    /// Every status, in the order [`Status::as_str`] lists them.
    pub const ALL: [Status; 6] = [
        Status::InFlight,
        Status::AwaitingApproval,
        Status::Approved,
        Status::Succeeded,
        Status::Failed,
        Status::Unknown,
    ];

    /// The status as written in filters and JSON (`"in_flight"`,
    /// `"awaiting_approval"`, `"approved"`, `"succeeded"`, `"failed"`,
    /// `"unknown"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::InFlight => "in_flight",
            Status::AwaitingApproval => "awaiting_approval",
            Status::Approved => "approved",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Status {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.replace('-', "_");
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == wanted)
            .ok_or_else(|| {
                let known: Vec<_> = Status::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown state `{s}` (expected one of {})", known.join(", "))
            })
    }
}

/// What the first claim of a key recorded about the call: what an operator
/// needs to find it and judge it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CallInfo {
    /// The tenant / principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The provider's call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The agent run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The step within the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The canonical arguments (RFC 8785 JSON text), unless the tool keeps
    /// its arguments out of the store (`#[tool(sensitive)]`): then only the
    /// record's fingerprint identifies them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<String>,
    /// How long the tool keeps its outcomes (its `ttl`, else the
    /// executor's): what a decision about the call — an approval, a denial,
    /// an operator's resolution — is kept for, so that nothing decided
    /// lapses sooner than the tool's own outcomes would. `None` in records
    /// written before idem 0.3.
    #[serde(
        default,
        rename = "ttl_ms",
        skip_serializing_if = "Option::is_none",
        with = "opt_millis"
    )]
    pub ttl: Option<Duration>,
}

/// An optional span as whole milliseconds (saturating at `u64::MAX`).
mod opt_millis {
    use std::time::Duration;

    pub(super) fn serialize<S: serde::Serializer>(
        span: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match span {
            Some(d) => s.serialize_some(&(d.as_millis().min(u128::from(u64::MAX)) as u64)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        let ms: Option<u64> = serde::Deserialize::deserialize(d)?;
        Ok(ms.map(Duration::from_millis))
    }
}

/// [`CallInfo`] borrowed from the call, as a claim carries it: a store
/// copies it only when the claim creates a record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CallInfoRef<'a> {
    /// The tenant / principal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<&'a str>,
    /// The provider's call id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call_id: Option<&'a str>,
    /// The agent run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<&'a str>,
    /// The step within the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The canonical arguments, unless the tool keeps them out of the store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<&'a str>,
    /// How long the tool keeps its outcomes.
    #[serde(
        rename = "ttl_ms",
        skip_serializing_if = "Option::is_none",
        serialize_with = "opt_millis::serialize"
    )]
    pub ttl: Option<Duration>,
}

impl CallInfoRef<'_> {
    /// Nothing known.
    pub const EMPTY: CallInfoRef<'static> = CallInfoRef {
        namespace: None,
        call_id: None,
        run_id: None,
        step: None,
        args: None,
        ttl: None,
    };

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        *self == CallInfoRef::EMPTY
    }

    /// An owned copy, for the record.
    pub fn to_owned(&self) -> CallInfo {
        CallInfo {
            namespace: self.namespace.map(str::to_owned),
            call_id: self.call_id.map(str::to_owned),
            run_id: self.run_id.map(str::to_owned),
            step: self.step,
            args: self.args.map(str::to_owned),
            ttl: self.ttl,
        }
    }
}

impl CallInfo {
    /// Borrowed, as a claim carries it.
    pub fn as_ref(&self) -> CallInfoRef<'_> {
        CallInfoRef {
            namespace: self.namespace.as_deref(),
            call_id: self.call_id.as_deref(),
            run_id: self.run_id.as_deref(),
            step: self.step,
            args: self.args.as_deref(),
            ttl: self.ttl,
        }
    }

    /// Nothing known (records written before idem 0.2, stores tested alone).
    pub const EMPTY: CallInfo = CallInfo {
        namespace: None,
        call_id: None,
        run_id: None,
        step: None,
        args: None,
        ttl: None,
    };

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        *self == Self::EMPTY
    }
}

/// An operator action, as recorded on the record it changed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditEntry {
    /// When (the store's clock).
    pub at: Timestamp,
    /// Who (as given with `--by`).
    pub by: String,
    /// What.
    pub action: AuditAction,
    /// Why, or the note given with an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What an operator did to a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditAction {
    /// Approved a call awaiting approval.
    Approved,
    /// Denied a call awaiting approval.
    Denied,
    /// Settled an unknown outcome (or a dead owner's call) as succeeded.
    ResolvedSucceeded,
    /// Settled an unknown outcome (or a dead owner's call) as failed.
    ResolvedFailed,
    /// Released an unknown outcome or a dead owner's call to run again.
    Released,
    /// Deleted a record.
    Deleted,
    /// The executor's approval policy approved a call.
    ApprovedByPolicy,
    /// The executor's approval policy denied a call.
    DeniedByPolicy,
    /// A person was asked to decide a call awaiting approval (in a chat,
    /// through MCP elicitation) and gave no decision: the call stays
    /// pending, and they are not asked about it again.
    Asked,
}

impl AuditAction {
    /// The action as stored.
    pub const fn as_str(self) -> &'static str {
        match self {
            AuditAction::Approved => "approved",
            AuditAction::Denied => "denied",
            AuditAction::ResolvedSucceeded => "resolved_succeeded",
            AuditAction::ResolvedFailed => "resolved_failed",
            AuditAction::Released => "released",
            AuditAction::Deleted => "deleted",
            AuditAction::ApprovedByPolicy => "approved_by_policy",
            AuditAction::DeniedByPolicy => "denied_by_policy",
            AuditAction::Asked => "asked",
        }
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Everything a store keeps under a key.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
// Read through a flat mirror: serde's `flatten` over the internally tagged
// state buffers the whole record into an intermediate tree first, which
// was most of the cost of answering a duplicate from SQLite.
#[serde(try_from = "wire::RecordWire")]
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

    /// The approval recorded under [`APPROVAL_STEP`], if any.
    pub fn approval(&self) -> Option<crate::approval::Approval> {
        match serde_json::from_value(self.steps.get(APPROVAL_STEP)?.clone()) {
            Ok(crate::approval::ApprovalDecision::Approved(approval)) => Some(approval),
            _ => None,
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

    /// Whether the record is in flight with a lease that ran out at `now`.
    pub fn lease_expired(&self, now: Timestamp) -> bool {
        matches!(self.state, RecordState::InFlight { lease_until, .. } if lease_until <= now)
    }

    /// Whether the record is completed, or awaiting an approval, and past
    /// its expiry at `now`: it then reads as absent and may be swept.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at().is_some_and(|at| at <= now)
    }

    /// Encode for a store that keeps records as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record always serializes")
    }

    /// Decode bytes written by [`Record::to_bytes`]; garbage is a
    /// [`CorruptRecord`] error, never a silently empty record.
    pub fn from_bytes(key: &str, bytes: &[u8]) -> Result<Record, CorruptRecord> {
        let corrupt = |detail: String| CorruptRecord {
            key: key.to_owned(),
            detail,
        };
        // Checked as UTF-8 once, rather than string by string as
        // `from_slice` does.
        let text = std::str::from_utf8(bytes).map_err(|e| corrupt(e.to_string()))?;
        let record: Record = serde_json::from_str(text).map_err(|e| corrupt(e.to_string()))?;
        if record.key.as_str() != key {
            return Err(corrupt(format!("record names key {} instead", record.key)));
        }
        Ok(record)
    }
}

/// A stored record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the stored record for key {key} is corrupt ({detail}); it was left untouched and nothing ran"
)]
pub struct CorruptRecord {
    /// The key.
    pub key: String,
    /// What is wrong.
    pub detail: String,
}

/// The flat form records are read in (see [`Record`]'s `Deserialize`): the
/// same JSON, every state's fields optional, checked against the state's
/// tag once read.
mod wire {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use super::{
        AuditEntry, CallInfo, Fence, Outcome, OutputJson, Record, RecordState, StoredFailure,
    };
    use crate::clock::Timestamp;
    use crate::key::{Fingerprint, IdempotencyKey};

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum StateTag {
        InFlight,
        AwaitingApproval,
        Completed,
    }

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum StatusTag {
        Success,
        Failure,
        Unknown,
    }

    #[derive(serde::Deserialize)]
    pub(super) struct OutcomeWire {
        status: StatusTag,
        output: Option<OutputJson>,
        failure: Option<StoredFailure>,
        reason: Option<String>,
    }

    #[derive(serde::Deserialize)]
    pub(super) struct RecordWire {
        key: IdempotencyKey,
        tool: String,
        fingerprint: Fingerprint,
        created_at: Timestamp,
        state: StateTag,
        fence: Option<Fence>,
        lease_until: Option<Timestamp>,
        requested_at: Option<Timestamp>,
        expires_at: Option<Timestamp>,
        message: Option<String>,
        outcome: Option<OutcomeWire>,
        completed_at: Option<Timestamp>,
        #[serde(default)]
        steps: BTreeMap<String, Value>,
        #[serde(default)]
        info: CallInfo,
        #[serde(default)]
        worker: Option<String>,
        #[serde(default)]
        audit: Vec<AuditEntry>,
    }

    fn field<T>(value: Option<T>, name: &str) -> Result<T, String> {
        value.ok_or_else(|| format!("missing field `{name}`"))
    }

    impl TryFrom<OutcomeWire> for Outcome {
        type Error = String;
        fn try_from(w: OutcomeWire) -> Result<Self, String> {
            Ok(match w.status {
                StatusTag::Success => Outcome::Success {
                    output: field(w.output, "output")?,
                },
                StatusTag::Failure => Outcome::Failure {
                    failure: field(w.failure, "failure")?,
                },
                StatusTag::Unknown => Outcome::Unknown {
                    reason: field(w.reason, "reason")?,
                },
            })
        }
    }

    impl TryFrom<RecordWire> for Record {
        type Error = String;
        fn try_from(w: RecordWire) -> Result<Self, String> {
            let fence = field(w.fence, "fence")?;
            let state = match w.state {
                StateTag::InFlight => RecordState::InFlight {
                    fence,
                    lease_until: field(w.lease_until, "lease_until")?,
                },
                StateTag::AwaitingApproval => RecordState::AwaitingApproval {
                    fence,
                    requested_at: field(w.requested_at, "requested_at")?,
                    expires_at: field(w.expires_at, "expires_at")?,
                    message: field(w.message, "message")?,
                },
                StateTag::Completed => RecordState::Completed {
                    fence,
                    outcome: field(w.outcome, "outcome")?.try_into()?,
                    completed_at: field(w.completed_at, "completed_at")?,
                    expires_at: field(w.expires_at, "expires_at")?,
                },
            };
            Ok(Record {
                key: w.key,
                tool: w.tool,
                fingerprint: w.fingerprint,
                created_at: w.created_at,
                state,
                steps: w.steps,
                info: w.info,
                worker: w.worker,
                audit: w.audit,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: RecordState) -> Record {
        Record {
            key: IdempotencyKey::parse(&"ab".repeat(32)).unwrap(),
            tool: "send_email".into(),
            fingerprint: Fingerprint::new("cd".repeat(32)),
            created_at: Timestamp(5),
            state,
            steps: BTreeMap::from([("idem:attempt".to_owned(), Value::from(1))]),
            info: CallInfo {
                namespace: Some("acme".into()),
                ..CallInfo::default()
            },
            worker: Some("vm:1".into()),
            audit: Vec::new(),
        }
    }

    fn completed(outcome: Outcome) -> RecordState {
        RecordState::Completed {
            fence: Fence(3),
            outcome,
            completed_at: Timestamp(7),
            expires_at: Timestamp(9),
        }
    }

    #[test]
    fn every_state_reads_back_as_written() {
        let states = [
            RecordState::InFlight {
                fence: Fence(1),
                lease_until: Timestamp(6),
            },
            RecordState::AwaitingApproval {
                fence: Fence(2),
                requested_at: Timestamp(6),
                expires_at: Timestamp(8),
                message: "needs a person".into(),
            },
            completed(Outcome::Success {
                output: OutputJson::new(&serde_json::json!({"id": 1})).unwrap(),
            }),
            completed(Outcome::Failure {
                failure: StoredFailure {
                    code: FailureCode::ApprovalDenied,
                    message: "no".into(),
                    details: Some(serde_json::json!([1])),
                },
            }),
            completed(Outcome::Unknown {
                reason: "owner vanished".into(),
            }),
        ];
        for state in states {
            let r = record(state);
            let key = r.key.as_str().to_owned();
            assert_eq!(Record::from_bytes(&key, &r.to_bytes()).unwrap(), r);
        }
    }

    #[test]
    fn a_state_without_its_fields_is_corrupt() {
        let key = "ab".repeat(32);
        let base =
            format!(r#""key":"{key}","tool":"t","fingerprint":"f","created_at":1,"fence":2"#);
        for (json, missing) in [
            (
                format!(r#"{{{base},"state":"completed","completed_at":3,"expires_at":4}}"#),
                "outcome",
            ),
            (format!(r#"{{{base},"state":"in_flight"}}"#), "lease_until"),
            (
                format!(
                    r#"{{{base},"state":"completed","completed_at":3,"expires_at":4,"outcome":{{"status":"success"}}}}"#
                ),
                "output",
            ),
            (
                format!(r#"{{{base},"state":"lost","lease_until":3}}"#),
                "unknown variant",
            ),
        ] {
            let err = Record::from_bytes(&key, json.as_bytes()).unwrap_err();
            assert!(err.detail.contains(missing), "{json}: {}", err.detail);
        }
    }
}
