//! Records and audit events to and from Redis values: a record's hash
//! fields, a stream entry's fields, and the words of a script's reply.

use std::collections::BTreeMap;

use redis::Value as RedisValue;

use crate::RedisStore;
use idem_runtime::audit::AuditEvent;
use idem_runtime::clock::Timestamp;
use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::record::{CallInfo, CorruptRecord, Fence, Outcome, Record, RecordState};
use idem_runtime::store::StoreError;

pub(super) fn text(v: &RedisValue) -> Option<String> {
    match v {
        RedisValue::BulkString(b) => String::from_utf8(b.clone()).ok(),
        RedisValue::SimpleString(s) => Some(s.clone()),
        RedisValue::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

pub(super) fn number(v: &RedisValue) -> Option<u64> {
    text(v)?.parse().ok()
}

/// Decode a record from its hash fields (a flat `HGETALL` list). A missing
/// or malformed field is a [`CorruptRecord`].
pub(super) fn decode(key: &IdempotencyKey, flat: &[RedisValue]) -> Result<Record, CorruptRecord> {
    let corrupt = |detail: String| CorruptRecord {
        key: key.as_str().to_owned(),
        detail,
    };
    let mut fields = BTreeMap::new();
    for pair in flat.chunks(2) {
        match pair {
            [k, v] => {
                let k = text(k).ok_or_else(|| corrupt("a field name is not text".into()))?;
                let v = text(v).ok_or_else(|| corrupt(format!("field {k} is not text")))?;
                fields.insert(k, v);
            }
            _ => return Err(corrupt("odd number of hash fields".into())),
        }
    }
    let field = |name: &str| {
        fields
            .get(name)
            .cloned()
            .ok_or_else(|| corrupt(format!("field {name} is missing")))
    };
    let time = |name: &str| -> Result<Timestamp, CorruptRecord> {
        field(name)?
            .parse()
            .map(Timestamp)
            .map_err(|e| corrupt(format!("field {name}: {e}")))
    };
    let fence = Fence(
        field("fence")?
            .parse()
            .map_err(|e| corrupt(format!("field fence: {e}")))?,
    );
    let state = match field("state")?.as_str() {
        "f" => RecordState::InFlight {
            fence,
            lease_until: time("lease")?,
        },
        "a" => RecordState::AwaitingApproval {
            fence,
            requested_at: time("req")?,
            expires_at: time("exp")?,
            message: field("msg")?,
        },
        "c" => RecordState::Completed {
            fence,
            outcome: serde_json::from_str::<Outcome>(&field("outcome")?)
                .map_err(|e| corrupt(format!("field outcome: {e}")))?,
            completed_at: time("done")?,
            expires_at: time("exp")?,
        },
        other => return Err(corrupt(format!("unknown state {other:?}"))),
    };
    let mut steps = BTreeMap::new();
    for (name, value) in &fields {
        if let Some(step) = name.strip_prefix("s:") {
            let value =
                serde_json::from_str(value).map_err(|e| corrupt(format!("step {step}: {e}")))?;
            steps.insert(step.to_owned(), value);
        }
    }
    // Fields that came with schema version 2: absent from older records.
    let info = match fields.get("info") {
        Some(text) => {
            serde_json::from_str(text).map_err(|e| corrupt(format!("field info: {e}")))?
        }
        None => CallInfo::default(),
    };
    let audit = match fields.get("audit") {
        Some(text) => {
            serde_json::from_str(text).map_err(|e| corrupt(format!("field audit: {e}")))?
        }
        None => Vec::new(),
    };
    Ok(Record {
        key: key.clone(),
        tool: field("tool")?,
        fingerprint: Fingerprint::new(field("fp")?),
        created_at: time("created")?,
        state,
        steps,
        info,
        worker: fields.get("worker").cloned(),
        audit,
    })
}

/// `value` as JSON text.
pub(super) fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("a record's parts serialize")
}

/// The hash fields of `record` as [`decode`] reads them, but its fence
/// (which the replace script allocates).
pub(super) fn encode(record: &Record) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = vec![
        ("tool".into(), record.tool.clone()),
        ("fp".into(), record.fingerprint.as_str().to_owned()),
        ("created".into(), record.created_at.0.to_string()),
    ];
    let mut field = |name: &str, value: String| fields.push((name.to_owned(), value));
    match &record.state {
        RecordState::InFlight { lease_until, .. } => {
            field("state", "f".into());
            field("lease", lease_until.0.to_string());
        }
        RecordState::AwaitingApproval {
            requested_at,
            expires_at,
            message,
            ..
        } => {
            field("state", "a".into());
            field("req", requested_at.0.to_string());
            field("exp", expires_at.0.to_string());
            field("msg", message.clone());
        }
        RecordState::Completed {
            outcome,
            completed_at,
            expires_at,
            ..
        } => {
            field("state", "c".into());
            field("outcome", json(outcome));
            field("done", completed_at.0.to_string());
            field("exp", expires_at.0.to_string());
        }
    }
    if !record.info.is_empty() {
        field("info", json(&record.info));
    }
    if let Some(worker) = &record.worker {
        field("worker", worker.clone());
    }
    if !record.audit.is_empty() {
        field("audit", json(&record.audit));
    }
    for (step, value) in &record.steps {
        field(&format!("s:{step}"), json(value));
    }
    fields
}

