//! Wrap any [`Store`] to watch, delay or alter what passes through it,
//! without forwarding its methods by hand.
//!
//! A wrapper written method by method forgets the methods with default
//! bodies: forget [`Store::fast_path`] and every claim of the wrapped
//! store silently leaves the caller's-thread fast path; forget
//! [`Store::wait`] and waiters poll instead of being woken.
//! [`Interceptor`] forwards every method of the trait (a test fails when
//! the trait gains one it does not forward) and hands each operation to a
//! [`Hook`] on its way:
//!
//! * [`Hook::around`] gets every asynchronous operation as an
//!   [`Operation`] (its name, key and arguments) and the wrapped store. It
//!   runs the operation with [`Operation::run`] — or runs another, or
//!   none — and returns the [`Answer`]. Code before `run` is the "before"
//!   hook, code after it the "after" hook, with the result in hand.
//! * [`Hook::around_local`] gets the caller's-thread claim
//!   ([`FastPath::claim_local`]) the same way, synchronously.
//!
//! Both default to forwarding unchanged, so a hook implements only what
//! it watches.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//!
//! use idem_runtime::store::intercept::{Answer, Hook, Interceptor, Operation};
//! use idem_runtime::store::{MemoryStore, Store, StoreError};
//!
//! /// Counts the writes that reach the store.
//! #[derive(Debug, Default)]
//! struct CountWrites(AtomicU64);
//!
//! #[async_trait::async_trait]
//! impl Hook for CountWrites {
//!     async fn around(
//!         &self,
//!         op: Operation<'_>,
//!         store: &dyn Store,
//!     ) -> Result<Answer, StoreError> {
//!         if op.kind().writes() {
//!             self.0.fetch_add(1, Ordering::Relaxed);
//!         }
//!         op.run(store).await
//!     }
//! }
//!
//! let store = Interceptor::new(Arc::new(MemoryStore::new()), CountWrites::default());
//! assert_eq!(store.describe(), "memory");
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::{
    ClaimOutcome, ClaimRequest, Expected, FastPath, LocalClaim, ScanPage, Store, StoreError,
    WaitFor,
};
use crate::audit::{AuditEvent, AuditPage, AuditQuery};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::{Fence, Outcome, Record};

/// Which [`Store`] method an [`Operation`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OpKind {
    /// [`Store::claim`].
    Claim,
    /// [`Store::checkpoint`].
    Checkpoint,
    /// [`Store::renew`].
    Renew,
    /// [`Store::complete`].
    Complete,
    /// [`Store::release`].
    Release,
    /// [`Store::get`].
    Get,
    /// [`Store::replace`].
    Replace,
    /// [`Store::append_audit`].
    AppendAudit,
    /// [`Store::audit`].
    Audit,
    /// [`Store::scan`].
    Scan,
    /// [`Store::scan_open`].
    ScanOpen,
    /// [`Store::wait`].
    Wait,
    /// [`Store::sweep`].
    Sweep,
    /// [`Store::now`].
    Now,
    /// [`Store::close`].
    Close,
}

impl OpKind {
    /// Every kind, in the order the trait declares its methods.
    pub const ALL: [OpKind; 15] = [
        OpKind::Claim,
        OpKind::Checkpoint,
        OpKind::Renew,
        OpKind::Complete,
        OpKind::Release,
        OpKind::Get,
        OpKind::Replace,
        OpKind::AppendAudit,
        OpKind::Audit,
        OpKind::Scan,
        OpKind::ScanOpen,
        OpKind::Wait,
        OpKind::Sweep,
        OpKind::Now,
        OpKind::Close,
    ];

