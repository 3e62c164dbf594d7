//! The JSON of a record and of an audit event as operators' tools show it:
//! `idem show --json` (and `ls`, `log`, the decisions' `--json`) and the
//! approval inbox's API (`GET /api/records/KEY`, which puts a
//! [`RecordJson`] under `record` beside the inbox's own fields). One
//! builder, so that a script reading either sees one schema, documented in
//! `docs/cli.md`. Every field is always present (`null` when it does not
//! apply), so a script can index without checking; fields are only ever
//! added, never renamed or removed.
//!
//! These types are the schema: they are built from the library's records
//! here, and never serialized from the library's own types, whose stored
//! form may change between versions.
//!
//! ```
//! use idem_runtime::operator::json::json_or_string;
//!
//! assert_eq!(json_or_string("{\"id\":7}")["id"], 7);
//! assert_eq!(json_or_string("not json"), "not json");
//! ```

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::audit::AuditEvent;
use crate::clock::Timestamp;
use crate::record::{Outcome, Record, RecordState, Status};

fn rfc3339(at: Timestamp) -> String {
    at.rfc3339()
}

/// One record (`idem show --json`, each of `idem ls --json`'s `records`).
#[derive(Debug, Serialize)]
#[non_exhaustive]
pub struct RecordJson {
    /// The full key.
    pub key: String,
    /// `in_flight`, `awaiting_approval`, `approved`, `succeeded`, `failed`
    /// or `unknown`.
    pub status: Status,
    /// The tool that claimed the key.
    pub tool: String,
    /// The tenant, when recorded.
    pub namespace: Option<String>,
    /// The provider's call id, when the key came from one.
    pub call_id: Option<String>,
    /// The agent run, when the call was made in one.
    pub run_id: Option<String>,
    /// The run's step, with `run_id`.
    pub step: Option<u64>,
    /// Why the call was made, in the caller's words, when it said.
    pub reason: Option<String>,
    /// The worker that holds the key or last held it.
    pub worker: Option<String>,
    /// When the key was first claimed (RFC 3339, UTC).
    pub created_at: String,
    /// When the call finished (completed records).
    pub completed_at: Option<String>,
    /// When the record lapses and may be purged (completed records and
    /// approval requests).
    pub expires_at: Option<String>,
    /// The owner's lease (in-flight records).
    pub lease: Option<LeaseJson>,
    /// Hex SHA-256 of the canonical arguments.
    pub fingerprint: String,
    /// The canonical arguments, unless the tool keeps them out of the store
    /// (then only `fingerprint` identifies them).
    pub arguments: Option<Value>,
    /// The approval asked for or given (irreversible calls).
    pub approval: Option<ApprovalJson>,
    /// What the call produced (completed records).
    pub outcome: Option<OutcomeJson>,
    /// Completed steps of a multi-step tool (`idem:approval`,
    /// `idem:attempt` included): name → stored value.
    pub steps: BTreeMap<String, Value>,
    /// Operator actions on the record, oldest first.
    pub audit: Vec<AuditJson>,
}

/// An in-flight record's lease.
#[derive(Debug, Serialize)]
#[non_exhaustive]
pub struct LeaseJson {
    /// When the owner is presumed dead.
    pub until: String,
    /// Whether that time has passed (the owner vanished; an operator may
    /// resolve the call).
    pub expired: bool,
}

/// An approval asked for or given.
#[derive(Debug, Serialize)]
#[non_exhaustive]
pub struct ApprovalJson {
    /// When it was asked for, while the call awaits approval.
    pub requested_at: Option<String>,
    /// What the approval policy said when it left the call pending.
    pub message: Option<String>,
    /// Who approved it, once approved.
    pub approved_by: Option<String>,
    /// The note given with the approval.
    pub note: Option<String>,
    /// The approvals given so far towards a call that needs more than one
    /// (a two-person rule), oldest first, only those for its arguments.
    pub approvals_so_far: Vec<GivenApprovalJson>,
}

/// One approval given towards a call that needs several.
#[derive(Debug, Serialize)]
#[non_exhaustive]
pub struct GivenApprovalJson {
    /// Who gave it.
    pub by: String,
    /// When (the store's clock).
    pub at: String,
    /// The note given with it.
    pub note: Option<String>,
}

/// What a completed call produced.
#[derive(Debug, Serialize)]
#[non_exhaustive]
pub struct OutcomeJson {
    /// `succeeded`, `failed` or `unknown` (as the record's `status`).
    pub status: Status,
    /// The output (`succeeded`).
    pub output: Option<Value>,
    /// `permanent` or `approval_denied` (`failed`).
    pub code: Option<String>,
    /// The failure's message (`failed`) or what is known (`unknown`).
    pub message: Option<String>,
    /// A failure's structured details, if any.
    pub details: Option<Value>,
}

/// One operator action.
#[derive(Debug, Serialize)]
#[non_exhaustive]
pub struct AuditJson {
    /// When (the store's clock).
    pub at: String,
    /// Who (`--by`).
    pub by: String,
    /// `approved`, `denied`, `resolved_succeeded` or `resolved_failed`.
    pub action: String,
    /// Why, or the approval's note.
    pub reason: Option<String>,
}

