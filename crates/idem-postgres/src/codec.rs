//! Records as rows: the columns a record is stored in, decoding a row into
//! a record and encoding a record (and an audit event) into parameters.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use idem_runtime::audit::AuditEvent;
use idem_runtime::clock::Timestamp;
use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::record::{
    AuditEntry, CallInfo, CorruptRecord, Fence, Reason, Record, RecordState,
};
use idem_runtime::store::ExpectedState;

/// A record's columns, in the order [`decode`] reads them.
pub(super) const RECORD: &str =
    "key, tool, fingerprint, created_at, fence, prev_fence, state, lease_until, \
     outcome, completed_at, expires_at, steps::text, requested_at, message, \
     namespace, call_id, run_id, step, args, worker, audit::text, ttl_ms, reason";

/// How many columns [`RECORD`] lists.
pub(super) const RECORD_COLUMNS: usize = 23;

/// States as stored.
pub(super) const IN_FLIGHT: i16 = 0;
pub(super) const COMPLETED: i16 = 1;
pub(super) const AWAITING_APPROVAL: i16 = 2;

/// Decode the record whose columns start at `at` (in the order of
/// [`RECORD`]). Malformed stored JSON is a [`CorruptRecord`]. Rows written
/// by schema version 1 have no call details, worker or audit.
pub(super) fn decode(key: &IdempotencyKey, row: &Row, at: usize) -> Result<Record, CorruptRecord> {
    let corrupt = |detail: String| CorruptRecord {
        key: key.as_str().to_owned(),
        detail,
    };
    let time = |i: usize| Timestamp(row.get::<_, i64>(at + i) as u64);
    let when = |i: usize, what: &str| {
        row.get::<_, Option<i64>>(at + i)
            .map(|t| Timestamp(t as u64))
            .ok_or_else(|| corrupt(format!("{what} lacks its times")))
    };
    let fence = Fence(row.get::<_, i64>(at + 4) as u64);
    let state = match row.get::<_, i16>(at + 6) {
        IN_FLIGHT => RecordState::InFlight {
            fence,
            lease_until: row
                .get::<_, Option<i64>>(at + 7)
                .map(|t| Timestamp(t as u64))
                .ok_or_else(|| corrupt("an in-flight record has no lease".into()))?,
        },
        AWAITING_APPROVAL => RecordState::AwaitingApproval {
            fence,
            requested_at: when(12, "a record awaiting approval")?,
            expires_at: when(10, "a record awaiting approval")?,
            message: row.get::<_, Option<String>>(at + 13).unwrap_or_default(),
        },
        _ => {
            let outcome: Option<String> = row.get(at + 8);
            RecordState::Completed {
                fence,
                outcome: serde_json::from_str(
                    &outcome.ok_or_else(|| corrupt("a completed record has no outcome".into()))?,
                )
                .map_err(|e| corrupt(format!("outcome: {e}")))?,
                completed_at: when(9, "a completed record")?,
                expires_at: when(10, "a completed record")?,
            }
        }
    };
    let steps_text: String = row.get(at + 11);
    let raw: BTreeMap<String, Value> =
        serde_json::from_str(&steps_text).map_err(|e| corrupt(format!("steps: {e}")))?;
    let mut steps = BTreeMap::new();
    for (name, value) in raw {
        let Value::String(text) = value else {
            return Err(corrupt(format!("step {name} is not stored as JSON text")));
        };
        let value =
            serde_json::from_str(&text).map_err(|e| corrupt(format!("step {name}: {e}")))?;
        steps.insert(name, value);
    }
    let audit_text: String = row.get(at + 20);
    let audit: Vec<AuditEntry> =
        serde_json::from_str(&audit_text).map_err(|e| corrupt(format!("audit: {e}")))?;
    let mut info = CallInfo::default();
    info.namespace = row.get(at + 14);
    info.call_id = row.get(at + 15);
    info.run_id = row.get(at + 16);
    info.step = row.get::<_, Option<i64>>(at + 17).map(|s| s as u64);
    info.args = row.get(at + 18);
    info.ttl = row
        .get::<_, Option<i64>>(at + 21)
        .map(|ms| Duration::from_millis(ms.max(0) as u64));
    info.reason = row.get::<_, Option<String>>(at + 22).and_then(Reason::new);
    Ok(Record {
        key: key.clone(),
        tool: row.get(at + 1),
        fingerprint: Fingerprint::new(row.get::<_, String>(at + 2)),
        created_at: time(3),
        state,
        steps,
        info,
        worker: row.get(at + 19),
        audit,
    })
}

