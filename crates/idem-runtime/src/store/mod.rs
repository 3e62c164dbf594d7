//! The store contract every backend implements.
//!
//! A store keeps one [`Record`] per key and moves it through its life with
//! one operation per transition, so that a remote store can do each in a
//! single round trip. The operations are data ([`Operation`], answered by
//! [`Answer`]): a store implements one method, [`Store::call`], and every
//! caller uses the typed calls of [`StoreExt`], written once on top of it.
//! Layers — the `Arc` forward, the [`Interceptor`](intercept::Interceptor)
//! — pass an operation on as a value.
//!
//! | operation | transition |
//! |---|---|
//! | [`StoreExt::claim`] | absent / expired → in flight (owner); expired lease → in flight (takeover); otherwise report what is there |
//! | [`StoreExt::checkpoint`] | in flight → in flight, with one more completed step |
//! | [`StoreExt::renew`] | in flight → in flight, with a later lease |
//! | [`StoreExt::complete`] | in flight → completed |
//! | [`StoreExt::release`] | in flight → absent (the call is known not to have applied) |
//! | [`StoreExt::get`] | read |
//! | [`StoreExt::replace`] | an operator's or an approval's change: fenced compare-and-swap of a whole record |
//! | [`StoreExt::scan`] | read records a page at a time, for operators |
//! | [`StoreExt::scan_open`] | read the open records (in flight, awaiting approval, unknown outcome) a page at a time, newest first, for the inbox |
//! | [`StoreExt::wait`] | block until the record leaves the state waited out ([`WaitFor`]): in flight, or awaiting a person's decision |
//! | [`StoreExt::sweep`] | delete expired *completed* records (and audit events past their retention) |
//! | [`StoreExt::append_audit`] | append an event to the audit log, which outlives the records |
//! | [`StoreExt::audit`] | read the audit log a page at a time |
//! | [`StoreExt::close`] | finish pending writes, release connections; later operations fail with [`StoreError::Closed`] |
//!
//! A store whose records are in this process, or on a local disk, may also
//! answer claims and completions on the caller's thread: it returns its
//! [`FastPath`] from [`Store::fast_path`]. Every other store leaves that
//! method's default, which says "no".
//!
//! Errors: [`StoreError`] says what went wrong, at open time (a scheme,
//! URL, option, schema version or TLS problem: the store cannot be used as
//! configured) or at operation time (unavailable, stale fence, corrupt
//! record, full, read-only, closed); [`StoreError::at_open`] tells which.
//!
//! Every mutation after the claim carries the owner's [`Fence`]; a mutation
//! with any other fence is refused with [`StoreError::StaleFence`] and
//! changes nothing. The conformance suite (feature `conformance`) checks all
//! of this for any store.
//!
//! Leases and TTLs may be as long as [`Duration::MAX`]: a span too long to
//! add to the current time means "as long as the store can keep", never a
//! time that wraps into the past or a failed write.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::record::{CallInfoRef, CorruptRecord, Fence, Outcome, Record};

pub mod backend;
mod error;
mod ext;
pub mod intercept;
pub mod memory;
mod open;
mod operation;
mod poll;
mod redact;
mod sweeper;
mod tls_failure;
pub mod transition;
pub mod url;
mod wait_for;
mod waiters;

pub use error::{BadOption, Cause, FenceHolder, StoreError, UnknownOption};
pub use ext::StoreExt;
pub use memory::MemoryStore;
pub use open::{scan_open_by_scanning, OpenCursor};
pub use operation::{Answer, OpKind, Operation};
pub use poll::poll_wait;
pub use redact::redact;
pub use sweeper::{spawn_sweeper, SweeperHandle};
pub use tls_failure::{TlsFailure, TlsProblem};
pub use url::{DEFAULT_STORE_URL, STORE_ENV};
pub use wait_for::WaitFor;

