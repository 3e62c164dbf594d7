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
    /// Set when an approver edited the arguments of the call as it was
    /// made before approving it: the output is the edited call's, whose
    /// key is [`CallMeta::key`], and the call as made never ran.
    pub edited: Option<Box<Edit>>,
}

/// An approver's edit of a call awaiting approval, as the call's answer
/// tells it ([`CallMeta::edited`]; edit, then approve:
/// [`Operator::edit_record`](crate::operator::Operator::edit_record)).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Edit {
    /// The key of the call as it was made, denied in favour of the
    /// edited one.
    pub original: IdempotencyKey,
    /// Who edited the arguments.
    pub by: String,
    /// The arguments the edited call ran with.
    pub arguments: serde_json::Value,
}
