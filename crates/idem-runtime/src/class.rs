//! The four tool classes and the rules that follow from them.
//!
//! A tool's class is part of its *type*: every tool names one of the marker
//! types [`Read`], [`IdempotentWrite`], [`NonIdempotentWrite`] or
//! [`Irreversible`] as its class. The rules of the contract are traits on
//! those markers, so code can bound on them and misuse fails to compile:
//!
#![doc = include_str!("doc/classes.md")]
//!
//! In types: every write class is [`Keyed`]; [`Read`] and
//! [`IdempotentWrite`] are [`RetrySafe`]; [`Irreversible`] is
//! [`NeedsApproval`], the others [`NoApprovalNeeded`].
//!
//! At run time the same rules are read from [`ClassKind`], the value view of
//! a class, so dispatch by name (from model output) obeys them too.

use std::fmt;
use std::str::FromStr;

mod sealed {
    pub trait Sealed {}
}

/// A tool class marker. Sealed: the four classes are the whole contract.
pub trait Class: sealed::Sealed + Send + Sync + 'static {
    /// The value view of this class.
    const KIND: ClassKind;
}

/// `read`: no side effect. Retried freely, never keyed, never stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Read;

/// `idempotent_write`: repeating it with the same key is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IdempotentWrite;

/// `non_idempotent_write`: repeating it repeats the effect. Never retried;
/// an unknown outcome is refused rather than re-run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NonIdempotentWrite;

/// `irreversible`: cannot be undone. Never retried, and an approval is
/// required before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Irreversible;

macro_rules! class_markers {
    ($($ty:ident => $kind:ident),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        impl Class for $ty {
            const KIND: ClassKind = ClassKind::$kind;
        }
    )*};
}
class_markers! {
    Read => Read,
    IdempotentWrite => IdempotentWrite,
    NonIdempotentWrite => NonIdempotentWrite,
    Irreversible => Irreversible,
}

/// Classes whose calls may be retried automatically: `read` and
/// `idempotent_write`.
#[diagnostic::on_unimplemented(
    message = "tools of class `{Self}` are never retried: repeating the call repeats its effect",
    label = "retries asked for a tool of class `{Self}`",
    note = "only `read` and `idempotent_write` tools may be retried; a `non_idempotent_write` or `irreversible` tool runs at most once per key",
    note = "remove the `.retry(…)`, or make the tool idempotent (pass `ctx.key()` downstream as its idempotency key) and declare `class = \"idempotent_write\"`"
)]
pub trait RetrySafe: Class {}
impl RetrySafe for Read {}
impl RetrySafe for IdempotentWrite {}

/// Classes whose calls carry an idempotency key and are recorded in the
/// store: every class but `read`.
#[diagnostic::on_unimplemented(
    message = "tools of class `{Self}` have no idempotency key: reads are free and never stored",
    label = "needs a keyed tool, found a tool of class `{Self}`",
    note = "idempotency keys, TTLs and reconcile hooks belong to `idempotent_write`, `non_idempotent_write` and `irreversible` tools"
)]
pub trait Keyed: Class {}
impl Keyed for IdempotentWrite {}
impl Keyed for NonIdempotentWrite {}
impl Keyed for Irreversible {}

/// Classes that run without an approval: every class but `irreversible`.
#[diagnostic::on_unimplemented(
    message = "tools of class `{Self}` need an approval before they run",
    label = "an `irreversible` tool called without an approval",
    note = "call it as `executor.call_approved(tool, args, Approval::granted_by(\"…\"))`, or dispatch it by name through an executor that has an approval policy (`Executor::builder(…).approvals(…)`)"
)]
pub trait NoApprovalNeeded: Class {}
impl NoApprovalNeeded for Read {}
impl NoApprovalNeeded for IdempotentWrite {}
impl NoApprovalNeeded for NonIdempotentWrite {}

/// Classes that need an approval before they run: `irreversible`.
#[diagnostic::on_unimplemented(
    message = "tools of class `{Self}` need no approval: only `irreversible` tools take one",
    label = "`call_approved` used for a tool of class `{Self}`",
    note = "call it with `executor.call(tool, args)`"
)]
pub trait NeedsApproval: Keyed {}
impl NeedsApproval for Irreversible {}

/// The value view of a class, for run-time decisions (dispatch by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassKind {
    /// See [`Read`].
    Read,
    /// See [`IdempotentWrite`].
    IdempotentWrite,
    /// See [`NonIdempotentWrite`].
    NonIdempotentWrite,
    /// See [`Irreversible`].
    Irreversible,
}