/// A request to own a key.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    /// The key.
    pub key: &'a IdempotencyKey,
    /// The tool making the call.
    pub tool: &'a str,
    /// Fingerprint of the call's canonical arguments.
    pub fingerprint: &'a Fingerprint,
    /// Whether a different fingerprint under the same key is a key-reuse
    /// error (`false` for natural keys, which are find-or-create). Even
    /// then, an approved call is acquired only by a claim with the
    /// fingerprint it was approved with.
    pub check_fingerprint: bool,
    /// How long the owner is presumed alive.
    pub lease: Duration,
    /// What to record about the call when the claim creates the record
    /// (ignored when the record exists).
    pub info: CallInfoRef<'a>,
    /// The claiming worker, recorded as the record's
    /// [`worker`](Record::worker) when the claim acquires the key.
    pub worker: Option<&'a str>,
    /// Whether a claim that writes must reach durable storage before the
    /// store answers. The executor asks for it for every class that is
    /// never re-run on an unknown outcome (`non_idempotent_write`,
    /// `irreversible`): a crash that forgot such a claim could forget that
    /// an effect may have happened. An `idempotent_write` claims with
    /// `false`: if a crash or a power cut loses the claim, the call simply
    /// runs again with the same key, which its class makes harmless, and
    /// its completion is made durable before the caller is answered.
    ///
    /// A store may ignore `false` and make every claim durable (always
    /// correct, only slower). SQLite with `Synchronous::Full` commits a
    /// batch of such claims without an fsync (the next durable commit's
    /// fsync covers them); PostgreSQL commits them with
    /// `synchronous_commit = off` for that transaction alone. A claim that
    /// writes nothing (a duplicate) costs no flush either way.
    pub durable: bool,
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// The caller owns the key and must run the call, then complete or
    /// release it with `fence`.
    Acquired {
        /// The caller's fencing token.
        fence: Fence,
        /// Until when the caller's lease runs.
        lease_until: Timestamp,
        /// Steps a previous owner completed (multi-step tools resume after
        /// them).
        steps: std::collections::BTreeMap<String, Value>,
        /// Set when a previous owner's lease expired without an outcome: the
        /// effect may or may not have happened.
        takeover: Option<Takeover>,
    },
    /// Another owner holds a live lease.
    InFlight {
        /// That owner's fence.
        fence: Fence,
        /// Until when its lease runs.
        lease_until: Timestamp,
    },
    /// The call already completed; here is its record (shared: a store that
    /// keeps records in memory hands out its own copy without cloning).
    Completed(Arc<Record>),
    /// The call waits for a person's approval; nothing was changed.
    AwaitingApproval(Arc<Record>),
    /// The key is recorded for different arguments or another tool; nothing
    /// was changed.
    KeyReused {
        /// The tool that owns the record.
        tool: String,
        /// The fingerprint stored with it.
        fingerprint: Fingerprint,
    },
}

/// A claim answered on the caller's thread ([`FastPath::claim_local`]).
///
/// ```
/// use idem_runtime::record::{Outcome, OutputJson};
/// use idem_runtime::store::{ClaimOutcome, LocalClaim};
///
/// let output = OutputJson::new(&"sent").unwrap();
/// let found = LocalClaim::Completed(Outcome::Success { output });
/// assert!(matches!(found.outcome(), Some(Outcome::Success { .. })));
/// let claimed = LocalClaim::from(ClaimOutcome::InFlight {
///     fence: idem_runtime::record::Fence(1),
///     lease_until: idem_runtime::clock::Timestamp(0),
/// });
/// assert!(claimed.outcome().is_none());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum LocalClaim {
    /// What [`StoreExt::claim`] would answer.
    Claim(ClaimOutcome),
    /// The call completed with this outcome: what
    /// [`ClaimOutcome::Completed`] says, without the rest of the record,
    /// which answering a duplicate does not read. A store that keeps its
    /// records in a compact form answers a duplicate this way without
    /// building a [`Record`] for it (the output's text is shared, not
    /// copied: [`OutputJson`](crate::record::OutputJson)).
    Completed(Outcome),
}

impl LocalClaim {
    /// The recorded outcome, when the claim found the call completed.
    pub fn outcome(&self) -> Option<&Outcome> {
        match self {
            LocalClaim::Completed(outcome) => Some(outcome),
            LocalClaim::Claim(ClaimOutcome::Completed(record)) => record.outcome(),
            LocalClaim::Claim(_) => None,
        }
    }
}

impl From<ClaimOutcome> for LocalClaim {
    fn from(outcome: ClaimOutcome) -> Self {
        LocalClaim::Claim(outcome)
    }
}

/// What a [`StoreExt::replace`] must find under the key for the swap to
/// happen: a record with this fence, in this state. Anything else — another
/// fence, another state, no record, an expired record — refuses the swap
/// with [`StoreError::StaleFence`] and changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// The fence the record must hold.
    pub fence: Fence,
    /// The state it must be in.
    pub state: ExpectedState,
}

/// The state half of [`Expected`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedState {
    /// In flight, whatever its lease (the owner itself swaps).
    InFlight,
    /// In flight with a lease that has run out by the store's clock (an
    /// operator settles a dead owner's call; a live owner is never
    /// overruled).
    LeaseExpired,
    /// Awaiting approval (approved or not).
    AwaitingApproval,
    /// Completed and not expired.
    Completed,
}