/// Steps as stored: each step's value as JSON text, so that it comes back
/// byte for byte.
fn encode_steps(steps: &BTreeMap<String, Value>) -> String {
    let stored: serde_json::Map<String, Value> = steps
        .iter()
        .map(|(name, value)| {
            let text = serde_json::to_string(value).expect("a JSON value serializes");
            (name.clone(), Value::String(text))
        })
        .collect();
    Value::Object(stored).to_string()
}

/// An instant as stored: milliseconds, at most `i64::MAX` (a later instant
/// would read back as a negative, long past, one).
pub(super) fn stored(t: Timestamp) -> i64 {
    t.0.min(i64::MAX as u64) as i64
}

/// A record's columns as a replace writes them (`$4` to `$23`).
pub(super) struct RecordColumns<'a> {
    record: &'a Record,
    fingerprint: &'a str,
    created_at: i64,
    state: StateColumns<'a>,
    steps: String,
    audit: String,
    step: Option<i64>,
    ttl: Option<i64>,
    reason: Option<&'a str>,
}

impl<'a> RecordColumns<'a> {
    pub(super) fn of(record: &'a Record) -> Self {
        RecordColumns {
            record,
            fingerprint: record.fingerprint.as_str(),
            created_at: stored(record.created_at),
            state: StateColumns::of(&record.state),
            steps: encode_steps(&record.steps),
            audit: serde_json::to_string(&record.audit).expect("an audit serializes"),
            step: record.info.step.map(|s| s as i64),
            ttl: record.info.ttl.map(millis),
            reason: record.info.reason.as_ref().map(Reason::as_str),
        }
    }

    /// Append the parameters `$4` to `$23`, in the statement's order.
    pub(super) fn push<'p>(&'p self, params: &mut Vec<&'p (dyn ToSql + Sync)>) {
        let (r, c, info) = (self.record, &self.state, &self.record.info);
        params.extend([
            &r.tool as &(dyn ToSql + Sync),
            &self.fingerprint,
            &self.created_at,
            &c.state,
            &c.lease_until,
            &c.outcome,
            &c.completed_at,
            &c.expires_at,
            &self.steps,
            &c.requested_at,
            &c.message,
            &info.namespace,
            &info.call_id,
            &info.run_id,
            &self.step,
            &info.args,
            &r.worker,
            &self.audit,
            &self.ttl,
            &self.reason,
        ]);
    }
}

/// The columns a record's state is stored in (the rest are `NULL`).
#[derive(Default)]
struct StateColumns<'a> {
    state: i16,
    lease_until: Option<i64>,
    outcome: Option<String>,
    completed_at: Option<i64>,
    expires_at: Option<i64>,
    requested_at: Option<i64>,
    message: Option<&'a str>,
}

impl<'a> StateColumns<'a> {
    fn of(state: &'a RecordState) -> Self {
        match state {
            RecordState::InFlight { lease_until, .. } => StateColumns {
                state: IN_FLIGHT,
                lease_until: Some(stored(*lease_until)),
                ..Default::default()
            },
            RecordState::AwaitingApproval {
                requested_at,
                expires_at,
                message,
                ..
            } => StateColumns {
                state: AWAITING_APPROVAL,
                expires_at: Some(stored(*expires_at)),
                requested_at: Some(stored(*requested_at)),
                message: Some(message),
                ..Default::default()
            },
            RecordState::Completed {
                outcome,
                completed_at,
                expires_at,
                ..
            } => StateColumns {
                state: COMPLETED,
                outcome: Some(serde_json::to_string(outcome).expect("an outcome serializes")),
                completed_at: Some(stored(*completed_at)),
                expires_at: Some(stored(*expires_at)),
                ..Default::default()
            },
        }
    }
}

/// How the replace statements code an [`ExpectedState`] (`$3`).
pub(super) fn expected_state(state: ExpectedState) -> i16 {
    match state {
        ExpectedState::InFlight => 0,
        ExpectedState::LeaseExpired => 1,
        ExpectedState::AwaitingApproval => 2,
        ExpectedState::Completed => 3,
    }
}

/// A lease or TTL in milliseconds, cut so that `{now} + span` cannot
/// overflow a `bigint`.
pub(super) fn millis(d: Duration) -> i64 {
    idem_runtime::store::backend::span_millis(d) as i64
}

/// An event as stored: JSON without its seq (the column holds it).
pub(super) fn audit_text(event: &AuditEvent) -> String {
    let stored = AuditEvent {
        seq: None,
        ..event.clone()
    };
    serde_json::to_string(&stored).expect("an audit event serializes")
}