    /// The method's name (`"claim"`, `"append_audit"`).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Claim => "claim",
            OpKind::Checkpoint => "checkpoint",
            OpKind::Renew => "renew",
            OpKind::Complete => "complete",
            OpKind::Release => "release",
            OpKind::Get => "get",
            OpKind::Replace => "replace",
            OpKind::AppendAudit => "append_audit",
            OpKind::Audit => "audit",
            OpKind::Scan => "scan",
            OpKind::ScanOpen => "scan_open",
            OpKind::Wait => "wait",
            OpKind::Sweep => "sweep",
            OpKind::Now => "now",
            OpKind::Close => "close",
        }
    }

    /// Whether the operation may change what the store holds (a claim
    /// that finds a record changes nothing, but may).
    pub fn writes(self) -> bool {
        matches!(
            self,
            OpKind::Claim
                | OpKind::Checkpoint
                | OpKind::Renew
                | OpKind::Complete
                | OpKind::Release
                | OpKind::Replace
                | OpKind::AppendAudit
                | OpKind::Sweep
        )
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One asynchronous [`Store`] operation with its arguments, as a
/// [`Hook`] sees it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Operation<'a> {
    /// [`Store::claim`].
    Claim(&'a ClaimRequest<'a>),
    /// [`Store::checkpoint`].
    Checkpoint {
        /// The key.
        key: &'a IdempotencyKey,
        /// The owner's fence.
        fence: Fence,
        /// The step.
        step: &'a str,
        /// Its value.
        value: &'a Value,
        /// The new lease, from now.
        lease: Duration,
    },
    /// [`Store::renew`].
    Renew {
        /// The key.
        key: &'a IdempotencyKey,
        /// The owner's fence.
        fence: Fence,
        /// The new lease, from now.
        lease: Duration,
    },
    /// [`Store::complete`].
    Complete {
        /// The key.
        key: &'a IdempotencyKey,
        /// The owner's fence.
        fence: Fence,
        /// The outcome.
        outcome: &'a Outcome,
        /// How long it is kept.
        ttl: Duration,
    },
    /// [`Store::release`].
    Release {
        /// The key.
        key: &'a IdempotencyKey,
        /// The owner's fence.
        fence: Fence,
    },
    /// [`Store::get`].
    Get {
        /// The key.
        key: &'a IdempotencyKey,
    },
    /// [`Store::replace`].
    Replace {
        /// The key.
        key: &'a IdempotencyKey,
        /// What the record must be for the swap to happen.
        expected: Expected,
        /// The new record (`None`: delete).
        new: Option<&'a Record>,
        /// The audit event appended with the swap.
        audit: Option<&'a AuditEvent>,
    },
    /// [`Store::append_audit`].
    AppendAudit {
        /// The event.
        event: &'a AuditEvent,
    },
    /// [`Store::audit`].
    Audit {
        /// Which events.
        query: &'a AuditQuery,
        /// Where the page starts.
        cursor: Option<&'a str>,
        /// At most how many.
        limit: usize,
    },
    /// [`Store::scan`].
    Scan {
        /// Where the page starts.
        cursor: Option<&'a str>,
        /// About how many.
        limit: usize,
    },
    /// [`Store::scan_open`].
    ScanOpen {
        /// Where the page starts.
        cursor: Option<&'a str>,
        /// At most how many.
        limit: usize,
    },
    /// [`Store::wait`].
    Wait {
        /// The key.
        key: &'a IdempotencyKey,
        /// The state waited out.
        until: WaitFor,
        /// For at most how long.
        timeout: Duration,
    },
    /// [`Store::sweep`].
    Sweep,
    /// [`Store::now`].
    Now,
    /// [`Store::close`].
    Close,
}

