//! The store contract as data: one [`Operation`] per thing a store does,
//! one [`Answer`] per kind of reply.
//!
//! [`Store::call`] takes an operation and gives its answer; that is the
//! whole contract a backend implements (with [`Store::describe`], and
//! [`Store::fast_path`] where it can answer on the caller's thread). The
//! typed calls the rest of the crate makes — [`StoreExt::claim`],
//! [`StoreExt::complete`], [`StoreExt::get`], … — are written once, in
//! `ext.rs`, on top of it, and so are the layers: the `Arc` forward and
//! the [`Interceptor`](super::intercept::Interceptor) pass the operation
//! on as a value, as a tower `Service` passes a request.
//!
//! A new operation is a variant here (with its [`OpKind`] and, when it
//! answers something new, an [`Answer`]), its typed call in `ext.rs`, and
//! an arm in each backend's `call`.

use std::fmt;
use std::time::Duration;

use serde_json::Value;

#[cfg(doc)]
use super::StoreExt;
use super::{
    poll_wait, scan_open_by_scanning, ClaimOutcome, ClaimRequest, Expected, ScanPage, Store,
    StoreError, WaitFor,
};
use crate::audit::{AuditEvent, AuditPage, AuditQuery};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::{Fence, Outcome, Record};

/// `OpKind`, its `ALL` and its `name`, from one table: each kind and
/// its name, which is also its [`StoreExt`] method's.
macro_rules! op_kinds {
    ($($kind:ident => $name:literal,)+) => {
        /// Which operation an [`Operation`] is, without its arguments.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum OpKind {
            $(#[doc = concat!("[`StoreExt::", $name, "`].")] $kind,)+
        }

        impl OpKind {
            /// Every kind, in the order [`Operation`] declares them.
            pub const ALL: [OpKind; [$(OpKind::$kind),+].len()] = [$(OpKind::$kind),+];

            /// The operation's name, which is also its [`StoreExt`] method's
            /// (`"claim"`, `"append_audit"`).
            pub fn name(self) -> &'static str {
                match self {
                    $(OpKind::$kind => $name,)+
                }
            }
        }
    };
}

op_kinds! {
    Claim => "claim",
    Checkpoint => "checkpoint",
    Renew => "renew",
    Complete => "complete",
    Release => "release",
    Get => "get",
    Replace => "replace",
    AppendAudit => "append_audit",
    Audit => "audit",
    Scan => "scan",
    ScanOpen => "scan_open",
    Wait => "wait",
    Sweep => "sweep",
    Now => "now",
    Close => "close",
}

impl OpKind {
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

/// One store operation with its arguments: what [`Store::call`] answers.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Operation<'a> {
    /// [`StoreExt::claim`].
    Claim(&'a ClaimRequest<'a>),
    /// [`StoreExt::checkpoint`].
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
    /// [`StoreExt::renew`].
    Renew {
        /// The key.
        key: &'a IdempotencyKey,
        /// The owner's fence.
        fence: Fence,
        /// The new lease, from now.
        lease: Duration,
    },
    /// [`StoreExt::complete`].
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
    /// [`StoreExt::release`].
    Release {
        /// The key.
        key: &'a IdempotencyKey,
        /// The owner's fence.
        fence: Fence,
    },
    /// [`StoreExt::get`].
    Get {
        /// The key.
        key: &'a IdempotencyKey,
    },
    /// [`StoreExt::replace`].
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
    /// [`StoreExt::append_audit`].
    AppendAudit {
        /// The event.
        event: &'a AuditEvent,
    },
    /// [`StoreExt::audit`].
    Audit {
        /// Which events.
        query: &'a AuditQuery,
        /// Where the page starts.
        cursor: Option<&'a str>,
        /// At most how many.
        limit: usize,
    },
    /// [`StoreExt::scan`].
    Scan {
        /// Where the page starts.
        cursor: Option<&'a str>,
        /// About how many.
        limit: usize,
    },
    /// [`StoreExt::scan_open`].
    ScanOpen {
        /// Where the page starts.
        cursor: Option<&'a str>,
        /// At most how many.
        limit: usize,
    },
    /// [`StoreExt::wait`].
    Wait {
        /// The key.
        key: &'a IdempotencyKey,
        /// The state waited out.
        until: WaitFor,
        /// For at most how long.
        timeout: Duration,
    },
    /// [`StoreExt::sweep`].
    Sweep,
    /// [`StoreExt::now`].
    Now,
    /// [`StoreExt::close`].
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

    /// Run the operation on `store`: `store.call(self)`. What a
    /// [`Hook`](super::intercept::Hook) calls to pass the operation on.
    pub async fn run<S: Store + ?Sized>(self, store: &S) -> Result<Answer, StoreError> {
        store.call(self).await
    }