/// An event as stored: JSON without its seq (the entry's field holds it).
pub(super) fn audit_text(event: &AuditEvent) -> String {
    let stored = AuditEvent {
        seq: None,
        ..event.clone()
    };
    json(&stored)
}

impl RedisStore {
    /// The entries of an `XRANGE` reply.
    pub(super) fn stream_entries(&self, reply: RedisValue) -> Result<Vec<AuditEntry>, StoreError> {
        let RedisValue::Array(entries) = reply else {
            return Err(self.protocol("XRANGE"));
        };
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            let RedisValue::Array(parts) = entry else {
                return Err(self.protocol("XRANGE entry"));
            };
            let id = parts
                .first()
                .and_then(text)
                .as_deref()
                .and_then(parse_stream_id)
                .ok_or_else(|| self.protocol("XRANGE entry id"))?;
            let fields: Vec<RedisValue> = match parts.into_iter().nth(1) {
                Some(RedisValue::Array(fields)) => fields,
                Some(RedisValue::Map(pairs)) => {
                    pairs.into_iter().flat_map(|(k, v)| [k, v]).collect()
                }
                _ => return Err(self.protocol("XRANGE entry fields")),
            };
            let mut entry = AuditEntry {
                id,
                seq: String::new(),
                key: String::new(),
                event: String::new(),
            };
            for pair in fields.chunks(2) {
                match (
                    pair.first().and_then(text).as_deref(),
                    pair.get(1).and_then(text),
                ) {
                    (Some("seq"), Some(v)) => entry.seq = v,
                    (Some("key"), Some(v)) => entry.key = v,
                    (Some("event"), Some(v)) => entry.event = v,
                    _ => {}
                }
            }
            out.push(entry);
        }
        Ok(out)
    }
}

/// A stream entry id: milliseconds and sequence.
pub(super) type StreamId = (u64, u64);

pub(super) fn parse_stream_id(id: &str) -> Option<StreamId> {
    let (ms, n) = id.split_once('-')?;
    Some((ms.parse().ok()?, n.parse().ok()?))
}

/// One entry of a slot's audit stream, its fields as stored.
pub(super) struct AuditEntry {
    pub(super) id: StreamId,
    pub(super) seq: String,
    pub(super) key: String,
    pub(super) event: String,
}

impl AuditEntry {
    /// The event, its seq from the entry's field.
    pub(super) fn decode(&self) -> Result<AuditEvent, CorruptRecord> {
        let corrupt = |detail: String| CorruptRecord {
            key: format!("audit entry {}-{}", self.id.0, self.id.1),
            detail,
        };
        let seq: u64 = self
            .seq
            .parse()
            .map_err(|e| corrupt(format!("field seq: {e}")))?;
        let event: AuditEvent =
            serde_json::from_str(&self.event).map_err(|e| corrupt(format!("field event: {e}")))?;
        Ok(AuditEvent {
            seq: Some(seq),
            ..event
        })
    }
}
