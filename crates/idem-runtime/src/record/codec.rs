//! A record as bytes: [`Record::to_bytes`] and [`Record::from_bytes`], and
//! the flat form records are read in.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{AuditEntry, CallInfo, Fence, Outcome, OutputJson, Record, RecordState, StoredFailure};
use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};

impl Record {
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

// The flat form records are read in (see `Record`'s `Deserialize`): the
// same JSON, every state's fields optional, checked against the state's
// tag once read.

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::FailureCode;

    fn record(state: RecordState) -> Record {
        Record {
            key: IdempotencyKey::parse(&"ab".repeat(32)).unwrap(),
            tool: "send_email".into(),
            fingerprint: Fingerprint::new("cd".repeat(32)),
            created_at: Timestamp(5),
            state,
            steps: BTreeMap::from([(crate::record::ATTEMPT_STEP.to_owned(), Value::from(1))]),
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
