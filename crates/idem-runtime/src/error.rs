//! The error a tool returns, and how the executor reads it.

use std::fmt;
use std::time::Duration;

use serde_json::Value;

/// What a failure says about whether the effect happened — the one fact the
/// retry policy needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Known *not* applied (connection refused, 429, 503 before the request
    /// was accepted). Safe to retry for any retry-safe class, and the key is
    /// released so a later call may run.
    Transient,
    /// *May* have been applied (a timeout after the request was sent, a
    /// dropped connection mid-response). Retried only for `read` and
    /// `idempotent_write`, with the same key.
    Ambiguous,
    /// Will fail again the same way (validation, 4xx, business rule). Never
    /// retried; recorded so duplicates get the same failure.
    Permanent,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::Transient => "transient",
            ErrorKind::Ambiguous => "ambiguous",
            ErrorKind::Permanent => "permanent",
        })
    }
}

/// The error type of every tool.
///
/// ```
/// use idem_runtime::{ErrorKind, ToolError};
/// use std::time::Duration;
///
/// let e = ToolError::transient("mail provider answered 429")
///     .with_retry_after(Duration::from_secs(2));
/// assert_eq!(e.kind(), ErrorKind::Transient);
/// assert_eq!(e.retry_after(), Some(Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[error("{kind} error: {message}")]
pub struct ToolError {
    kind: ErrorKind,
    message: String,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "millis")]
    retry_after: Option<Duration>,
    /// Boxed: a `Value` is large when serde_json keeps object order (a
    /// dependency such as rig-core may turn that on), and every `Result`
    /// carrying an [`IdemError`] would pay for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    details: Option<Box<Value>>,
}

impl ToolError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl fmt::Display) -> Self {
        ToolError {
            kind,
            message: message.to_string(),
            retry_after: None,
            details: None,
        }
    }

    /// Known not applied; see [`ErrorKind::Transient`].
    pub fn transient(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Transient, message)
    }

    /// May have been applied; see [`ErrorKind::Ambiguous`].
    pub fn ambiguous(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Ambiguous, message)
    }

    /// Will not succeed on retry; see [`ErrorKind::Permanent`].
    pub fn permanent(message: impl fmt::Display) -> Self {
        Self::new(ErrorKind::Permanent, message)
    }

    /// The server asked to wait this long before retrying.
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Attach structured details (returned to the model with the error).
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(Box::new(details));
        self
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The requested pause before a retry, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Structured details, if any.
    pub fn details(&self) -> Option<&Value> {
        self.details.as_deref()
    }
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(d.as_millis() as u64),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

