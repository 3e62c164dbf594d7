//! An in-memory store on a sharded concurrent map, for tests and
//! single-process programs that do not need records to survive a restart.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use serde_json::Value;
use tokio::sync::Notify;

use super::transition;
use super::wait_for::WaitFor;
use super::{
    ClaimOutcome, ClaimRequest, Expected, FastPath, LocalClaim, OpenCursor, ScanPage, Store,
    StoreError,
};
use crate::audit::{self, AuditEvent, AuditPage, AuditQuery, DEFAULT_AUDIT_RETENTION};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::key::{IdempotencyKey, KeyHashBuilder};
use crate::record::{Fence, Outcome, Record};

mod expiry;
use expiry::ExpiryIndex;

/// How many shards the records are split over. A write holds one shard's
/// lock, and anything that walks the map (a scan, a close) holds one
/// shard's read lock at a time: with a million records, 256 shards keep a
/// claim's wait behind such a walk near a millisecond (8, dashmap's
/// default on two cores, made it some 33 ms). An empty store costs 32 KiB
/// for them.
const SHARDS: usize = 256;

/// Expired records removed between two yields of a sweep.
const SWEEP_BATCH: usize = 1024;

/// Records in a [`DashMap`]. Waiters are woken by a [`Notify`] per key the
/// moment the record completes, is released or is replaced (an approval, a
/// denial); there is no polling.
///
/// Records are heap allocations made on whichever thread recorded them.
/// With glibc's allocator, freeing hundreds of thousands of them on
/// another thread (dropping a large store, or sweeping one) can stall a
/// runtime worker for tens to hundreds of milliseconds at its next large
/// allocation, while glibc consolidates the freed chunks (measured in
/// `BENCHMARKS.md`). Applications that keep very many records in memory
/// may prefer jemalloc or mimalloc as their global allocator.
///
/// ```
/// use idem_runtime::store::{MemoryStore, Store};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let store = MemoryStore::new();
/// assert_eq!(store.sweep().await.unwrap(), 0);
/// # });
/// ```
#[derive(Debug)]
pub struct MemoryStore {
    records: DashMap<IdempotencyKey, Slot, KeyHashBuilder>,
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

#[derive(Debug)]
struct Slot {
    record: Arc<Record>,
    /// Woken when the record completes, is released or replaced (an
    /// approval, a denial); made by the first waiter, so calls nobody
    /// waits for allocate none.
    changed: Option<Arc<Notify>>,
}

impl Slot {
    fn wake(&self) {
        if let Some(changed) = &self.changed {
            changed.notify_waiters();
        }
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
            records: DashMap::with_hasher_and_shard_amount(KeyHashBuilder, SHARDS),
            clock,
            fences: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            audit: Mutex::default(),
            audit_retention: DEFAULT_AUDIT_RETENTION,
            expiry: Mutex::default(),
        }
    }