impl<'a> Operation<'a> {
    /// Which method this is.
    pub fn kind(&self) -> OpKind {
        match self {
            Operation::Claim(_) => OpKind::Claim,
            Operation::Checkpoint { .. } => OpKind::Checkpoint,
            Operation::Renew { .. } => OpKind::Renew,
            Operation::Complete { .. } => OpKind::Complete,
            Operation::Release { .. } => OpKind::Release,
            Operation::Get { .. } => OpKind::Get,
            Operation::Replace { .. } => OpKind::Replace,
            Operation::AppendAudit { .. } => OpKind::AppendAudit,
            Operation::Audit { .. } => OpKind::Audit,
            Operation::Scan { .. } => OpKind::Scan,
            Operation::ScanOpen { .. } => OpKind::ScanOpen,
            Operation::Wait { .. } => OpKind::Wait,
            Operation::Sweep => OpKind::Sweep,
            Operation::Now => OpKind::Now,
            Operation::Close => OpKind::Close,
        }
    }

    /// The key the operation is about, if it is about one.
    pub fn key(&self) -> Option<&'a IdempotencyKey> {
        match *self {
            Operation::Claim(req) => Some(req.key),
            Operation::Checkpoint { key, .. }
            | Operation::Renew { key, .. }
            | Operation::Complete { key, .. }
            | Operation::Release { key, .. }
            | Operation::Get { key }
            | Operation::Replace { key, .. }
            | Operation::Wait { key, .. } => Some(key),
            Operation::AppendAudit { event } => Some(&event.key),
            Operation::Audit { .. } | Operation::Scan { .. } | Operation::ScanOpen { .. } => None,
            Operation::Sweep | Operation::Now | Operation::Close => None,
        }
    }

    /// The fence the operation writes with, for the mutations an owner
    /// makes (checkpoint, renew, complete, release).
    pub fn fence(&self) -> Option<Fence> {
        match *self {
            Operation::Checkpoint { fence, .. }
            | Operation::Renew { fence, .. }
            | Operation::Complete { fence, .. }
            | Operation::Release { fence, .. } => Some(fence),
            _ => None,
        }
    }

    /// Run the operation on `store`: the matching [`Store`] method with
    /// these arguments.
    pub async fn run<S: Store + ?Sized>(self, store: &S) -> Result<Answer, StoreError> {
        Ok(match self {
            Operation::Claim(req) => Answer::Claim(store.claim(req).await?),
            Operation::Checkpoint {
                key,
                fence,
                step,
                value,
                lease,
            } => {
                store.checkpoint(key, fence, step, value, lease).await?;
                Answer::Done
            }
            Operation::Renew { key, fence, lease } => {
                store.renew(key, fence, lease).await?;
                Answer::Done
            }
            Operation::Complete {
                key,
                fence,
                outcome,
                ttl,
            } => {
                store.complete(key, fence, outcome, ttl).await?;
                Answer::Done
            }
            Operation::Release { key, fence } => {
                store.release(key, fence).await?;
                Answer::Done
            }
            Operation::Get { key } => Answer::Record(store.get(key).await?),
            Operation::Replace {
                key,
                expected,
                new,
                audit,
            } => Answer::Replaced(store.replace(key, expected, new, audit).await?),
            Operation::AppendAudit { event } => Answer::Appended(store.append_audit(event).await?),
            Operation::Audit {
                query,
                cursor,
                limit,
            } => Answer::Audit(store.audit(query, cursor, limit).await?),
            Operation::Scan { cursor, limit } => Answer::Scan(store.scan(cursor, limit).await?),
            Operation::ScanOpen { cursor, limit } => {
                Answer::Scan(store.scan_open(cursor, limit).await?)
            }
            Operation::Wait {
                key,
                until,
                timeout,
            } => Answer::Record(store.wait(key, until, timeout).await?),
            Operation::Sweep => Answer::Swept(store.sweep().await?),
            Operation::Now => Answer::Now(store.now().await?),
            Operation::Close => {
                store.close().await;
                Answer::Done
            }
        })
    }
}

