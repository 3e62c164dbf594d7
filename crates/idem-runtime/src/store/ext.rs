//! The typed calls on any [`Store`], written once on top of
//! [`Store::call`].

use std::future::Future;
use std::time::Duration;

use serde_json::Value;

use super::operation::{Answer, OpKind, Operation};
use super::{ClaimOutcome, ClaimRequest, Expected, ScanPage, Store, StoreError, WaitFor};
use crate::audit::{AuditEvent, AuditPage, AuditQuery};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::{Fence, Outcome, Record};

/// The error for a store (or a layer in front of it) that answered `kind`
/// with the wrong kind of answer: the caller refuses, as for a store it
/// cannot reach, rather than act on a made-up answer.
fn mismatch<S: Store + ?Sized>(store: &S, kind: OpKind, answer: &Answer) -> StoreError {
    StoreError::Unavailable {
        store: store.describe(),
        cause: format!(
            "{} answered `{kind}` with {} (a layer in front of it, such as an interceptor's hook, may have answered for it)",
            store.describe(),
            answer.name()
        )
        .into(),
    }
}

/// Runs `$op` on `$store` and takes the answer of the `$variant` it must
/// be, or reports a mismatch.
macro_rules! expect {
    (@value $value:expr) => { $value };
    (@value) => { () };
    ($store:expr, $op:expr, $variant:ident $(($bind:ident) => $value:expr)?) => {{
        let op = $op;
        let kind = op.kind();
        match $store.call(op).await? {
            Answer::$variant $(($bind))? => Ok(expect!(@value $($value)?)),
            other => Err(mismatch($store, kind, &other)),
        }
    }};
}