/// Why a call through idem did not produce the tool's output.
///
/// Every variant says whether the tool ran; those that refuse say so in
/// their message, so an operator reading a log knows nothing happened.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum IdemError {
    /// The tool ran (possibly several attempts, or earlier under the same
    /// key) and failed.
    #[error("tool `{tool}` failed: {error}{}", if *.deduplicated { " (recorded result of an earlier call)" } else { "" })]
    Tool {
        /// The tool.
        tool: String,
        /// Its error.
        error: ToolError,
        /// The failure was recorded by an earlier call with this key.
        deduplicated: bool,
    },
    /// No key could be derived: nothing ran.
    #[error("no idempotency key for tool `{tool}`: {source}; nothing ran")]
    Key {
        /// The tool.
        tool: String,
        /// Why.
        source: crate::key::KeyError,
    },
    /// The store failed before the tool started: nothing ran (idem fails
    /// closed). A store failure after the tool started is
    /// [`IdemError::OutcomeNotRecorded`].
    #[error("tool `{tool}` was not run: {source}; nothing ran")]
    Store {
        /// The tool.
        tool: String,
        /// The store's error.
        source: crate::store::StoreError,
    },
    /// This caller lost its key while it worked: a renewal of its lease
    /// found that another caller had taken the key over, or could not reach
    /// the store before the lease ran out. Whatever it did is not recorded
    /// as the call's outcome; the new owner's outcome stands.
    #[error("tool `{tool}`: the call with key {key} lost its lease (taken over by another owner, or not renewed before it ran out); its result was not recorded, and the outcome is the new owner's")]
    Superseded {
        /// The tool.
        tool: String,
        /// The key.
        key: crate::key::IdempotencyKey,
        /// The store's rejection (a stale fence) or the renewal failure,
        /// when there was one.
        source: Option<crate::store::StoreError>,
    },
    /// The key is recorded for other arguments: nothing ran.
    #[error("key {key} was already used by tool `{stored_tool}` with other arguments (stored fingerprint {stored_fingerprint}); nothing ran. A retry must send the same arguments; a new intent needs a new call id")]
    KeyReused {
        /// The key.
        key: crate::key::IdempotencyKey,
        /// The tool that recorded it.
        stored_tool: String,
        /// The fingerprint stored with it.
        stored_fingerprint: String,
    },
    /// Another call with this key is in flight and this one did not wait
    /// (or waited its limit): nothing ran.
    #[error("a call of `{tool}` with key {key} is already in flight; nothing ran. Retry later to receive its result")]
    InFlight {
        /// The tool.
        tool: String,
        /// The key.
        key: crate::key::IdempotencyKey,
    },
    /// An earlier call's owner vanished mid-call and whether its effect
    /// happened is unknown: refused, never re-run.
    #[error("the outcome of `{tool}` with key {key} is unknown ({reason}); idem will not run it again: an operator must check whether the effect happened")]
    OutcomeUnknown {
        /// The tool.
        tool: String,
        /// The key.
        key: crate::key::IdempotencyKey,
        /// What is known.
        reason: String,
    },
    /// The tool ran (or may have: it started), but the store failed
    /// before its outcome was recorded, and kept failing for as long as
    /// the call held its key. The effect may have happened. The record
    /// stays in flight; once its lease runs out, a call with the key that
    /// may not run twice takes it over and reconciles it or records the
    /// outcome as unknown, and an operator can settle it
    /// ([`Operator::resolve`](crate::operator::Operator::resolve)).
    #[error("{}", not_recorded(tool, key, source, *repeatable))]
    OutcomeNotRecorded {
        /// The tool.
        tool: String,
        /// The key the call is recorded under.
        key: crate::key::IdempotencyKey,
        /// The store's error.
        source: crate::store::StoreError,
        /// The tool's class may run again under the same key (a `read`
        /// or an `idempotent_write`): calling again repeats it safely.
        repeatable: bool,
    },
    /// An irreversible call was denied: nothing ran.
    #[error("approval for irreversible tool `{tool}` was denied: {reason}; nothing ran")]
    ApprovalDenied {
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
        /// The denial was recorded by an earlier call with this key.
        deduplicated: bool,
    },
    /// An irreversible call waits for a person's approval: nothing ran.
    /// Calling again with the same key after an approval runs it once
    /// under that approval; after a denial, every call gets the denial.
    #[error("irreversible tool `{tool}` awaits approval ({message}); nothing ran yet. Key {key}: once a person approves it (`idem approve {key} --by NAME`, their name for NAME), call again with the same key to run it once")]
    ApprovalPending {
        /// The tool.
        tool: String,
        /// The key the request is recorded under.
        key: crate::key::IdempotencyKey,
        /// What the approval policy said.
        message: String,
    },
    /// An irreversible call reached an executor with no approval policy.
    #[error("irreversible tool `{tool}` needs an approval and this executor has no approval policy; nothing ran")]
    ApprovalRequired {
        /// The tool.
        tool: String,
    },
    /// Replay mode found no record for a write: nothing ran.
    #[error("replay: tool `{tool}` with key {key} has no recorded result; nothing ran (replay never performs side effects)")]
    NotRecorded {
        /// The tool.
        tool: String,
        /// The key.
        key: crate::key::IdempotencyKey,
    },
    /// A natural key's record awaits a decision, or holds an approval, for
    /// *other* arguments than this call's: nothing ran, and this call's
    /// arguments were neither queued nor approved. Only the arguments a
    /// person approved ever run under an approval.
    #[error("{}", awaits_other_arguments(tool, key, *approved, recorded_args.as_deref()))]
    KeyAwaitsOtherArguments {
        /// The tool.
        tool: String,
        /// The key.
        key: crate::key::IdempotencyKey,
        /// Whether the other request is approved (else it awaits a
        /// decision).
        approved: bool,
        /// The other request's canonical arguments, when the tool stores
        /// them.
        recorded_args: Option<String>,
    },
    /// A recorded output no longer deserializes into the tool's output type
    /// (the type changed since it was recorded): nothing ran.
    #[error("the recorded output of `{tool}` does not match its output type ({detail}); nothing ran. Bump the tool's key_version if its output changed")]
    RecordedOutputMismatch {
        /// The tool.
        tool: String,
        /// The deserialization error.
        detail: String,
    },
    /// The arguments are unusable: nothing ran.
    #[error("invalid arguments for tool `{tool}`: {detail}; nothing ran")]
    InvalidArguments {
        /// The tool.
        tool: String,
        /// What is wrong, with the path to the offending field.
        detail: String,
    },
    /// The output could not be serialized for recording. The effect
    /// happened; the record is left in flight for the lease to decide.
    #[error("the output of `{tool}` could not be serialized: {detail}")]
    OutputNotSerializable {
        /// The tool.
        tool: String,
        /// Why.
        detail: String,
    },
    /// A model asked for a tool the registry does not have: nothing ran.
    #[error("unknown tool `{name}`{}; nothing ran", match .suggestion { Some(s) => format!(" (did you mean `{s}`?)"), None => String::new() })]
    UnknownTool {
        /// The name asked for.
        name: String,
        /// The closest registered name.
        suggestion: Option<String>,
    },
    /// The arguments text is larger than the dispatcher accepts.
    #[error("arguments of `{tool}` are {len} bytes; the limit is {max} bytes; nothing ran")]
    ArgumentsTooLarge {
        /// The tool.
        tool: String,
        /// Their size.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// The text of [`IdemError::KeyAwaitsOtherArguments`].
fn awaits_other_arguments(
    tool: &str,
    key: &crate::key::IdempotencyKey,
    approved: bool,
    recorded: Option<&str>,
) -> String {
    let theirs = match recorded {
        Some(args) => format!(" ({args})"),
        None => String::new(),
    };
    if approved {
        format!("an earlier call of `{tool}` with key {key} was approved for other arguments{theirs} and has not run yet; this call's arguments differ, so nothing ran and nothing was approved for them. To run the approved request once, call again with exactly the approved arguments; for these arguments, ask a person to deny the approved request first")
    } else {
        format!("an earlier call of `{tool}` with key {key}, with other arguments{theirs}, awaits a person's approval; this call's arguments differ, so nothing ran and they were not queued for approval. Wait for that decision, or call again with the same arguments as the pending request")
    }
}

/// The text of [`IdemError::OutcomeNotRecorded`].
fn not_recorded(
    tool: &str,
    key: &crate::key::IdempotencyKey,
    source: &crate::store::StoreError,
    repeatable: bool,
) -> String {
    let next = if repeatable {
        "calling again with the same key repeats it safely once the store answers"
    } else {
        "idem will not run it again: an operator must check whether the effect happened and settle the key"
    };
    format!("tool `{tool}` started, but its outcome could not be recorded under key {key} ({source}): it may have taken effect; {next}")
}

impl IdemError {
    /// A short machine-readable code for the variant, used in tool results
    /// sent back to a model and in logs.
    pub fn code(&self) -> ErrorCode {
        match self {
            IdemError::Tool { .. } => ErrorCode::ToolError,
            IdemError::Key { .. } => ErrorCode::InvalidKey,
            IdemError::Store { .. } => ErrorCode::StoreUnavailable,
            IdemError::Superseded { .. } => ErrorCode::Superseded,
            IdemError::KeyReused { .. } => ErrorCode::KeyReused,
            IdemError::InFlight { .. } => ErrorCode::InFlight,
            IdemError::OutcomeUnknown { .. } => ErrorCode::OutcomeUnknown,
            IdemError::OutcomeNotRecorded { .. } => ErrorCode::OutcomeNotRecorded,
            IdemError::ApprovalDenied { .. } => ErrorCode::ApprovalDenied,
            IdemError::ApprovalPending { .. } => ErrorCode::ApprovalPending,
            IdemError::ApprovalRequired { .. } => ErrorCode::ApprovalRequired,
            IdemError::NotRecorded { .. } => ErrorCode::NotRecorded,
            IdemError::KeyAwaitsOtherArguments { .. } => ErrorCode::KeyAwaitsOtherArguments,
            IdemError::RecordedOutputMismatch { .. } => ErrorCode::RecordedOutputMismatch,
            IdemError::InvalidArguments { .. } => ErrorCode::InvalidArguments,
            IdemError::OutputNotSerializable { .. } => ErrorCode::OutputNotSerializable,
            IdemError::UnknownTool { .. } => ErrorCode::UnknownTool,
            IdemError::ArgumentsTooLarge { .. } => ErrorCode::ArgumentsTooLarge,
        }
    }

    /// The idempotency key the error is about, when it names one (a call
    /// in flight, of unknown outcome, awaiting approval, …): where an
    /// operator finds its record.
    pub fn key(&self) -> Option<&crate::key::IdempotencyKey> {
        match self {
            IdemError::Superseded { key, .. }
            | IdemError::KeyReused { key, .. }
            | IdemError::InFlight { key, .. }
            | IdemError::OutcomeUnknown { key, .. }
            | IdemError::OutcomeNotRecorded { key, .. }
            | IdemError::ApprovalPending { key, .. }
            | IdemError::NotRecorded { key, .. }
            | IdemError::KeyAwaitsOtherArguments { key, .. } => Some(key),
            _ => None,
        }
    }

    /// Whether this result came from an earlier call's record.
    pub fn is_deduplicated(&self) -> bool {
        matches!(
            self,
            IdemError::Tool {
                deduplicated: true,
                ..
            } | IdemError::ApprovalDenied {
                deduplicated: true,
                ..
            }
        )
    }
}

/// The machine-readable code of an [`IdemError`], one per variant.
///
/// Serialized (and displayed) in `snake_case`, as the `code` field of the
/// error results the dispatcher sends back to a model:
///
/// ```
/// use idem_runtime::error::ErrorCode;
///
/// assert_eq!(ErrorCode::KeyReused.as_str(), "key_reused");
/// assert_eq!(serde_json::to_value(ErrorCode::InFlight).unwrap(), "in_flight");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// [`IdemError::Tool`].
    ToolError,
    /// [`IdemError::Key`].
    InvalidKey,
    /// [`IdemError::Store`].
    StoreUnavailable,
    /// [`IdemError::Superseded`].
    Superseded,
    /// [`IdemError::KeyReused`].
    KeyReused,
    /// [`IdemError::InFlight`].
    InFlight,
    /// [`IdemError::OutcomeUnknown`].
    OutcomeUnknown,
    /// [`IdemError::OutcomeNotRecorded`].
    OutcomeNotRecorded,
    /// [`IdemError::ApprovalDenied`].
    ApprovalDenied,
    /// [`IdemError::ApprovalPending`].
    ApprovalPending,
    /// [`IdemError::ApprovalRequired`].
    ApprovalRequired,
    /// [`IdemError::NotRecorded`].
    NotRecorded,
    /// [`IdemError::KeyAwaitsOtherArguments`].
    KeyAwaitsOtherArguments,
    /// [`IdemError::RecordedOutputMismatch`].
    RecordedOutputMismatch,
    /// [`IdemError::InvalidArguments`].
    InvalidArguments,
    /// [`IdemError::OutputNotSerializable`].
    OutputNotSerializable,
    /// [`IdemError::UnknownTool`].
    UnknownTool,
    /// [`IdemError::ArgumentsTooLarge`].
    ArgumentsTooLarge,
}

impl ErrorCode {
    /// The code as text (`"key_reused"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ToolError => "tool_error",
            ErrorCode::InvalidKey => "invalid_key",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::Superseded => "superseded",
            ErrorCode::KeyReused => "key_reused",
            ErrorCode::InFlight => "in_flight",
            ErrorCode::OutcomeUnknown => "outcome_unknown",
            ErrorCode::OutcomeNotRecorded => "outcome_not_recorded",
            ErrorCode::ApprovalDenied => "approval_denied",
            ErrorCode::ApprovalPending => "approval_pending",
            ErrorCode::ApprovalRequired => "approval_required",
            ErrorCode::NotRecorded => "not_recorded",
            ErrorCode::KeyAwaitsOtherArguments => "key_awaits_other_arguments",
            ErrorCode::RecordedOutputMismatch => "recorded_output_mismatch",
            ErrorCode::InvalidArguments => "invalid_arguments",
            ErrorCode::OutputNotSerializable => "output_not_serializable",
            ErrorCode::UnknownTool => "unknown_tool",
            ErrorCode::ArgumentsTooLarge => "arguments_too_large",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