/// What an [`Operation`] answered.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
// A record is as large as the `get` that returns it by value; boxing it
// here would cost every read through an interceptor an allocation, undone
// a moment later when the answer becomes the method's return value.
#[allow(clippy::large_enum_variant)]
pub enum Answer {
    /// [`Store::claim`].
    Claim(ClaimOutcome),
    /// [`Store::checkpoint`], [`Store::renew`], [`Store::complete`],
    /// [`Store::release`] and [`Store::close`].
    Done,
    /// [`Store::get`], [`Store::wait`] (for a completion or a decision).
    Record(Option<Record>),
    /// [`Store::replace`]: the new record's fence.
    Replaced(Option<Fence>),
    /// [`Store::append_audit`]: the event's sequence number.
    Appended(u64),
    /// [`Store::audit`].
    Audit(AuditPage),
    /// [`Store::scan`] and [`Store::scan_open`].
    Scan(ScanPage),
    /// [`Store::sweep`]: how many records were deleted.
    Swept(u64),
    /// [`Store::now`].
    Now(Timestamp),
}

impl Answer {
    fn name(&self) -> &'static str {
        match self {
            Answer::Claim(_) => "a claim outcome",
            Answer::Done => "done",
            Answer::Record(_) => "a record",
            Answer::Replaced(_) => "a replacement's fence",
            Answer::Appended(_) => "an audit sequence number",
            Answer::Audit(_) => "an audit page",
            Answer::Scan(_) => "a scan page",
            Answer::Swept(_) => "a sweep count",
            Answer::Now(_) => "a time",
        }
    }
}

/// What an [`Interceptor`] calls on the way to the wrapped store. Every
/// method has a default that forwards unchanged.
#[async_trait]
pub trait Hook: Send + Sync + fmt::Debug + 'static {
    /// Handle one asynchronous operation: usually `op.run(store).await`,
    /// with what the hook does before and after it. The answer must be
    /// the one `op`'s method returns ([`Answer::Done`] for a checkpoint,
    /// [`Answer::Record`] for a get, …); any other is reported to the
    /// caller as [`StoreError::Unavailable`], so that a mistaken hook
    /// makes the executor refuse, never act on a made-up answer.
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        op.run(store).await
    }

    /// Handle the caller's-thread claim ([`FastPath::claim_local`]):
    /// usually the wrapped store's own, with what the hook does before and
    /// after it. It must not block (see [`FastPath`]); returning `None`
    /// sends the claim the usual way, through [`Hook::around`].
    fn around_local(
        &self,
        req: &ClaimRequest<'_>,
        store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        store.fast_path()?.claim_local(req)
    }

    /// How the wrapped store describes itself through the interceptor
    /// (`inner` is its own [`Store::describe`]); unchanged by default.
    fn describe(&self, inner: String) -> String {
        inner
    }
}

/// A [`Store`] that forwards every method to `inner` through a [`Hook`].
/// See the [module docs](self).
#[derive(Debug)]
pub struct Interceptor<H, S = Arc<dyn Store>> {
    inner: S,
    hook: H,
}

impl<H: Hook, S: Store> Interceptor<H, S> {
    /// `inner`, with every operation handed to `hook`.
    pub fn new(inner: S, hook: H) -> Self {
        Interceptor { inner, hook }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }

    async fn through(&self, op: Operation<'_>) -> Result<Answer, StoreError> {
        self.hook.around(op, &self.inner).await
    }

    /// The error for a hook that answered `op` with the wrong kind of
    /// answer.
    fn mismatch(&self, op: OpKind, answer: &Answer) -> StoreError {
        StoreError::Unavailable {
            store: self.describe(),
            cause: format!(
                "the interceptor's hook {:?} answered `{op}` with {}",
                self.hook,
                answer.name()
            )
            .into(),
        }
    }

    async fn done(&self, op: Operation<'_>) -> Result<(), StoreError> {
        let kind = op.kind();
        match self.through(op).await? {
            Answer::Done => Ok(()),
            other => Err(self.mismatch(kind, &other)),
        }
    }

    async fn record(&self, op: Operation<'_>) -> Result<Option<Record>, StoreError> {
        let kind = op.kind();
        match self.through(op).await? {
            Answer::Record(record) => Ok(record),
            other => Err(self.mismatch(kind, &other)),
        }
    }
}

