//! What a person does with records: list and inspect them, approve or deny
//! calls awaiting approval, settle what idem refused to guess.
//!
//! idem refuses rather than acting twice: an `irreversible` call waits for
//! an approval, a call whose outcome is unknown is never re-run. Someone
//! must then decide, and [`Operator`] is how — from a program, or through
//! the `idem` command-line program, which is a thin layer over it. Every
//! change is fenced (it applies to the record as it was read, or is refused
//! with [`OperatorError::Changed`] and changes nothing), never overrules an
//! owner whose lease is live, never overwrites a recorded outcome, and is
//! recorded on the record with who, when and why ([`AuditEntry`]).
//!
//! ```
//! use idem_runtime::operator::{Filter, Operator};
//! use idem_runtime::record::Status;
//! use idem_runtime::store::MemoryStore;
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let operator = Operator::new(std::sync::Arc::new(MemoryStore::new()));
//! let unknown = operator
//!     .list(&Filter::status(Status::Unknown), None, 50)
//!     .await
//!     .unwrap();
//! assert!(unknown.records.is_empty());
//! # });
//! ```
//!
//! Finding and reading records (list, count, find, show, the audit log) is
//! in `list.rs`; deciding calls awaiting approval in `approval.rs`;
//! settling and deleting what idem refused to guess in `resolve.rs`; the
//! [`Executor`](crate::Executor)'s shortcuts to these in `executor.rs`;
//! the JSON operators' tools show a record in ([`json`]: `idem show
//! --json` and the approval inbox's API).
//! Here: the operator itself, who acts, what refuses an action, and the
//! fenced write every change goes through.

mod approval;
mod edit;
mod executor;
pub mod json;
mod list;
mod resolve;
mod timers;

use std::sync::Arc;
use std::time::Duration;

use crate::approval::rules::RuleRefusal;
use crate::approval::transition::Replace;
use crate::audit::AuditEvent;
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::{AuditAction, AuditEntry, Record, Status, DEFAULT_TTL};
use crate::store::{Expected, Store, StoreError};

use crate::store::StoreExt;
pub use approval::Approving;
pub use edit::{edited_key, Edited};
pub use list::{Counts, Filter, Page, UnknownAges};
pub use resolve::Resolution;

/// Who does an operator action, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// Who (a user name, a bot).
    pub by: String,
    /// Why, or a note.
    pub reason: Option<String>,
}

impl Actor {
    /// This actor's `action` at `at`, as recorded.
    fn entry(&self, at: Timestamp, action: AuditAction) -> AuditEntry {
        AuditEntry {
            at,
            by: self.by.clone(),
            action,
            reason: self.reason.clone(),
        }
    }

    /// `by`, with no reason given.
    pub fn new(by: impl Into<String>) -> Self {
        Actor {
            by: by.into(),
            reason: None,
        }
    }

