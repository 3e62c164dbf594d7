//! An in-memory store on a sharded concurrent map, for tests and
//! single-process programs that do not need records to survive a restart.
//!
//! How the parts fit: `map.rs` holds one boxed entry per key in sharded
//! hash tables; an entry's record is compact (`lean.rs`) in the common
//! shape — no steps, no audit entries, in flight or completed — and whole
//! otherwise. The calls an executor makes (a claim and a duplicate in
//! `claim.rs`, a completion, a lease renewal) read and write the compact
//! form directly; every other operation builds the record, decides with
//! the same [`transition`] functions as the other stores, and stores the
//! result. `expiry.rs` indexes the records by when they lapse, for the
//! sweep.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::transition;
use super::wait_for::WaitFor;
use super::{
    Answer, ClaimRequest, Expected, FastPath, LocalClaim, OpenCursor, Operation, ScanPage, Store,
    StoreError,
};
use crate::audit::{self, AuditEvent, AuditPage, AuditQuery, DEFAULT_AUDIT_RETENTION};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::key::{self, IdempotencyKey};
use crate::record::{Fence, Outcome, Record};
use crate::store::StoreExt;

mod claim;
mod expiry;
mod lean;
mod map;
use expiry::ExpiryIndex;
use map::{nobody_owns, Body, Entry, Id, Map};

/// Expired records removed between two yields of a sweep.
const SWEEP_BATCH: usize = 1024;

/// Records in sharded hash tables (256 of them: an empty store costs
/// 12 KiB for them). Waiters are woken by a [`Notify`](tokio::sync::Notify)
/// per key the moment the record completes, is released or is replaced
/// (an approval, a denial); there is no polling.
///
/// A completed record of the common shape (no steps, a fingerprint that is
/// a digest) costs about 330 bytes, its output and call info included
/// (`BENCHMARKS.md`, "A record's memory").
///
/// Records are heap allocations made on whichever thread recorded them.
/// With glibc's allocator, freeing hundreds of thousands of them on
/// another thread (dropping a large store, or sweeping one) can stall a
/// runtime worker for tens to hundreds of milliseconds at its next large
/// allocation, while glibc consolidates the freed chunks (measured in
/// `BENCHMARKS.md`). A sweep frees them outside the map's locks, a batch
/// at a time. Applications that keep very many records in memory may
/// prefer jemalloc or mimalloc as their global allocator.
///
/// ```
/// use idem_runtime::store::{MemoryStore, StoreExt};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// assert_eq!(store.sweep().await.unwrap(), 0);
/// # });
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    records: Map,
    clock: Arc<dyn Clock>,
    fences: AtomicU64,
    closed: AtomicBool,
    audit: Mutex<AuditLog>,
    audit_retention: Duration,
    /// The keys by expiry, so a sweep finds the expired records without
    /// visiting the live ones.
    expiry: Mutex<ExpiryIndex>,
}

/// The audit log of a [`MemoryStore`], in the order it is read.
#[derive(Debug, Default)]
struct AuditLog {
    /// The seq of the last event appended.
    last_seq: u64,
    events: BTreeMap<(Timestamp, u64), AuditEvent>,
}

