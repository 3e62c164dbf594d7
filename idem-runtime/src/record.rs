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
    /// tell. Never re-run; an operator must look.
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

/// Everything a store keeps under a key.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    /// The key.
    pub key: IdempotencyKey,
    /// The tool that claimed it.
    pub tool: String,
    /// Fingerprint of the first call's canonical arguments.
    pub fingerprint: Fingerprint,
    /// When the key was first claimed.
    pub created_at: Timestamp,
    /// In flight or completed.
    #[serde(flatten)]
    pub state: RecordState,
    /// Progress of a multi-step tool: step name → stored step result.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub steps: BTreeMap<String, Value>,
}

impl Record {
    /// The outcome, if completed.
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.state {
            RecordState::Completed { outcome, .. } => Some(outcome),
            RecordState::InFlight { .. } => None,
        }
    }

    /// The current fence.
    pub fn fence(&self) -> Fence {
        match &self.state {
            RecordState::InFlight { fence, .. } | RecordState::Completed { fence, .. } => *fence,
        }
    }

    /// Whether the record is in flight with a lease that ran out at `now`.
    pub fn lease_expired(&self, now: Timestamp) -> bool {
        matches!(self.state, RecordState::InFlight { lease_until, .. } if lease_until <= now)
    }

    /// Whether the record is completed and past its expiry at `now`.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        matches!(self.state, RecordState::Completed { expires_at, .. } if expires_at <= now)
    }

    /// Encode for a store that keeps records as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record always serializes")
    }

    /// Decode bytes written by [`Record::to_bytes`]; garbage is a
    /// [`CorruptRecord`] error, never a silently empty record.
    pub fn from_bytes(key: &str, bytes: &[u8]) -> Result<Record, CorruptRecord> {
        let record: Record = serde_json::from_slice(bytes).map_err(|e| CorruptRecord {
            key: key.to_owned(),
            detail: e.to_string(),
        })?;
        if record.key.as_str() != key {
            return Err(CorruptRecord {
                key: key.to_owned(),
                detail: format!("record names key {} instead", record.key),
            });
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