/// One event of the store's audit log (`idem log --json`).
#[derive(Debug, Serialize)]
#[non_exhaustive]
pub struct AuditEventJson {
    /// Where the store put it in its log.
    pub seq: Option<u64>,
    /// When (the store's clock).
    pub at: String,
    /// The key of the record acted on.
    pub key: String,
    /// The tool that claimed the key.
    pub tool: String,
    /// The tenant.
    pub namespace: Option<String>,
    /// What was done (`approved`, `denied`, `resolved_succeeded`,
    /// `resolved_failed`, `released`, `deleted`, `approved_by_policy`,
    /// `denied_by_policy`, `asked`; for the inbox, about no record:
    /// `signed_in`, `sign_in_failed`, `signed_out`, `sessions_revoked`).
    pub action: &'static str,
    /// Who: the operator (`--by`), or the policy that decided.
    pub by: String,
    /// Why, or the approval's note.
    pub reason: Option<String>,
    /// The record's status before.
    pub before: Option<&'static str>,
    /// Its status after; `null` when the record was deleted (and, with
    /// `before` `null` too, for an event about no record).
    pub after: Option<&'static str>,
    /// The fingerprint of the record's arguments.
    pub fingerprint: String,
}

impl AuditEventJson {
    /// The schema's view of `event`.
    pub fn new(event: &AuditEvent) -> Self {
        AuditEventJson {
            seq: event.seq,
            at: rfc3339(event.at),
            key: event.key.as_str().to_owned(),
            tool: event.tool.clone(),
            namespace: event.namespace.clone(),
            action: event.action.as_str(),
            by: event.by.clone(),
            reason: event.reason.clone(),
            before: event.before.map(Status::as_str),
            after: event.after.map(Status::as_str),
            fingerprint: event.fingerprint.as_str().to_owned(),
        }
    }
}

impl RecordJson {
    /// The schema's view of `record`, at the store's time `now`.
    pub fn new(record: &Record, now: Timestamp) -> Self {
        let info = &record.info;
        let (completed_at, lease) = match &record.state {
            RecordState::InFlight { lease_until, .. } => (
                None,
                Some(LeaseJson {
                    until: rfc3339(*lease_until),
                    expired: record.lease_expired(now),
                }),
            ),
            RecordState::AwaitingApproval { .. } => (None, None),
            RecordState::Completed { completed_at, .. } => (Some(rfc3339(*completed_at)), None),
        };
        RecordJson {
            key: record.key.as_str().to_owned(),
            status: record.status(),
            tool: record.tool.clone(),
            namespace: info.namespace.clone(),
            call_id: info.call_id.clone(),
            run_id: info.run_id.clone(),
            step: info.step,
            reason: info.reason.as_ref().map(|r| r.as_str().to_owned()),
            worker: record.worker.clone(),
            created_at: rfc3339(record.created_at),
            completed_at,
            expires_at: record.expires_at().map(rfc3339),
            lease,
            fingerprint: record.fingerprint.as_str().to_owned(),
            arguments: info.args.as_deref().map(json_or_string),
            approval: approval(record),
            outcome: record.outcome().map(outcome),
            steps: record.steps.clone(),
            audit: record
                .audit
                .iter()
                .map(|entry| AuditJson {
                    at: rfc3339(entry.at),
                    by: entry.by.clone(),
                    action: entry.action.as_str().to_owned(),
                    reason: entry.reason.clone(),
                })
                .collect(),
        }
    }
}

fn approval(record: &Record) -> Option<ApprovalJson> {
    let given = record.approval();
    let (requested_at, message) = match &record.state {
        RecordState::AwaitingApproval {
            requested_at,
            message,
            ..
        } => (Some(rfc3339(*requested_at)), Some(message.clone())),
        _ => (None, None),
    };
    if given.is_none() && requested_at.is_none() {
        return None;
    }
    Some(ApprovalJson {
        requested_at,
        message,
        approved_by: given.as_ref().map(|a| a.approver.clone()),
        note: given.and_then(|a| a.note),
        approvals_so_far: record
            .approvals()
            .into_iter()
            .map(|g| GivenApprovalJson {
                by: g.approval.approver,
                at: rfc3339(g.at),
                note: g.approval.note,
            })
            .collect(),
    })
}

fn outcome(outcome: &Outcome) -> OutcomeJson {
    let empty = OutcomeJson {
        status: Status::Unknown,
        output: None,
        code: None,
        message: None,
        details: None,
    };
    match outcome {
        Outcome::Success { output } => OutcomeJson {
            status: Status::Succeeded,
            output: Some(json_or_string(output.as_str())),
            ..empty
        },
        Outcome::Failure { failure } => OutcomeJson {
            status: Status::Failed,
            code: Some(failure.code.as_str().to_owned()),
            message: Some(failure.message.clone()),
            details: failure.details.clone(),
            ..empty
        },
        Outcome::Unknown { reason } => OutcomeJson {
            message: Some(reason.clone()),
            ..empty
        },
    }
}

/// Stored JSON text as a value (as a string if it somehow is not JSON).
pub fn json_or_string(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}