impl AuditLog {
    fn append(&mut self, event: &AuditEvent) -> u64 {
        self.last_seq += 1;
        let seq = self.last_seq;
        let event = AuditEvent {
            seq: Some(seq),
            ..event.clone()
        };
        self.events.insert((event.at, seq), event);
        seq
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(SystemClock))
    }

    /// An empty store on `clock` (a [`crate::clock::ManualClock`] in tests).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryStore {
            records: Map::new(),
            clock,
            fences: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            audit: Mutex::default(),
            audit_retention: DEFAULT_AUDIT_RETENTION,
            expiry: Mutex::default(),
        }
    }

    /// Keep audit events for `retention` (default
    /// [`DEFAULT_AUDIT_RETENTION`]): [`StoreExt::sweep`] deletes older ones.
    pub fn audit_retention(mut self, retention: Duration) -> Self {
        self.audit_retention = retention;
        self
    }

    /// How many records are held (in flight, completed, or expired but not
    /// yet swept).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the store holds no records.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`StoreError::Closed`] once [`StoreExt::close`] was called.
    fn open(&self) -> Result<(), StoreError> {
        match self.closed.load(Ordering::SeqCst) {
            false => Ok(()),
            true => Err(StoreError::Closed {
                store: self.describe(),
            }),
        }
    }

    /// Index the expiry `after` of the key whose first 64 bits are `bits`
    /// when a write gave its record one other than `before` (the expiry
    /// it had). Called after the write is in the map, so a sweep that
    /// finds the entry finds the record too.
    fn index_expiry(&self, before: Option<Timestamp>, after: Option<Timestamp>, bits: u64) {
        if let Some(at) = after.filter(|&at| before != Some(at)) {
            self.expiry.lock().expect("not poisoned").insert(at, bits);
        }
    }

    fn fresh_fence(&self) -> Fence {
        // Unique across the store's life, so a fence is never reused for a
        // key even after the key was released and claimed again.
        Fence(self.fences.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Delete the audit events older than the retention at `now`.
    fn sweep_audit(&self, now: Timestamp) {
        if let Some(cutoff) = audit::retention_cutoff(now, self.audit_retention) {
            let mut log = self.audit.lock().expect("not poisoned");
            let kept = log.events.split_off(&(cutoff, 0));
            log.events = kept;
        }
    }

    /// Change the record of `key`, in flight and owned by `fence`, with
    /// `write` (given the time), waking the waiters when `wake`.
    fn write_owned(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        wake: bool,
        write: impl FnOnce(&mut Body, Timestamp) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.open()?;
        let now = self.clock.now();
        let id = Id::of(key);
        let mut shard = self.records.write(&id);
        let entry = shard.get_mut(&id).ok_or_else(|| nobody_owns(key, fence))?;
        entry.body.check_owner(key, fence)?;
        let before = entry.body.expires_at();
        write(&mut entry.body, now)?;
        let after = entry.body.expires_at();
        if wake {
            entry.wake();
        }
        drop(shard);
        self.index_expiry(before, after, id.bits);
        Ok(())
    }

    /// [`StoreExt::complete`], with the outcome moved into the record.
    fn complete_now(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.write_owned(key, fence, true, |body, now| match body {
            Body::Lean(lean) => {
                lean.complete(outcome, ttl, now);
                Ok(())
            }
            Body::Full(record) => transition::complete_in_place_owned(
                Some(Arc::make_mut(record)),
                key,
                fence,
                outcome,
                ttl,
                now,
            ),
        })
    }

    /// Wait for the record of `key` to leave the state `what` waits out, or
    /// `timeout` to pass, woken by the entry's `changed` (every write that
    /// can end a wait wakes it: no safety poll) and when the state ends by
    /// itself (a lease runs out, a request lapses).
    async fn wait_until(
        &self,
        key: &IdempotencyKey,
        what: WaitFor,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.open()?;
        let id = Id::of(key);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = match self.records.write(&id).get_mut(&id) {
                None => return Ok(None),
                Some(entry) => entry.changed.get_or_insert_with(Default::default).clone(),
            };
            // Register interest before looking, so a change between the
            // look and the await is not missed.
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // After registering: `close` sets the flag, then wakes.
            self.open()?;
            let now = self.clock.now();
            let record = match self.records.read(&id).get(&id) {
                None => return Ok(None),
                Some(entry) => entry.body.to_record(key.clone()),
            };
            let Some(until) = what.pending_until(&record, now) else {
                return Ok(Some(record).filter(|r| !r.is_expired(now)));
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return self.get(key).await;
            }
            let nap = left.min(now.until(until));
            let _ = tokio::time::timeout(nap, notified).await;
        }
    }
}

/// Every answer is on the caller's thread: the records are in this process.
impl FastPath for MemoryStore {
    fn claim_local(&self, req: &ClaimRequest<'_>) -> Option<Result<LocalClaim, StoreError>> {
        Some(self.claim_now(req))
    }