/// One page of [`StoreExt::scan`]. A store builds one with
/// `ScanPage { records, cursor, ..Default::default() }` when it has no
/// corrupt records to report, so that later fields need no change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanPage {
    /// Records of this page (expired records are left out).
    pub records: Vec<Record>,
    /// Stored records of this page that could not be decoded (or are
    /// stored under a malformed key): reported, left untouched, and not
    /// in `records`, so that one bad row does not hide the rest.
    pub corrupt: Vec<CorruptRecord>,
    /// Where the next page starts; `None` after the last page. Opaque:
    /// pass it back to [`StoreExt::scan`] unchanged.
    pub cursor: Option<String>,
}

/// A previous owner vanished (its lease expired before it completed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Takeover {
    /// The vanished owner's fence; it can no longer write.
    pub previous: Fence,
}

/// A persistent or in-memory home for records: it answers
/// [`Operation`]s. See the module docs for the contract, and [`StoreExt`]
/// for the typed calls everyone else makes.
///
/// A store implements three methods: its name, its fast path (if it has
/// one) and [`Store::call`], one `match` over the operations that ends
/// with [`Operation::by_default`] for those it leaves to the defaults.
///
/// ```
/// use idem_runtime::store::{Answer, MemoryStore, Operation, Store, StoreError, StoreExt};
///
/// /// A store that is the memory store, under another name.
/// #[derive(Debug, Default)]
/// struct Renamed(MemoryStore);
///
/// #[async_trait::async_trait]
/// impl Store for Renamed {
///     fn describe(&self) -> String {
///         "renamed".to_owned()
///     }
///     async fn call(&self, op: Operation<'_>) -> Result<Answer, StoreError> {
///         match op {
///             // A store with nothing of its own for a clock would answer
///             // `op.by_default(self).await` here instead.
///             Operation::Now => Ok(Answer::Now(self.0.now().await?)),
///             op => op.run(&self.0).await,
///         }
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let store = Renamed::default();
/// assert_eq!(store.scan(None, 10).await.unwrap().records.len(), 0);
/// # });
/// ```
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// A short description for error messages (`"memory"`, `"sqlite:/path"`).
    fn describe(&self) -> String;

    /// This store's answers on the caller's thread, when it has any: its
    /// records are in this process ([`MemoryStore`]), or some answers are a
    /// read of a local file (a duplicate of a completed call on SQLite).
    /// The executor asks the fast path first and awaits [`StoreExt::claim`]
    /// or [`StoreExt::complete`] when it declines. The default, and what a
    /// store over the network returns, is `None`: no fast path.
    fn fast_path(&self) -> Option<&dyn FastPath> {
        None
    }

    /// Answer one operation: the [`Answer`] its variant names
    /// ([`Answer::Claim`] for a claim, [`Answer::Done`] for a checkpoint,
    /// …). What each operation must do is said on its [`StoreExt`] method;
    /// the conformance suite (feature `conformance`) checks it.
    async fn call(&self, op: Operation<'_>) -> Result<Answer, StoreError>;
}

/// The answers a store gives on the caller's thread, without awaiting
/// anything, reached through [`Store::fast_path`]. Each method's default
/// declines, so a store implements only the answers it has.
///
/// When a method answers, the answer and any write must be exactly those
/// of the [`Store`] method it stands for at that moment (waking the key's
/// waiters included). It must not block for longer than a read or write of
/// local memory or a local file: no network, no waiting for a lock another
/// writer holds for long.
pub trait FastPath: Send + Sync {
    /// [`StoreExt::claim`], when the store can answer it here; `None` hands
    /// the claim back to [`StoreExt::claim`]. A store may answer only some
    /// outcomes (a completed record, say) and return `None` for the rest.
    /// A completed call may be answered with its outcome alone
    /// ([`LocalClaim::Completed`]).
    fn claim_local(&self, req: &ClaimRequest<'_>) -> Option<Result<LocalClaim, StoreError>> {
        let _ = req;
        None
    }

    /// [`StoreExt::complete`], when the store can do it here. The outcome is
    /// taken by value, so a store that keeps it in memory moves it into the
    /// record instead of copying it, and no future is boxed. `Err(outcome)`
    /// hands the outcome back: complete it with [`StoreExt::complete`].
    fn complete_local(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: Outcome,
        ttl: Duration,
    ) -> Result<Result<(), StoreError>, Outcome> {
        let _ = (key, fence, ttl);
        Err(outcome)
    }
}

#[async_trait]
impl<S: Store + ?Sized> Store for Arc<S> {
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn fast_path(&self) -> Option<&dyn FastPath> {
        (**self).fast_path()
    }
    async fn call(&self, op: Operation<'_>) -> Result<Answer, StoreError> {
        (**self).call(op).await
    }
}
