//! The JSON that `--json` prints: the stable schema documented in
//! `docs/cli.md`. Every field is always present (`null` when it does not
//! apply), so a script can index without checking; fields are only ever
//! added, never renamed or removed.
//!
//! These types are the schema: they are built from the library's records
//! here, and never serialized from the library's own types, whose stored
//! form may change between versions.

use std::collections::BTreeMap;

use idem_runtime::clock::Timestamp;
use idem_runtime::operator::Counts;
use idem_runtime::record::{Outcome, Record, RecordState, Status};
use serde::Serialize;
use serde_json::Value;

use crate::time::rfc3339;

/// One record (`idem show --json`, each of `idem ls --json`'s `records`).
#[derive(Debug, Serialize)]
pub(crate) struct RecordJson {
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
pub(crate) struct LeaseJson {
    /// When the owner is presumed dead.
    pub until: String,
    /// Whether that time has passed (the owner vanished; an operator may
    /// resolve the call).
    pub expired: bool,
}

/// An approval asked for or given.
#[derive(Debug, Serialize)]
pub(crate) struct ApprovalJson {
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
pub(crate) struct GivenApprovalJson {
    /// Who gave it.
    pub by: String,
    /// When (the store's clock).
    pub at: String,
    /// The note given with it.
    pub note: Option<String>,
}

/// What a completed call produced.
#[derive(Debug, Serialize)]
pub(crate) struct OutcomeJson {
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
pub(crate) struct AuditJson {
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
pub(crate) struct AuditEventJson {
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
    pub(crate) fn new(event: &idem_runtime::audit::AuditEvent) -> Self {
        AuditEventJson {
            seq: event.seq,
            at: crate::time::rfc3339(event.at),
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

/// `idem log --json`.
#[derive(Debug, Serialize)]
pub(crate) struct LogJson {
    /// The events shown, oldest first.
    pub events: Vec<AuditEventJson>,
    /// How many events matched (more than `events` holds when `--limit`
    /// cut the list).
    pub total: u64,
}

/// `idem ls --json`.
#[derive(Debug, Serialize)]
pub(crate) struct ListJson {
    /// The matching records shown, newest first.
    pub records: Vec<RecordJson>,
    /// How many records matched (more than `records` holds when `--limit`
    /// cut the list).
    pub total: u64,
}

/// `idem stats --json`.
#[derive(Debug, Serialize)]
pub(crate) struct StatsJson {
    /// All records (expired ones not included).
    pub total: u64,
    /// Records per state; every state is present, zero included.
    pub by_status: BTreeMap<&'static str, u64>,
    /// Records per tool.
    pub by_tool: BTreeMap<String, u64>,
    /// Unknown outcomes by how long they have waited for a person.
    pub unknown_by_age: UnknownAgesJson,
}

/// [`StatsJson::unknown_by_age`].
#[derive(Debug, Serialize)]
pub(crate) struct UnknownAgesJson {
    /// Recorded less than an hour ago.
    pub under_1h: u64,
    /// Between an hour and a day ago.
    pub under_1d: u64,
    /// Between a day and a week ago.
    pub under_7d: u64,
    /// A week ago or more.
    pub over_7d: u64,
    /// When the oldest was recorded (RFC 3339), if any.
    pub oldest: Option<String>,
}

/// `idem key --json`.
#[derive(Debug, Serialize)]
pub(crate) struct KeyJson {
    /// The derived key.
    pub key: String,
    /// `call`, `step`, `natural` or `custom`.
    pub source: &'static str,
    /// The key derivation version.
    pub version: u32,
    /// The namespace.
    pub namespace: String,
    /// The tool.
    pub tool: String,
    /// The RFC 8785 canonical arguments, when `--args` was given.
    pub canonical_arguments: Option<String>,
    /// Their fingerprint, as records store it.
    pub fingerprint: Option<String>,
}

/// What `resolve --release`, `delete` and `purge` print with `--json`.
#[derive(Debug, Serialize)]
pub(crate) struct DeletedJson {
    /// The key deleted (`null` for `purge`).
    pub key: Option<String>,
    /// How many records were deleted.
    pub deleted: u64,
}

impl RecordJson {
    /// The schema's view of `record`, at the store's time `now`.
    pub(crate) fn new(record: &Record, now: Timestamp) -> Self {
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

impl StatsJson {
    /// The schema's view of `counts`.
    pub(crate) fn new(counts: &Counts) -> Self {
        StatsJson {
            total: counts.total,
            by_status: Status::ALL
                .iter()
                .map(|s| (s.as_str(), counts.by_status.get(s).copied().unwrap_or(0)))
                .collect(),
            by_tool: counts.by_tool.clone(),
            unknown_by_age: UnknownAgesJson {
                under_1h: counts.unknown_by_age.under_1h,
                under_1d: counts.unknown_by_age.under_1d,
                under_7d: counts.unknown_by_age.under_7d,
                over_7d: counts.unknown_by_age.over_7d,
                oldest: counts.unknown_by_age.oldest.map(crate::time::rfc3339),
            },
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
pub(crate) fn json_or_string(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}