    fn complete_local(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: Outcome,
        ttl: Duration,
    ) -> Result<Result<(), StoreError>, Outcome> {
        Ok(self.complete_now(key, fence, outcome, ttl))
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn describe(&self) -> String {
        "memory".to_owned()
    }

    fn fast_path(&self) -> Option<&dyn FastPath> {
        Some(self)
    }

    async fn call(&self, op: Operation<'_>) -> Result<Answer, StoreError> {
        Ok(match op {
            Operation::Claim(req) => Answer::Claim(self.claim_now(req)?),
            Operation::Checkpoint {
                key,
                fence,
                step,
                value,
                lease,
            } => {
                self.checkpoint_now(key, fence, step, value, lease)?;
                Answer::Done
            }
            Operation::Renew { key, fence, lease } => {
                self.renew_now(key, fence, lease)?;
                Answer::Done
            }
            Operation::Complete {
                key,
                fence,
                outcome,
                ttl,
            } => {
                self.complete_now(key, fence, outcome.clone(), ttl)?;
                Answer::Done
            }
            Operation::Release { key, fence } => {
                self.release_now(key, fence)?;
                Answer::Done
            }
            Operation::Get { key } => Answer::Record(self.get_now(key)?),
            Operation::Replace {
                key,
                expected,
                new,
                audit,
            } => Answer::Replaced(self.replace_now(key, expected, new, audit)?),
            Operation::AppendAudit { event } => {
                self.open()?;
                Answer::Appended(self.audit.lock().expect("not poisoned").append(event))
            }
            Operation::Audit {
                query,
                cursor,
                limit,
            } => Answer::Audit(self.audit_page(query, cursor, limit)?),
            Operation::Scan { cursor, limit } => Answer::Scan(self.scan_now(cursor, limit)?),
            Operation::ScanOpen { cursor, limit } => {
                Answer::Scan(self.scan_open_now(cursor, limit)?)
            }
            Operation::Wait {
                key,
                until,
                timeout,
            } => Answer::Record(self.wait_until(key, until, timeout).await?),
            Operation::Sweep => Answer::Swept(self.sweep_due().await?),
            Operation::Now => {
                self.open()?;
                Answer::Now(self.clock.now())
            }
            Operation::Close => {
                self.close_now();
                Answer::Done
            }
        })
    }
}

/// The operations [`Store::call`] answers, each on the map.
impl MemoryStore {
    /// A step turns a compact record whole (it now has steps).
    fn checkpoint_now(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        step: &str,
        value: &Value,
        lease: Duration,
    ) -> Result<(), StoreError> {
        self.write_owned(key, fence, false, |body, now| {
            let step = Some((step, value));
            match body {
                Body::Lean(lean) => {
                    let mut record = lean.to_record(key.clone());
                    transition::checkpoint_in_place(
                        Some(&mut record),
                        key,
                        fence,
                        step,
                        lease,
                        now,
                    )?;
                    *body = Body::Full(Arc::new(record));
                    Ok(())
                }
                Body::Full(record) => transition::checkpoint_in_place(
                    Some(Arc::make_mut(record)),
                    key,
                    fence,
                    step,
                    lease,
                    now,
                ),
            }
        })
    }

    fn renew_now(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        self.write_owned(key, fence, false, |body, now| match body {
            Body::Lean(lean) => {
                lean.renew(lease, now);
                Ok(())
            }
            Body::Full(record) => transition::checkpoint_in_place(
                Some(Arc::make_mut(record)),
                key,
                fence,
                None,
                lease,
                now,
            ),
        })
    }

    fn release_now(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        self.open()?;
        let id = Id::of(key);
        let mut shard = self.records.write(&id);
        match shard.get(&id) {
            None => return Err(nobody_owns(key, fence)),
            Some(entry) => entry.body.check_owner(key, fence)?,
        }
        let removed = shard.remove(&id);
        drop(shard);
        if let Some(entry) = removed {
            entry.wake();
        }
        Ok(())
    }

    fn get_now(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.open()?;
        let now = self.clock.now();
        let id = Id::of(key);
        Ok(self
            .records
            .read(&id)
            .get(&id)
            .filter(|entry| !entry.body.is_expired(now))
            .map(|entry| entry.body.to_record(key.clone())))
    }

    fn replace_now(
        &self,
        key: &IdempotencyKey,
        expected: Expected,
        new: Option<&Record>,
        audit: Option<&AuditEvent>,
    ) -> Result<Option<Fence>, StoreError> {
        self.open()?;
        let now = self.clock.now();
        let id = Id::of(key);
        let mut shard = self.records.write(&id);
        let Some(entry) = shard.get_mut(&id) else {
            return transition::check_expected(None, key, expected, now).map(|()| None);
        };
        let current = entry.body.to_arc(key.clone());
        transition::check_expected(Some(&current), key, expected, now)?;
        // Appended while the entry is held: nobody sees the swap without
        // its event.
        if let Some(event) = audit {
            self.audit.lock().expect("not poisoned").append(event);
        }
        let Some(new) = new else {
            let removed = shard.remove(&id);
            drop(shard);
            if let Some(entry) = removed {
                entry.wake();
            }
            return Ok(None);
        };
        let fence = self.fresh_fence();
        let before = entry.body.expires_at();
        entry.body = Body::of(transition::replacement(key, new, fence));
        let after = entry.body.expires_at();
        entry.wake();
        drop(shard);
        self.index_expiry(before, after, id.bits);
        Ok(Some(fence))
    }

    /// Pages in key order; the cursor is the last key of the page. Each
    /// page looks at every key once (the map has no order), which suits the
    /// store's use in tests and single processes; only the page's records
    /// are built.
    fn scan_now(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        self.open()?;
        let now = self.clock.now();
        // Digests order as the keys' text does.
        let mut keys: Vec<[u8; 32]> = Vec::new();
        self.records.for_each_shard(|shard| {
            keys.extend(
                shard.iter().map(|entry| *entry.digest()).filter(|digest| {
                    cursor.is_none_or(|c| key::cmp_digest_with(digest, c).is_gt())
                }),
            );
        });
        let limit = limit.max(1);
        let more = keys.len() > limit;
        if more {
            keys.select_nth_unstable(limit - 1);
            keys.truncate(limit);
        }
        keys.sort_unstable();
        let cursor = more
            .then(|| {
                keys.last()
                    .map(|d| IdempotencyKey::from_digest(d).as_str().to_owned())
            })
            .flatten();
        let records = keys
            .iter()
            .filter_map(|digest| {
                let id = Id::of_digest(digest);
                let shard = self.records.read(&id);
                let entry = shard.get(&id).filter(|e| !e.body.is_expired(now))?;
                Some(entry.body.to_record(entry.key()))
            })
            .collect();
        Ok(ScanPage {
            corrupt: Vec::new(),
            records,
            cursor,
        })
    }