/// The claim goes through [`Hook::around_local`]. A completion is always
/// declined here: it goes through [`Hook::around`] as
/// [`Operation::Complete`], so that a hook sees every one (what it forwards
/// is the wrapped store's asynchronous `complete`).
impl<H: Hook, S: Store> FastPath for Interceptor<H, S> {
    fn claim_local(&self, req: &ClaimRequest<'_>) -> Option<Result<LocalClaim, StoreError>> {
        self.hook.around_local(req, &self.inner)
    }
}

#[async_trait]
impl<H: Hook, S: Store> Store for Interceptor<H, S> {
    fn describe(&self) -> String {
        self.hook.describe(self.inner.describe())
    }

    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        match self.through(Operation::Claim(req)).await? {
            Answer::Claim(outcome) => Ok(outcome),
            other => Err(self.mismatch(OpKind::Claim, &other)),
        }
    }

    fn fast_path(&self) -> Option<&dyn FastPath> {
        Some(self)
    }

    async fn checkpoint(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        step: &str,
        value: &Value,
        lease: Duration,
    ) -> Result<(), StoreError> {
        self.done(Operation::Checkpoint {
            key,
            fence,
            step,
            value,
            lease,
        })
        .await
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        self.done(Operation::Renew { key, fence, lease }).await
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.done(Operation::Complete {
            key,
            fence,
            outcome,
            ttl,
        })
        .await
    }

    async fn release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        self.done(Operation::Release { key, fence }).await
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.record(Operation::Get { key }).await
    }

    async fn replace(
        &self,
        key: &IdempotencyKey,
        expected: Expected,
        new: Option<&Record>,
        audit: Option<&AuditEvent>,
    ) -> Result<Option<Fence>, StoreError> {
        let op = Operation::Replace {
            key,
            expected,
            new,
            audit,
        };
        match self.through(op).await? {
            Answer::Replaced(fence) => Ok(fence),
            other => Err(self.mismatch(OpKind::Replace, &other)),
        }
    }

    async fn append_audit(&self, event: &AuditEvent) -> Result<u64, StoreError> {
        match self.through(Operation::AppendAudit { event }).await? {
            Answer::Appended(seq) => Ok(seq),
            other => Err(self.mismatch(OpKind::AppendAudit, &other)),
        }
    }

    async fn audit(
        &self,
        query: &AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        let op = Operation::Audit {
            query,
            cursor,
            limit,
        };
        match self.through(op).await? {
            Answer::Audit(page) => Ok(page),
            other => Err(self.mismatch(OpKind::Audit, &other)),
        }
    }

    async fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        match self.through(Operation::Scan { cursor, limit }).await? {
            Answer::Scan(page) => Ok(page),
            other => Err(self.mismatch(OpKind::Scan, &other)),
        }
    }

    async fn scan_open(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        match self.through(Operation::ScanOpen { cursor, limit }).await? {
            Answer::Scan(page) => Ok(page),
            other => Err(self.mismatch(OpKind::ScanOpen, &other)),
        }
    }

    async fn wait(
        &self,
        key: &IdempotencyKey,
        until: WaitFor,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.record(Operation::Wait {
            key,
            until,
            timeout,
        })
        .await
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        match self.through(Operation::Sweep).await? {
            Answer::Swept(n) => Ok(n),
            other => Err(self.mismatch(OpKind::Sweep, &other)),
        }
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        match self.through(Operation::Now).await? {
            Answer::Now(t) => Ok(t),
            other => Err(self.mismatch(OpKind::Now, &other)),
        }
    }

    async fn close(&self) {
        // A hook that answers a close with an error has nothing to report
        // it to: `close` returns nothing.
        let _ = self.through(Operation::Close).await;
    }
}

#[cfg(test)]
mod tests;
