//! The store contract every backend implements.
//!
//! A store keeps one [`Record`] per key and moves it through its life with
//! one operation per transition, so that a remote store can do each in a
//! single round trip:
//!
//! | operation | transition |
//! |---|---|
//! | [`Store::claim`] | absent / expired → in flight (owner); expired lease → in flight (takeover); otherwise report what is there |
//! | [`Store::checkpoint`] | in flight → in flight, with one more completed step |
//! | [`Store::renew`] | in flight → in flight, with a later lease |
//! | [`Store::complete`] | in flight → completed |
//! | [`Store::release`] | in flight → absent (the call is known not to have applied) |
//! | [`Store::get`] | read |
//! | [`Store::replace`] | an operator's or an approval's change: fenced compare-and-swap of a whole record |
//! | [`Store::scan`] | read records a page at a time, for operators |
//! | [`Store::scan_open`] | read the open records (in flight, awaiting approval, unknown outcome) a page at a time, newest first, for the inbox |
//! | [`Store::wait`] | block until the record leaves the state waited out ([`WaitFor`]): in flight, or awaiting a person's decision |
//! | [`Store::sweep`] | delete expired *completed* records (and audit events past their retention) |
//! | [`Store::append_audit`] | append an event to the audit log, which outlives the records |
//! | [`Store::audit`] | read the audit log a page at a time |
//! | [`Store::close`] | finish pending writes, release connections; later operations fail with [`StoreError::Closed`] |
//!
//! A store whose records are in this process, or on a local disk, may also
//! answer claims and completions on the caller's thread: it returns its
//! [`FastPath`] from [`Store::fast_path`]. Every other store leaves that
//! method's default, which says "no".
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

use crate::audit::{AuditEvent, AuditPage, AuditQuery};
use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::record::{CallInfoRef, CorruptRecord, Fence, Outcome, Record};

pub mod backend;
mod error;
pub mod intercept;
pub mod memory;
mod open;
mod poll;
mod redact;
mod sweeper;
mod tls_failure;
pub mod transition;
pub mod url;
mod wait_for;
mod waiters;

pub use error::{BadOption, Cause, FenceHolder, StoreError, UnknownOption};
pub use memory::MemoryStore;
pub use open::{scan_open_by_scanning, OpenCursor};
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
    /// What [`Store::claim`] would answer.
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

/// What a [`Store::replace`] must find under the key for the swap to
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

/// One page of [`Store::scan`]. A store builds one with
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
    /// pass it back to [`Store::scan`] unchanged.
    pub cursor: Option<String>,
}

/// A previous owner vanished (its lease expired before it completed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Takeover {
    /// The vanished owner's fence; it can no longer write.
    pub previous: Fence,
}