    /// Keep audit events for `retention` (default
    /// [`DEFAULT_AUDIT_RETENTION`]): [`Store::sweep`] deletes older ones.
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
        self.records.is_empty()
    }

    /// [`StoreError::Closed`] once [`Store::close`] was called.
    fn open(&self) -> Result<(), StoreError> {
        match self.closed.load(Ordering::SeqCst) {
            false => Ok(()),
            true => Err(StoreError::Closed {
                store: self.describe(),
            }),
        }
    }

    /// Index `record`'s expiry when a write gave it one other than
    /// `before` (the expiry it had). Called after the write is in the map,
    /// so a sweep that finds the entry finds the record too.
    fn index_expiry(&self, before: Option<Timestamp>, record: &Record) {
        if let Some(at) = record.expires_at() {
            if before != Some(at) {
                self.expiry
                    .lock()
                    .expect("not poisoned")
                    .insert(at, &record.key);
            }
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

    /// [`Store::claim`], synchronously: a duplicate of a completed call
    /// is answered under the shard's read lock; anything else takes the
    /// write lock.
    fn claim_now(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.open()?;
        let now = self.clock.now();
        if let Some(slot) = self.records.get(req.key) {
            if !slot.record.is_expired(now) {
                if let Some(answer) = transition::answer(&slot.record, req, now) {
                    return Ok(answer);
                }
            }
        }
        match self.records.entry(req.key.clone()) {
            Entry::Vacant(v) => {
                let d = transition::claim(None, req, now, || self.fresh_fence());
                if let Some(record) = d.write {
                    let slot = v.insert(Slot {
                        record: Arc::new(record),
                        changed: None,
                    });
                    self.index_expiry(None, &slot.record);
                }
                Ok(d.claim)
            }
            Entry::Occupied(mut o) => {
                let before = o.get().record.expires_at();
                let d = transition::claim(Some(o.get().record.clone()), req, now, || {
                    self.fresh_fence()
                });
                if let Some(record) = d.write {
                    o.get_mut().record = Arc::new(record);
                    self.index_expiry(before, &o.get().record);
                }
                Ok(d.claim)
            }
        }
    }

    /// Wait for the record of `key` to leave the state `what` waits out, or
    /// `timeout` to pass, woken by the slot's `changed` (every write that
    /// can end a wait wakes it: no safety poll) and when the state ends by
    /// itself (a lease runs out, a request lapses).
    async fn wait_until(
        &self,
        key: &IdempotencyKey,
        what: WaitFor,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.open()?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = match self.records.get_mut(key) {
                None => return Ok(None),
                Some(mut slot) => slot.changed.get_or_insert_with(Default::default).clone(),
            };
            // Register interest before looking, so a change between the
            // look and the await is not missed.
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // After registering: `close` sets the flag, then wakes.
            self.open()?;
            let now = self.clock.now();
            let until = match self.records.get(key) {
                None => return Ok(None),
                Some(slot) => match what.pending_until(&slot.record, now) {
                    Some(until) => until,
                    None => {
                        return Ok(Some(Record::clone(&slot.record)).filter(|r| !r.is_expired(now)))
                    }
                },
            };
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return self.get(key).await;
            }
            let nap = left.min(now.until(until));
            let _ = tokio::time::timeout(nap, notified).await;
        }
    }

    /// Change the record of an owned key in place, waking waiters when
    /// `wake`.
    fn update(
        &self,
        key: &IdempotencyKey,
        wake: bool,
        f: impl FnOnce(Option<&mut Record>) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        match self.records.get_mut(key) {
            Some(mut slot) => {
                let before = slot.record.expires_at();
                // In-flight records are not shared, so this does not clone.
                let result = f(Some(Arc::make_mut(&mut slot.record)));
                // Indexed even when `f` failed, in case it wrote first.
                self.index_expiry(before, &slot.record);
                result?;
                if wake {
                    slot.wake();
                }
                Ok(())
            }
            None => f(None),
        }
    }
}

/// Every answer is on the caller's thread: the records are in this process.
impl FastPath for MemoryStore {
    fn claim_local(&self, req: &ClaimRequest<'_>) -> Option<Result<LocalClaim, StoreError>> {
        Some(self.claim_now(req).map(LocalClaim::from))
    }

    fn complete_local(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: Outcome,
        ttl: Duration,
    ) -> Result<Result<(), StoreError>, Outcome> {
        Ok(self.open().and_then(|()| {
            let now = self.clock.now();
            self.update(key, true, |r| {
                transition::complete_in_place_owned(r, key, fence, outcome, ttl, now)
            })
        }))
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn describe(&self) -> String {
        "memory".to_owned()
    }

    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.claim_now(req)
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
        self.open()?;
        let now = self.clock.now();
        self.update(key, false, |r| {
            transition::checkpoint_in_place(r, key, fence, Some((step, value)), lease, now)
        })
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        self.open()?;
        let now = self.clock.now();
        self.update(key, false, |r| {
            transition::checkpoint_in_place(r, key, fence, None, lease, now)
        })
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.open()?;
        let now = self.clock.now();
        self.update(key, true, |r| {
            transition::complete_in_place(r, key, fence, outcome, ttl, now)
        })
    }