    /// Answer the operation as a store that has nothing of its own for it
    /// does: the operations with a default answer it ([`OpKind::Renew`]
    /// as a checkpoint of the reserved step
    /// [`LEASE_STEP`](crate::record::LEASE_STEP), [`OpKind::ScanOpen`]
    /// by scanning the whole store, [`OpKind::Wait`] by polling,
    /// [`OpKind::Close`] by doing nothing); every other operation is
    /// refused as [`StoreError::Unavailable`], so that a store that does
    /// not know an operation makes the executor refuse rather than act on
    /// a made-up answer.
    ///
    /// A store's [`Store::call`] ends its `match` with this: `op =>
    /// op.by_default(self).await`, which also answers the operations a
    /// later version of this crate adds (the enum is `#[non_exhaustive]`).
    pub async fn by_default<S: Store + ?Sized>(self, store: &S) -> Result<Answer, StoreError> {
        match self {
            Operation::Renew { key, fence, lease } => {
                store
                    .call(Operation::Checkpoint {
                        key,
                        fence,
                        step: crate::record::LEASE_STEP,
                        value: &Value::Null,
                        lease,
                    })
                    .await
            }
            Operation::ScanOpen { cursor, limit } => Ok(Answer::Scan(
                scan_open_by_scanning(store, cursor, limit).await?,
            )),
            Operation::Wait {
                key,
                until,
                timeout,
            } => Ok(Answer::Record(poll_wait(store, key, until, timeout).await?)),
            Operation::Close => Ok(Answer::Done),
            other => Err(StoreError::Unavailable {
                store: store.describe(),
                cause: format!("the store does not answer `{}`", other.kind()).into(),
            }),
        }
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
    /// [`StoreExt::claim`].
    Claim(ClaimOutcome),
    /// [`StoreExt::checkpoint`], [`StoreExt::renew`], [`StoreExt::complete`],
    /// [`StoreExt::release`] and [`StoreExt::close`].
    Done,
    /// [`StoreExt::get`], [`StoreExt::wait`] (for a completion or a decision).
    Record(Option<Record>),
    /// [`StoreExt::replace`]: the new record's fence.
    Replaced(Option<Fence>),
    /// [`StoreExt::append_audit`]: the event's sequence number.
    Appended(u64),
    /// [`StoreExt::audit`].
    Audit(AuditPage),
    /// [`StoreExt::scan`] and [`StoreExt::scan_open`].
    Scan(ScanPage),
    /// [`StoreExt::sweep`]: how many records were deleted.
    Swept(u64),
    /// [`StoreExt::now`].
    Now(Timestamp),
}

impl Answer {
    /// What the answer is, in words (`"a claim outcome"`, `"done"`).
    pub fn name(&self) -> &'static str {
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

/// Answers an [`Operation`] with a store's own methods, one per operation:
/// `answer_operation!(self, op)` in a [`Store::call`] calls
/// `self.on_claim(req)`, `self.on_checkpoint(key, fence, step, value,
/// lease)`, … — `on_` and the [`StoreExt`] method's name, with its
/// arguments and result — and wraps the result in its [`Answer`]; an
/// operation this crate adds later goes to [`Operation::by_default`].
///
/// The SQLite, Redis and PostgreSQL stores answer this way. A store that
/// leaves some operations to the defaults writes its own `match` instead.
/// A missing `on_` method is a compile error naming it.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
///
/// use idem_runtime::answer_operation;
/// use idem_runtime::audit::{AuditEvent, AuditPage, AuditQuery};
/// use idem_runtime::clock::Timestamp;
/// use idem_runtime::key::{Fingerprint, IdempotencyKey};
/// use idem_runtime::record::{CallInfoRef, Fence, Outcome, OutputJson, Record};
/// use idem_runtime::store::*;
///
/// /// The memory store, counting the completions it records.
/// #[derive(Debug, Default)]
/// struct Counting(MemoryStore, AtomicU64);
///
/// #[async_trait::async_trait]
/// impl Store for Counting {
///     fn describe(&self) -> String {
///         "counting".to_owned()
///     }
///     async fn call(&self, op: Operation<'_>) -> Result<Answer, StoreError> {
///         answer_operation!(self, op)
///     }
/// }
///
/// impl Counting {
///     async fn on_complete(&self, key: &IdempotencyKey, fence: Fence, outcome: &Outcome, ttl: Duration) -> Result<(), StoreError> {
///         self.0.complete(key, fence, outcome, ttl).await?;
///         self.1.fetch_add(1, Ordering::Relaxed);
///         Ok(())
///     }
///     // The others as the memory store answers them.
///     async fn on_claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> { self.0.claim(req).await }
///     async fn on_checkpoint(&self, key: &IdempotencyKey, fence: Fence, step: &str, value: &serde_json::Value, lease: Duration) -> Result<(), StoreError> { self.0.checkpoint(key, fence, step, value, lease).await }
///     async fn on_renew(&self, key: &IdempotencyKey, fence: Fence, lease: Duration) -> Result<(), StoreError> { self.0.renew(key, fence, lease).await }
///     async fn on_release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> { self.0.release(key, fence).await }
///     async fn on_get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> { self.0.get(key).await }
///     async fn on_replace(&self, key: &IdempotencyKey, expected: Expected, new: Option<&Record>, audit: Option<&AuditEvent>) -> Result<Option<Fence>, StoreError> { self.0.replace(key, expected, new, audit).await }
///     async fn on_append_audit(&self, event: &AuditEvent) -> Result<u64, StoreError> { self.0.append_audit(event).await }
///     async fn on_audit(&self, query: &AuditQuery, cursor: Option<&str>, limit: usize) -> Result<AuditPage, StoreError> { self.0.audit(query, cursor, limit).await }
///     async fn on_scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> { self.0.scan(cursor, limit).await }
///     async fn on_scan_open(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> { self.0.scan_open(cursor, limit).await }
///     async fn on_wait(&self, key: &IdempotencyKey, until: WaitFor, timeout: Duration) -> Result<Option<Record>, StoreError> { self.0.wait(key, until, timeout).await }
///     async fn on_sweep(&self) -> Result<u64, StoreError> { self.0.sweep().await }
///     async fn on_now(&self) -> Result<Timestamp, StoreError> { self.0.now().await }
///     async fn on_close(&self) { self.0.close().await }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = Counting::default();
/// let key = IdempotencyKey::parse(&"ab".repeat(32)).unwrap();
/// let fingerprint = Fingerprint::new("cd".repeat(32));
/// let req = ClaimRequest {
///     key: &key,
///     tool: "send_email",
///     fingerprint: &fingerprint,
///     check_fingerprint: true,
///     lease: Duration::from_secs(10),
///     info: CallInfoRef::EMPTY,
///     worker: None,
///     durable: true,
/// };
/// let ClaimOutcome::Acquired { fence, .. } = store.claim(&req).await.unwrap() else {
///     panic!("a first claim owns the key");
/// };
/// let sent = Outcome::Success { output: OutputJson::new(&"sent").unwrap() };
/// store.complete(&key, fence, &sent, Duration::from_secs(60)).await.unwrap();
/// assert_eq!(store.1.load(Ordering::Relaxed), 1);
/// assert!(matches!(store.claim(&req).await.unwrap(), ClaimOutcome::Completed(_)));
/// # });
/// ```
#[macro_export]
macro_rules! answer_operation {
    ($store:expr, $op:expr) => {{
        use $crate::store::{Answer, Operation};
        let store = $store;
        ::core::result::Result::Ok(match $op {
            Operation::Claim(req) => Answer::Claim(store.on_claim(req).await?),
            Operation::Checkpoint {
                key,
                fence,
                step,
                value,
                lease,
            } => {
                store.on_checkpoint(key, fence, step, value, lease).await?;
                Answer::Done
            }
            Operation::Renew { key, fence, lease } => {
                store.on_renew(key, fence, lease).await?;
                Answer::Done
            }
            Operation::Complete {
                key,
                fence,
                outcome,
                ttl,
            } => {
                store.on_complete(key, fence, outcome, ttl).await?;
                Answer::Done
            }
            Operation::Release { key, fence } => {
                store.on_release(key, fence).await?;
                Answer::Done
            }
            Operation::Get { key } => Answer::Record(store.on_get(key).await?),
            Operation::Replace {
                key,
                expected,
                new,
                audit,
            } => Answer::Replaced(store.on_replace(key, expected, new, audit).await?),
            Operation::AppendAudit { event } => {
                Answer::Appended(store.on_append_audit(event).await?)
            }
            Operation::Audit {
                query,
                cursor,
                limit,
            } => Answer::Audit(store.on_audit(query, cursor, limit).await?),
            Operation::Scan { cursor, limit } => Answer::Scan(store.on_scan(cursor, limit).await?),
            Operation::ScanOpen { cursor, limit } => {
                Answer::Scan(store.on_scan_open(cursor, limit).await?)
            }
            Operation::Wait {
                key,
                until,
                timeout,
            } => Answer::Record(store.on_wait(key, until, timeout).await?),
            Operation::Sweep => Answer::Swept(store.on_sweep().await?),
            Operation::Now => Answer::Now(store.on_now().await?),
            Operation::Close => {
                store.on_close().await;
                Answer::Done
            }
            #[allow(unreachable_patterns)]
            op => return op.by_default(store).await,
        })
    }};
}