impl ClassKind {
    /// All classes, in order of increasing danger.
    pub const ALL: [ClassKind; 4] = [
        ClassKind::Read,
        ClassKind::IdempotentWrite,
        ClassKind::NonIdempotentWrite,
        ClassKind::Irreversible,
    ];

    /// The spelling used in `#[tool(class = "…")]` and in tool definitions.
    pub const fn as_str(self) -> &'static str {
        match self {
            ClassKind::Read => "read",
            ClassKind::IdempotentWrite => "idempotent_write",
            ClassKind::NonIdempotentWrite => "non_idempotent_write",
            ClassKind::Irreversible => "irreversible",
        }
    }

    /// Whether calls carry an idempotency key and are recorded in the store.
    pub const fn is_keyed(self) -> bool {
        !matches!(self, ClassKind::Read)
    }

    /// Whether a call may be retried automatically after a transient or
    /// ambiguous error.
    pub const fn is_retry_safe(self) -> bool {
        matches!(self, ClassKind::Read | ClassKind::IdempotentWrite)
    }

    /// Whether a call whose lease expired without an outcome may be taken
    /// over and run again with the same key.
    pub const fn may_rerun_unknown_outcome(self) -> bool {
        self.is_retry_safe()
    }

    /// Whether a call's claim (and its started mark) must reach durable
    /// storage before the tool runs. Not for an `idempotent_write`: a claim
    /// lost with a crash or a power cut only means the call runs again with
    /// the same key, as a takeover of that class would. Every class's
    /// completion is durable before the caller is answered.
    pub const fn needs_durable_claim(self) -> bool {
        self.is_keyed() && !self.may_rerun_unknown_outcome()
    }

    /// Whether an approval is needed before the tool runs.
    pub const fn needs_approval(self) -> bool {
        matches!(self, ClassKind::Irreversible)
    }

    /// The MCP tool annotations this class implies. What a tool advertises
    /// and how idem executes it are derived from the same value, so they
    /// cannot disagree.
    pub const fn annotations(self) -> McpAnnotations {
        McpAnnotations {
            read_only_hint: matches!(self, ClassKind::Read),
            destructive_hint: matches!(self, ClassKind::Irreversible),
            idempotent_hint: matches!(self, ClassKind::Read | ClassKind::IdempotentWrite),
            open_world_hint: true,
        }
    }
}

impl fmt::Display for ClassKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown class name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool class `{given}`: expected one of `read`, `idempotent_write`, `non_idempotent_write`, `irreversible`")]
pub struct UnknownClass {
    /// What was given.
    pub given: String,
}

impl FromStr for ClassKind {
    type Err = UnknownClass;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ClassKind::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownClass {
                given: s.to_owned(),
            })
    }
}

/// MCP tool annotations (`ToolAnnotations` in the MCP schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpAnnotations {
    /// The tool does not modify its environment.
    pub read_only_hint: bool,
    /// The tool may perform destructive (irreversible) updates.
    pub destructive_hint: bool,
    /// Calling the tool again with the same arguments has no further effect.
    /// For `idempotent_write` this holds *under the same idempotency key*,
    /// which idem guarantees.
    pub idempotent_hint: bool,
    /// The tool interacts with an open world of external entities.
    pub open_world_hint: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_round_trip() {
        for c in ClassKind::ALL {
            assert_eq!(c.as_str().parse::<ClassKind>().unwrap(), c);
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
        assert!("write".parse::<ClassKind>().is_err());
    }

    #[test]
    fn rules_follow_the_table() {
        use ClassKind::*;
        assert_eq!(
            ClassKind::ALL.map(ClassKind::is_retry_safe),
            [true, true, false, false]
        );
        assert_eq!(
            ClassKind::ALL.map(ClassKind::is_keyed),
            [false, true, true, true]
        );
        assert_eq!(
            ClassKind::ALL.map(ClassKind::needs_durable_claim),
            [false, false, true, true]
        );
        assert_eq!(
            ClassKind::ALL.map(ClassKind::needs_approval),
            [false, false, false, true]
        );
        assert!(Read.annotations().read_only_hint);
        assert!(!IdempotentWrite.annotations().read_only_hint);
        assert!(IdempotentWrite.annotations().idempotent_hint);
        assert!(!NonIdempotentWrite.annotations().idempotent_hint);
        assert!(Irreversible.annotations().destructive_hint);
        assert!(!NonIdempotentWrite.annotations().destructive_hint);
    }
}
