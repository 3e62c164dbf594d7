//! A record's state — in flight, awaiting approval, completed with an
//! [`Outcome`] — and the [`Status`] operators filter and count by.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::clock::Timestamp;

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
///
/// Cloning is cheap: the text is shared, so a store that keeps records in
/// memory hands a duplicate the recorded output without copying it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct OutputJson(Arc<str>);

impl OutputJson {
    /// Serialize `output`.
    pub fn new<T: serde::Serialize + ?Sized>(output: &T) -> Result<Self, serde_json::Error> {
        // Written into a buffer this thread keeps, then copied once into
        // the shared text: a `String` first would be a second allocation.
        thread_local! {
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        /// A buffer that grew past this is given back after use.
        const KEEP: usize = 16 * 1024;
        SCRATCH.with(|scratch| {
            // A `Serialize` that serializes another output from inside
            // finds the buffer taken, and takes the plain way.
            let Ok(mut buf) = scratch.try_borrow_mut() else {
                return serde_json::to_string(output).map(|text| OutputJson(text.into()));
            };
            buf.clear();
            let written = serde_json::to_writer(&mut *buf, output);
            let text = written.map(|()| {
                let text = std::str::from_utf8(&buf).expect("serde_json writes UTF-8");
                OutputJson(Arc::from(text))
            });
            if buf.capacity() > KEEP {
                *buf = Vec::new();
            }
            text
        })
    }

    /// The JSON text of `value`.
    pub fn from_value(value: &Value) -> Self {
        OutputJson(value.to_string().into())
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
    /// step [`APPROVAL_STEP`](super::APPROVAL_STEP)) the next claim of the
    /// key owns it and runs the call; a denial completes the record as a
    /// failure.
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

/// Where a record stands, as an operator filters and counts records.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A call owns the key (its lease may have run out: see
    /// [`Record::lease_expired`](super::Record::lease_expired)).
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

    /// Whether a record in this status is open: anything but a success
    /// or a definite failure ([`Record::is_open`](super::Record::is_open)).
    pub const fn is_open(self) -> bool {
        !matches!(self, Status::Succeeded | Status::Failed)
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