    /// With a reason.
    pub fn because(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// Why an operator action was refused. Nothing was changed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// No record under the key (never written, released, swept, expired).
    #[error("no record with key {key}")]
    NotFound {
        /// The key or prefix given.
        key: String,
    },
    /// A key prefix matched several records.
    #[error("key prefix {prefix} is ambiguous; it matches {}{}", candidates.join(", "), if *more { ", …" } else { "" })]
    Ambiguous {
        /// The prefix given.
        prefix: String,
        /// Some of the keys it matches.
        candidates: Vec<String>,
        /// Whether it matches more than those.
        more: bool,
    },
    /// Not a key, nor a prefix of one.
    #[error(
        "{given:?} is not a key or a key prefix (a key is 64 hexadecimal digits; give at least 4)"
    )]
    InvalidKey {
        /// What was given.
        given: String,
    },
    /// Approving or denying a record that does not await approval.
    #[error("key {key} is not awaiting approval (it is {status})")]
    NotPending {
        /// The key.
        key: IdempotencyKey,
        /// What it is.
        status: Status,
    },
    /// Approving or denying a call that is already approved.
    #[error("key {key} is already approved (by {by}); it runs on the next call with its key")]
    AlreadyApproved {
        /// The key.
        key: IdempotencyKey,
        /// Who approved it.
        by: String,
    },
    /// Adding an approval to a call that needs several, by someone whose
    /// approval it already has: the approvals must come from distinct
    /// people.
    #[error("key {key} already has an approval by {by} ({given} of {required}); the next approval must come from someone else")]
    ApprovedBefore {
        /// The key.
        key: IdempotencyKey,
        /// Who approved it before, and tried again.
        by: String,
        /// How many approvals it has.
        given: usize,
        /// How many it needs.
        required: usize,
    },
    /// Settling a call whose owner holds a live lease.
    #[error("key {key} is in flight under a live lease (until {until} ms since the epoch, worker {worker}); wait for it to finish or its lease to run out")]
    LiveLease {
        /// The key.
        key: IdempotencyKey,
        /// When the lease runs out.
        until: Timestamp,
        /// The worker holding it.
        worker: String,
    },
    /// Settling a record that has a definite outcome already.
    #[error("key {key} is already {status}; a recorded outcome is never overwritten")]
    AlreadySettled {
        /// The key.
        key: IdempotencyKey,
        /// Its status.
        status: Status,
    },
    /// Resolving a record that awaits approval (approve or deny it).
    #[error("key {key} is {status}; approve or deny it instead of resolving it")]
    AwaitsDecision {
        /// The key.
        key: IdempotencyKey,
        /// Its status.
        status: Status,
    },
    /// The record changed between reading it and changing it (another
    /// operator, a call that claimed it).
    #[error("the record with key {key} changed while this action was being made; nothing was changed — look at it again")]
    Changed {
        /// The key.
        key: IdempotencyKey,
    },
    /// The arguments an approver edited a call to were refused
    /// ([`Operator::edit_record`]); nothing was changed.
    #[error("the edited arguments for key {key} are refused: {detail}; nothing was changed")]
    EditedArguments {
        /// The key of the call being edited.
        key: IdempotencyKey,
        /// What is wrong with them.
        detail: String,
    },
    /// Editing the arguments of a call whose tool keeps its arguments out
    /// of the store (`#[tool(sensitive)]`).
    #[error("key {key} cannot be edited: tool {tool} keeps its arguments out of the store; approve or deny it instead")]
    NotEditable {
        /// The key.
        key: IdempotencyKey,
        /// The tool.
        tool: String,
    },
    /// The approval rules in force on the store do not let this person
    /// make this decision
    /// ([`Rules::in_force`](crate::approval::rules::Rules::in_force)).
    #[error("{0}")]
    Rule(Box<RuleRefusal>),
    /// The store failed; nothing was changed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

impl From<RuleRefusal> for OperatorError {
    fn from(refusal: RuleRefusal) -> Self {
        OperatorError::Rule(Box::new(refusal))
    }
}

/// Operator actions on a store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Operator {
    store: Arc<dyn Store>,
    ttl: Duration,
}

impl Operator {
    /// Act on `store`.
    ///
    /// A decision an operator makes (an approval, a denial, a resolution)
    /// is kept as long as the tool keeps its outcomes: the TTL the record
    /// was claimed with. Records written before idem 0.3 do not say it;
    /// theirs are kept for 24 h ([`Operator::ttl`] changes that).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Operator {
            store,
            ttl: DEFAULT_TTL,
        }
    }

    /// Keep decisions about records that do not say their tool's TTL
    /// (written before idem 0.3) for `ttl`.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long a decision about `record` is kept: `explicit` when given,
    /// else the tool's TTL recorded with it, else this operator's default.
    fn kept_for(&self, record: &Record, explicit: Option<Duration>) -> Duration {
        explicit.unwrap_or_else(|| record.ttl_or(self.ttl))
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Swap `old` for the record of the fenced transition `to`, with the
    /// action `entry` recorded on the new record and, in the same write, in
    /// the store's audit log.
    async fn swap(
        &self,
        old: &Record,
        to: Replace,
        entry: AuditEntry,
    ) -> Result<Record, OperatorError> {
        let Replace {
            expected,
            record: mut new,
        } = to;
        new.audit.push(entry.clone());
        let fence = self.replace(old, expected, Some(&new), &entry).await?;
        if let Some(fence) = fence {
            new = crate::store::transition::replacement(&old.key, &new, fence);
        }
        Ok(new)
    }

    /// Swap `old`, if it is as `expected`, for `new` (`None`: delete it),
    /// appending `entry` to the store's audit log in the same write: state
    /// before → after, who, when, why. A refused swap appends nothing.
    async fn replace(
        &self,
        old: &Record,
        expected: Expected,
        new: Option<&Record>,
        entry: &AuditEntry,
    ) -> Result<Option<crate::record::Fence>, OperatorError> {
        let event = AuditEvent {
            seq: None,
            at: entry.at,
            by: entry.by.clone(),
            action: entry.action,
            reason: entry.reason.clone(),
            key: old.key.clone(),
            tool: old.tool.clone(),
            namespace: old.info.namespace.clone(),
            fingerprint: old.fingerprint.clone(),
            before: Some(old.status()),
            after: new.map(Record::status),
        };
        self.store
            .replace(&old.key, expected, new, Some(&event))
            .await
            .map_err(|e| match e {
                StoreError::StaleFence { key, .. } => OperatorError::Changed { key },
                e => OperatorError::Store(e),
            })
    }
}
