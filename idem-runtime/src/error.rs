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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    details: Option<Value>,
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
        self.details = Some(details);
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
        self.details.as_ref()
    }
}

mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(d.as_millis() as u64),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}