    /// One pass over the map (no index: the records are in this
    /// process), keeping the open records after the cursor, then the
    /// newest `limit` of them.
    fn scan_open_now(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        self.open()?;
        let after = cursor
            .map(|c| OpenCursor::parse_for(&self.describe(), c))
            .transpose()?;
        let after_digest = after.as_ref().map(|a| a.key.digest());
        let now = self.clock.now();
        let mut open: Vec<Arc<Record>> = Vec::new();
        self.records.for_each_shard(|shard| {
            for entry in shard.iter() {
                match &entry.body {
                    Body::Lean(lean) => {
                        // Keys order as their digests do.
                        let wanted = lean.is_open()
                            && !lean.is_expired(now)
                            && after.as_ref().zip(after_digest).is_none_or(|(a, d)| {
                                (lean.created_at(), entry.digest()) < (a.created_at, &d)
                            });
                        if wanted {
                            open.push(Arc::new(lean.to_record(entry.key())));
                        }
                    }
                    Body::Full(r) => {
                        if r.is_open()
                            && !r.is_expired(now)
                            && after.as_ref().is_none_or(|a| a.precedes(r))
                        {
                            open.push(r.clone());
                        }
                    }
                }
            }
        });
        let newest_first =
            |a: &Arc<Record>, b: &Arc<Record>| (b.created_at, &b.key).cmp(&(a.created_at, &a.key));
        let limit = limit.max(1);
        let more = open.len() > limit;
        if more {
            open.select_nth_unstable_by(limit - 1, newest_first);
            open.truncate(limit);
        }
        open.sort_unstable_by(newest_first);
        Ok(ScanPage {
            cursor: OpenCursor::ending(open.last().map(Arc::as_ref), more),
            records: open.into_iter().map(Arc::unwrap_or_clone).collect(),
            corrupt: Vec::new(),
        })
    }

    async fn sweep_due(&self) -> Result<u64, StoreError> {
        self.open()?;
        let now = self.clock.now();
        self.sweep_audit(now);
        // The candidates come from the expiry index, not a walk of the
        // map: live records are not visited. A batch locks each shard
        // once, re-checks each candidate and removes it if it is expired
        // then (a key indexed twice is removed once at most); the records
        // are freed after the locks are released, and other tasks run
        // between batches.
        let due = self.expiry.lock().expect("not poisoned").take_due(now);
        let mut due = due.into_bits();
        let mut batch = Vec::with_capacity(SWEEP_BATCH);
        let mut deleted = 0u64;
        loop {
            batch.clear();
            batch.extend(due.by_ref().take(SWEEP_BATCH));
            if batch.is_empty() {
                break;
            }
            let removed = self.records.remove_expired(&mut batch, now);
            deleted += removed.len() as u64;
            drop(removed);
            tokio::task::yield_now().await;
        }
        Ok(deleted)
    }

    /// Pages by position in the log; the cursor is the `at` and `seq` of
    /// the page's last event.
    fn audit_page(
        &self,
        query: &AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        use std::ops::Bound;
        self.open()?;
        let start = match cursor {
            None => Bound::Unbounded,
            Some(c) => Bound::Excluded(audit::parse_position_cursor(c).ok_or_else(|| {
                StoreError::BadCursor {
                    store: self.describe(),
                    cursor: c.to_owned(),
                    kind: "audit",
                }
            })?),
        };
        let limit = limit.clamp(1, audit::MAX_AUDIT_PAGE);
        let log = self.audit.lock().expect("not poisoned");
        let events: Vec<AuditEvent> = log
            .events
            .range((start, Bound::Unbounded))
            .map(|(_, event)| event)
            .filter(|event| query.matches(event))
            .take(limit + 1)
            .cloned()
            .collect();
        Ok(audit::page_of(events, limit))
    }

    /// Refuse every later operation with [`StoreError::Closed`] and wake the
    /// waiters, which then fail the same way. The records stay in memory
    /// until the store is dropped.
    fn close_now(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.records
            .for_each_shard(|shard| shard.iter().for_each(Entry::wake));
    }
}

#[cfg(test)]
mod lean_tests;
#[cfg(test)]
pub(super) mod tests;