/// A persistent or in-memory home for records. See the module docs for the
/// contract.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// A short description for error messages (`"memory"`, `"sqlite:/path"`).
    fn describe(&self) -> String;

    /// Try to own `req.key`. One round trip.
    ///
    /// * No record, or a completed record past its expiry: a new in-flight
    ///   record with a fresh fence → [`ClaimOutcome::Acquired`].
    /// * A record for another tool, or (when `check_fingerprint`) another
    ///   fingerprint → [`ClaimOutcome::KeyReused`]; nothing changes.
    /// * In flight with a live lease → [`ClaimOutcome::InFlight`].
    /// * In flight with an expired lease → the record gets a fresh fence and
    ///   lease, keeps its steps → [`ClaimOutcome::Acquired`] with a [`Takeover`].
    /// * Completed → [`ClaimOutcome::Completed`].
    /// * Awaiting approval, not yet approved → [`ClaimOutcome::AwaitingApproval`];
    ///   nothing changes.
    /// * Approved, and the request's fingerprint is the record's → in flight
    ///   under a fresh fence, keeping the steps (the approval among them) →
    ///   [`ClaimOutcome::Acquired`] without a takeover. With another
    ///   fingerprint (a natural key does not check it) →
    ///   [`ClaimOutcome::AwaitingApproval`], nothing changes: only the
    ///   arguments a person approved ever run under an approval.
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError>;

    /// This store's answers on the caller's thread, when it has any: its
    /// records are in this process ([`MemoryStore`]), or some answers are a
    /// read of a local file (a duplicate of a completed call on SQLite).
    /// The executor asks the fast path first and awaits [`Store::claim`] or
    /// [`Store::complete`] when it declines. The default, and what a store
    /// over the network returns, is `None`: no fast path.
    fn fast_path(&self) -> Option<&dyn FastPath> {
        None
    }

    /// Record that step `step` of an in-flight call finished with `value`,
    /// and extend the lease by `lease` from now. One round trip.
    async fn checkpoint(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        step: &str,
        value: &Value,
        lease: Duration,
    ) -> Result<(), StoreError>;

    /// Extend the lease of the in-flight record owned by `fence` to `lease`
    /// from now. One round trip, nothing else changes. Refused with
    /// [`StoreError::StaleFence`] when `fence` no longer owns the record:
    /// the owner then knows it was superseded and stops.
    ///
    /// The executor calls it every third of the lease while the owner
    /// works. The default records the renewal as a checkpoint of the
    /// reserved step [`LEASE_STEP`](crate::record::LEASE_STEP); stores override it with a write of the
    /// lease alone.
    async fn renew(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        self.checkpoint(key, fence, crate::record::LEASE_STEP, &Value::Null, lease)
            .await
    }

    /// Complete an in-flight call with `outcome`, kept for `ttl`. One round
    /// trip. Refused with [`StoreError::StaleFence`] unless `fence` owns the
    /// key and the record is in flight: a completed outcome is never
    /// overwritten.
    async fn complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError>;

    /// Delete an in-flight record owned by `fence`: the call is known not to
    /// have taken effect and may run again later.
    async fn release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError>;

    /// Read a record. Expired completed records read as absent.
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError>;

    /// Swap the record of `key` for `new` (or delete it, `None`) if it is
    /// as `expected` says; otherwise refuse with [`StoreError::StaleFence`]
    /// and change nothing. One round trip.
    ///
    /// The new record gets a fresh fence (the one in `new` is ignored),
    /// returned on success (`None` for a delete): an operator's change is a
    /// new writer, so whoever read the record before it — another operator,
    /// an owner coming back from the dead — is refused. A new record
    /// awaiting approval or completed is kept until its `expires_at`. Every
    /// swap wakes the key's waiters, whatever they wait for (an approval or
    /// a denial is a replace).
    ///
    /// With `audit`, the event is appended to the audit log (as by
    /// [`Store::append_audit`]) in the same transaction as the swap: it is
    /// in the log exactly when the swap happened, and a refused swap
    /// appends nothing.
    ///
    /// Used by the executor to park a call awaiting approval, and by
    /// [`Operator`](crate::operator::Operator) for every change it makes.
    async fn replace(
        &self,
        key: &IdempotencyKey,
        expected: Expected,
        new: Option<&Record>,
        audit: Option<&AuditEvent>,
    ) -> Result<Option<Fence>, StoreError>;

    /// Append `event` to the store's audit log (its `seq` is ignored) and
    /// return the `seq` the store gave it. The log is append-only: an
    /// event is never rewritten, and stays until it is older than the
    /// store's audit retention (see [`Store::sweep`]), whatever becomes of
    /// its record. One round trip.
    ///
    /// Sequence numbers grow with every append to a store (on Redis, to one
    /// of its slots: see `store::redis`), so among events of the same
    /// instant they say which came first.
    async fn append_audit(&self, event: &AuditEvent) -> Result<u64, StoreError>;

    /// Read up to `limit` audit events that `query` selects, oldest first
    /// (by [`at`](AuditEvent::at), then [`seq`](AuditEvent::seq)), starting
    /// where `cursor` says (`None`: from the start). Every event present
    /// for the whole read is returned exactly once over the pages; a page
    /// may hold fewer than `limit`, even none, before the last.
    async fn audit(
        &self,
        query: &AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError>;

    /// Read up to about `limit` records, starting where `cursor` says
    /// (`None`: from the start), without expired ones. Every record present
    /// for the whole scan is returned exactly once over the pages, in an
    /// order of the store's choosing; a page may hold fewer records than
    /// `limit`, even none, before the last page. For operators: no store
    /// is read whole at once. A stored record that does not decode does not
    /// fail the page: it is reported in [`ScanPage::corrupt`] instead, once
    /// over the pages like any record, and left untouched.
    async fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError>;

    /// Read up to `limit` *open* records ([`Record::is_open`]: in flight,
    /// awaiting approval, completed with an unknown outcome), newest first:
    /// by [`Record::created_at`] descending, then by key descending.
    /// Starts after the record `cursor` names ([`OpenCursor`]; `None`: from
    /// the newest). Every record open for the whole scan is returned
    /// exactly once over the pages, in that order; a record that settles
    /// or is deleted meanwhile may be left out. Expired records are left
    /// out; stored records that do not decode are reported in
    /// [`ScanPage::corrupt`], as by [`Store::scan`].
    ///
    /// What an inbox reads: the few records a person may have to act on,
    /// among the many settled ones. The SQLite, PostgreSQL and Redis stores
    /// keep an index of the open records, so a page costs what it returns,
    /// not the size of the store; the memory store reads its map once per
    /// page. The default, for a store that keeps no such index, reads the
    /// whole store with [`Store::scan`] for every page
    /// ([`scan_open_by_scanning`]).
    async fn scan_open(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        scan_open_by_scanning(self, cursor, limit).await
    }

    /// Wait until the record leaves the state `until` waits out, or
    /// `timeout` passes, and return the record as it then is (`None` when
    /// it is gone):
    ///
    /// * [`WaitFor::Completion`]: no longer in flight under a live lease —
    ///   completed, released, or its lease expired. Used by the executor
    ///   for a duplicate of a call in flight.
    /// * [`WaitFor::Decision`]: no longer awaiting a person's decision —
    ///   approved, denied (completed), in flight, or gone — still awaiting
    ///   approval when nobody decided in time. Used by the executor for
    ///   calls made with
    ///   [`wait_for_approval`](crate::executor::CallBuilder::wait_for_approval),
    ///   and by [`Operator::wait_for_decision`](crate::operator::Operator::wait_for_decision).
    ///
    /// The default polls [`Store::get`] ([`poll_wait`]: 5 ms doubling to
    /// 100 ms for a completion, to 250 ms for a decision, which may be
    /// hours away). Stores with a notification mechanism override it, with
    /// [`backend::Waiters`] as the shared body: they register for the
    /// notification *before* they read the record, so a completion or a
    /// [`Store::replace`] recording a decision that lands between the read
    /// and the sleep still wakes the waiter; a notification that is lost
    /// anyway (written by another process on SQLite, sent while a Redis or
    /// PostgreSQL listener reconnects) delays the waiter by at most the
    /// store's safety poll (100 ms for SQLite, 1 s for Redis and
    /// PostgreSQL). Waiters also re-read when the state ends by itself: the
    /// owner's lease runs out, the request lapses unanswered.
    async fn wait(
        &self,
        key: &IdempotencyKey,
        until: WaitFor,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        poll_wait(self, key, until, timeout).await
    }

    /// Delete every completed record, and every approval request, past its
    /// expiry; in-flight records are never touched. Returns how many were deleted.
    ///
    /// Also deletes the audit events older than the store's audit retention
    /// (by the store's clock; never a younger one), without counting them.
    async fn sweep(&self) -> Result<u64, StoreError>;

    /// The store's current time (the server clock for remote stores), used
    /// to judge leases and expiry the way the store does.
    async fn now(&self) -> Result<Timestamp, StoreError>;

    /// Finish the writes in progress and release what the store holds (the
    /// SQLite writer thread and file connections, Redis connections, the
    /// PostgreSQL pool). Afterwards every operation fails with
    /// [`StoreError::Closed`] instead of hanging, waiters included; closing
    /// again does nothing. Reachable through the `Arc<dyn Store>` that
    /// [`Backends::connect`](backend::Backends::connect) returns.
    ///
    /// The default does nothing, for stores that hold nothing worth
    /// closing; the conformance suite expects a closed store to refuse
    /// operations.
    async fn close(&self) {}
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
    /// [`Store::claim`], when the store can answer it here; `None` hands
    /// the claim back to [`Store::claim`]. A store may answer only some
    /// outcomes (a completed record, say) and return `None` for the rest.
    /// A completed call may be answered with its outcome alone
    /// ([`LocalClaim::Completed`]).
    fn claim_local(&self, req: &ClaimRequest<'_>) -> Option<Result<LocalClaim, StoreError>> {
        let _ = req;
        None
    }

    /// [`Store::complete`], when the store can do it here. The outcome is
    /// taken by value, so a store that keeps it in memory moves it into the
    /// record instead of copying it, and no future is boxed. `Err(outcome)`
    /// hands the outcome back: complete it with [`Store::complete`].
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
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        (**self).claim(req).await
    }
    fn fast_path(&self) -> Option<&dyn FastPath> {
        (**self).fast_path()
    }
    async fn checkpoint(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        step: &str,
        value: &Value,
        lease: Duration,
    ) -> Result<(), StoreError> {
        (**self).checkpoint(key, fence, step, value, lease).await
    }
    async fn renew(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        (**self).renew(key, fence, lease).await
    }
    async fn complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        (**self).complete(key, fence, outcome, ttl).await
    }
    async fn release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        (**self).release(key, fence).await
    }
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        (**self).get(key).await
    }
    async fn replace(
        &self,
        key: &IdempotencyKey,
        expected: Expected,
        new: Option<&Record>,
        audit: Option<&AuditEvent>,
    ) -> Result<Option<Fence>, StoreError> {
        (**self).replace(key, expected, new, audit).await
    }
    async fn append_audit(&self, event: &AuditEvent) -> Result<u64, StoreError> {
        (**self).append_audit(event).await
    }
    async fn audit(
        &self,
        query: &AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        (**self).audit(query, cursor, limit).await
    }
    async fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        (**self).scan(cursor, limit).await
    }
    async fn scan_open(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        (**self).scan_open(cursor, limit).await
    }
    async fn wait(
        &self,
        key: &IdempotencyKey,
        until: WaitFor,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        (**self).wait(key, until, timeout).await
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        (**self).sweep().await
    }
    async fn now(&self) -> Result<Timestamp, StoreError> {
        (**self).now().await
    }
    async fn close(&self) {
        (**self).close().await
    }
}