    async fn release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        self.open()?;
        let mut result = Ok(());
        let removed = self.records.remove_if(key, |_, slot| {
            match transition::check_owner(Some(&slot.record), key, fence) {
                Ok(_) => true,
                Err(e) => {
                    result = Err(e);
                    false
                }
            }
        });
        match removed {
            Some((_, slot)) => {
                slot.wake();
                Ok(())
            }
            None if result.is_ok() => transition::check_owner(None, key, fence),
            None => result,
        }
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.open()?;
        let now = self.clock.now();
        Ok(self
            .records
            .get(key)
            .map(|slot| Record::clone(&slot.record))
            .filter(|r| !r.is_expired(now)))
    }

    async fn replace(
        &self,
        key: &IdempotencyKey,
        expected: Expected,
        new: Option<&Record>,
        audit: Option<&AuditEvent>,
    ) -> Result<Option<Fence>, StoreError> {
        self.open()?;
        let now = self.clock.now();
        let Entry::Occupied(mut o) = self.records.entry(key.clone()) else {
            return transition::check_expected(None, key, expected, now).map(|()| None);
        };
        transition::check_expected(Some(&o.get().record), key, expected, now)?;
        // Appended while the entry is held: nobody sees the swap without
        // its event.
        if let Some(event) = audit {
            self.audit.lock().expect("not poisoned").append(event);
        }
        match new {
            None => {
                o.remove().wake();
                Ok(None)
            }
            Some(new) => {
                let fence = self.fresh_fence();
                let before = o.get().record.expires_at();
                o.get_mut().record = Arc::new(transition::replacement(key, new, fence));
                self.index_expiry(before, &o.get().record);
                o.get().wake();
                Ok(Some(fence))
            }
        }
    }

    /// Pages in key order; the cursor is the last key of the page. Each
    /// page looks at every key once (the map has no order), which suits the
    /// store's use in tests and single processes.
    async fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        self.open()?;
        let now = self.clock.now();
        let mut page: Vec<Arc<Record>> = self
            .records
            .iter()
            .filter(|slot| cursor.is_none_or(|c| slot.key().as_str() > c))
            .map(|slot| slot.record.clone())
            .collect();
        page.sort_unstable_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
        let limit = limit.max(1);
        let more = page.len() > limit;
        page.truncate(limit);
        let cursor = more
            .then(|| page.last().map(|r| r.key.as_str().to_owned()))
            .flatten();
        Ok(ScanPage {
            corrupt: Vec::new(),
            records: page
                .into_iter()
                .filter(|r| !r.is_expired(now))
                .map(Arc::unwrap_or_clone)
                .collect(),
            cursor,
        })
    }

    /// One pass over the map (no index: the records are in this
    /// process), keeping the open records after the cursor, then the
    /// newest `limit` of them.
    async fn scan_open(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        self.open()?;
        let after = cursor
            .map(|c| OpenCursor::parse_for(&self.describe(), c))
            .transpose()?;
        let now = self.clock.now();
        let mut open: Vec<Arc<Record>> = self
            .records
            .iter()
            .filter(|slot| {
                let r = &slot.record;
                r.is_open() && !r.is_expired(now) && after.as_ref().is_none_or(|a| a.precedes(r))
            })
            .map(|slot| slot.record.clone())
            .collect();
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
            cursor: open
                .last()
                .filter(|_| more)
                .map(|r| OpenCursor::after(r).to_string()),
            records: open.into_iter().map(Arc::unwrap_or_clone).collect(),
            corrupt: Vec::new(),
        })
    }

    async fn wait(
        &self,
        key: &IdempotencyKey,
        until: WaitFor,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.wait_until(key, until, timeout).await
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        self.open()?;
        let now = self.clock.now();
        self.sweep_audit(now);
        // The candidates come from the expiry index, not a walk of the
        // map: live records are not visited. Each is re-checked and
        // removed under its shard's lock, one at a time, the record freed
        // outside the lock, yielding to other tasks every batch. A key
        // indexed twice (its expiry changed) is removed once at most.
        let expired = self.expiry.lock().expect("not poisoned").take_due(now);
        let mut deleted = 0u64;
        for batch in expired.chunks(SWEEP_BATCH) {
            for key in batch {
                let removed = self
                    .records
                    .remove_if(key, |_, slot| slot.record.is_expired(now));
                deleted += u64::from(removed.is_some());
            }
            tokio::task::yield_now().await;
        }
        Ok(deleted)
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.open()?;
        Ok(self.clock.now())
    }

    async fn append_audit(&self, event: &AuditEvent) -> Result<u64, StoreError> {
        self.open()?;
        Ok(self.audit.lock().expect("not poisoned").append(event))
    }

    /// Pages by position in the log; the cursor is the `at` and `seq` of
    /// the page's last event.
    async fn audit(
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
    async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for slot in self.records.iter() {
            slot.wake();
        }
    }
}

#[cfg(test)]
mod tests;