/// The store's operations as typed calls: each builds its [`Operation`],
/// passes it to [`Store::call`] and unpacks the [`Answer`]. Implemented
/// for every store; a store implements [`Store`], never this.
///
/// What each call does is said on its [`Operation`] variant and in the
/// [store module's docs](super).
pub trait StoreExt: Store {
    /// [`Operation::Claim`]: try to own `req.key`. One round trip.
    ///
    /// * No record, or a completed record past its expiry: a new in-flight
    ///   record with a fresh fence → [`ClaimOutcome::Acquired`].
    /// * A record for another tool, or (when `check_fingerprint`) another
    ///   fingerprint → [`ClaimOutcome::KeyReused`]; nothing changes.
    /// * In flight with a live lease → [`ClaimOutcome::InFlight`].
    /// * In flight with an expired lease → the record gets a fresh fence and
    ///   lease, keeps its steps → [`ClaimOutcome::Acquired`] with a
    ///   [`Takeover`](super::Takeover).
    /// * Completed → [`ClaimOutcome::Completed`].
    /// * Awaiting approval, not yet approved → [`ClaimOutcome::AwaitingApproval`];
    ///   nothing changes.
    /// * Approved, and the request's fingerprint is the record's → in flight
    ///   under a fresh fence, keeping the steps (the approval among them) →
    ///   [`ClaimOutcome::Acquired`] without a takeover. With another
    ///   fingerprint (a natural key does not check it) →
    ///   [`ClaimOutcome::AwaitingApproval`], nothing changes: only the
    ///   arguments a person approved ever run under an approval.
    fn claim<'a>(
        &'a self,
        req: &'a ClaimRequest<'a>,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send + 'a {
        async move { expect!(self, Operation::Claim(req), Claim(claim) => claim) }
    }

    /// [`Operation::Checkpoint`]: record that step `step` of an in-flight
    /// call finished with `value`, and extend the lease by `lease` from
    /// now. One round trip.
    fn checkpoint<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fence: Fence,
        step: &'a str,
        value: &'a Value,
        lease: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        let op = Operation::Checkpoint {
            key,
            fence,
            step,
            value,
            lease,
        };
        async move { expect!(self, op, Done) }
    }

    /// [`Operation::Renew`]: extend the lease of the in-flight record
    /// owned by `fence` to `lease` from now. One round trip, nothing else
    /// changes. Refused with [`StoreError::StaleFence`] when `fence` no
    /// longer owns the record: the owner then knows it was superseded and
    /// stops.
    ///
    /// The executor calls it every third of the lease while the owner
    /// works.
    fn renew<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        async move { expect!(self, Operation::Renew { key, fence, lease }, Done) }
    }

    /// [`Operation::Complete`]: complete an in-flight call with `outcome`,
    /// kept for `ttl`. One round trip. Refused with
    /// [`StoreError::StaleFence`] unless `fence` owns the key and the
    /// record is in flight: a completed outcome is never overwritten.
    fn complete<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fence: Fence,
        outcome: &'a Outcome,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        let op = Operation::Complete {
            key,
            fence,
            outcome,
            ttl,
        };
        async move { expect!(self, op, Done) }
    }

    /// [`Operation::Release`]: delete an in-flight record owned by
    /// `fence`: the call is known not to have taken effect and may run
    /// again later.
    fn release<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        fence: Fence,
    ) -> impl Future<Output = Result<(), StoreError>> + Send + 'a {
        async move { expect!(self, Operation::Release { key, fence }, Done) }
    }

    /// [`Operation::Get`]: read a record. Expired completed records read
    /// as absent.
    fn get<'a>(
        &'a self,
        key: &'a IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send + 'a {
        async move { expect!(self, Operation::Get { key }, Record(record) => record) }
    }

    /// [`Operation::Replace`]: swap the record of `key` for `new` (or
    /// delete it, `None`) if it is as `expected` says; otherwise refuse
    /// with [`StoreError::StaleFence`] and change nothing. One round trip.
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
    /// [`StoreExt::append_audit`]) in the same transaction as the swap: it
    /// is in the log exactly when the swap happened, and a refused swap
    /// appends nothing.
    fn replace<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        expected: Expected,
        new: Option<&'a Record>,
        audit: Option<&'a AuditEvent>,
    ) -> impl Future<Output = Result<Option<Fence>, StoreError>> + Send + 'a {
        let op = Operation::Replace {
            key,
            expected,
            new,
            audit,
        };
        async move { expect!(self, op, Replaced(fence) => fence) }
    }

    /// [`Operation::AppendAudit`]: append `event` to the store's audit log
    /// (its `seq` is ignored) and return the `seq` the store gave it. The
    /// log is append-only: an event is never rewritten, and stays until it
    /// is older than the store's audit retention (see
    /// [`StoreExt::sweep`]), whatever becomes of its record. One round
    /// trip.
    ///
    /// Sequence numbers grow with every append to a store (on Redis, to one
    /// of its slots), so among events of the same instant they say which
    /// came first.
    fn append_audit<'a>(
        &'a self,
        event: &'a AuditEvent,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send + 'a {
        async move { expect!(self, Operation::AppendAudit { event }, Appended(seq) => seq) }
    }

    /// [`Operation::Audit`]: read up to `limit` audit events that `query`
    /// selects, oldest first (by [`at`](AuditEvent::at), then
    /// [`seq`](AuditEvent::seq)), starting where `cursor` says (`None`:
    /// from the start). Every event present for the whole read is returned
    /// exactly once over the pages; a page may hold fewer than `limit`,
    /// even none, before the last.
    fn audit<'a>(
        &'a self,
        query: &'a AuditQuery,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> impl Future<Output = Result<AuditPage, StoreError>> + Send + 'a {
        let op = Operation::Audit {
            query,
            cursor,
            limit,
        };
        async move { expect!(self, op, Audit(page) => page) }
    }

    /// [`Operation::Scan`]: read up to about `limit` records, starting
    /// where `cursor` says (`None`: from the start), without expired ones.
    /// Every record present for the whole scan is returned exactly once
    /// over the pages, in an order of the store's choosing; a page may hold
    /// fewer records than `limit`, even none, before the last page. For
    /// operators: no store is read whole at once. A stored record that does
    /// not decode does not fail the page: it is reported in
    /// [`ScanPage::corrupt`] instead, once over the pages like any record,
    /// and left untouched.
    fn scan<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> impl Future<Output = Result<ScanPage, StoreError>> + Send + 'a {
        async move { expect!(self, Operation::Scan { cursor, limit }, Scan(page) => page) }
    }

    /// [`Operation::ScanOpen`]: read up to `limit` *open* records
    /// ([`Record::is_open`]: in flight, awaiting approval, completed with
    /// an unknown outcome), newest first: by [`Record::created_at`]
    /// descending, then by key descending. Starts after the record
    /// `cursor` names ([`OpenCursor`](super::OpenCursor); `None`: from the
    /// newest). Every record open for the whole scan is returned exactly
    /// once over the pages, in that order; a record that settles or is
    /// deleted meanwhile may be left out. Expired records are left out;
    /// stored records that do not decode are reported in
    /// [`ScanPage::corrupt`], as by [`StoreExt::scan`].
    ///
    /// What an inbox reads: the few records a person may have to act on,
    /// among the many settled ones. The SQLite, PostgreSQL and Redis stores
    /// keep an index of the open records, so a page costs what it returns,
    /// not the size of the store; the memory store reads its map once per
    /// page. A store that keeps no such index answers with
    /// [`Operation::by_default`], which reads the whole store for every
    /// page ([`scan_open_by_scanning`](super::scan_open_by_scanning)).
    fn scan_open<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> impl Future<Output = Result<ScanPage, StoreError>> + Send + 'a {
        async move { expect!(self, Operation::ScanOpen { cursor, limit }, Scan(page) => page) }
    }

    /// [`Operation::Wait`]: wait until the record leaves the state `until`
    /// waits out, or `timeout` passes, and return the record as it then is
    /// (`None` when it is gone):
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
    /// A store with no notification mechanism answers with
    /// [`Operation::by_default`], which polls [`StoreExt::get`]
    /// ([`poll_wait`](super::poll_wait): 5 ms doubling to 100 ms for a
    /// completion, to 250 ms for a decision, which may be hours away).
    /// Stores with one use [`Waiters`](super::backend::Waiters): they
    /// register for the notification *before* they read the record, so a
    /// completion or a replace recording a decision that lands between the
    /// read and the sleep still wakes the waiter; a notification that is
    /// lost anyway (written by another process on SQLite, sent while a
    /// Redis or PostgreSQL listener reconnects) delays the waiter by at most
    /// the store's safety poll (100 ms for SQLite, 1 s for Redis and
    /// PostgreSQL). Waiters also re-read when the state ends by itself: the
    /// owner's lease runs out, the request lapses unanswered.
    fn wait<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        until: WaitFor,
        timeout: Duration,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send + 'a {
        let op = Operation::Wait {
            key,
            until,
            timeout,
        };
        async move { expect!(self, op, Record(record) => record) }
    }

    /// [`Operation::Sweep`]: delete every completed record, and every
    /// approval request, past its expiry; in-flight records are never
    /// touched. Returns how many were deleted.
    ///
    /// Also deletes the audit events older than the store's audit
    /// retention (by the store's clock; never a younger one), without
    /// counting them.
    fn sweep(&self) -> impl Future<Output = Result<u64, StoreError>> + Send + '_ {
        async move { expect!(self, Operation::Sweep, Swept(n) => n) }
    }

    /// [`Operation::Now`]: the store's current time (the server clock for
    /// remote stores), used to judge leases and expiry the way the store
    /// does.
    fn now(&self) -> impl Future<Output = Result<Timestamp, StoreError>> + Send + '_ {
        async move { expect!(self, Operation::Now, Now(now) => now) }
    }

    /// [`Operation::Close`]: finish the writes in progress and release
    /// what the store holds (the SQLite writer thread and file
    /// connections, Redis connections, the PostgreSQL pool). Afterwards
    /// every operation fails with [`StoreError::Closed`] instead of
    /// hanging, waiters included; closing again does nothing. Reachable
    /// through the `Arc<dyn Store>` that
    /// [`Backends::connect`](super::backend::Backends::connect) returns.
    ///
    /// A store that holds nothing worth closing answers with
    /// [`Operation::by_default`], which does nothing; the conformance suite
    /// expects a closed store to refuse operations.
    fn close(&self) -> impl Future<Output = ()> + Send + '_ {
        // A close has no one to report a failure to: it returns nothing.
        async move {
            let _ = self.call(Operation::Close).await;
        }
    }
}

impl<S: Store + ?Sized> StoreExt for S {}
