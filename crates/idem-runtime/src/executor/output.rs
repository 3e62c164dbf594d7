//! What a successful call returns: [`CallOutput`] and its [`CallMeta`].

use crate::class::ClassKind;
use crate::key::IdempotencyKey;

/// What a successful call returns: the output and how it was obtained.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutput<T> {
    /// The tool's output (the recorded output for a duplicate).
    pub output: T,
    /// How it was obtained.
    pub meta: CallMeta,
}

/// How a call was carried out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct CallMeta {
    /// The tool.
    pub tool: &'static str,
    /// Its class.
    pub class: ClassKind,
    /// The idempotency key (`None` for reads).
    pub key: Option<IdempotencyKey>,
    /// The output is an earlier call's recorded result; the tool did not run.
    pub deduplicated: bool,
    /// Attempts made by this call (0 when deduplicated).
    pub attempts: u32,
}
