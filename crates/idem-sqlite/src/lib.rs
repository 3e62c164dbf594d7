//! The SQLite store: the embedded default. One file, survives restarts, safe
//! for several processes on one machine.
//!
//! # How it works
//!
//! * The database is in WAL mode with a busy timeout, and every write is a
//!   `BEGIN IMMEDIATE` transaction that reads the row, decides with the pure
//!   state machine in [`transition`], and writes it back.
//!   SQLite's file lock serialises the writers of every process sharing the
//!   file; fences come from a counter in the same file, so they are unique
//!   per key forever, whichever process hands them out.
//! * All writes of one store go through one writer thread, which takes every
//!   request that is waiting when it starts a transaction and commits them
//!   together (*group commit*): under load many claims and completions share
//!   one fsync. A caller is answered only after the commit is durable; if
//!   the commit fails, every caller of the batch gets the error. Requests
//!   are decided in order, each seeing the writes of the ones before it. A
//!   request SQLite refuses (the file is full) fails alone: the others are
//!   decided again without it, instead of failing with it.
//! * Reads (a duplicate's claim, [`StoreExt::get`](idem_runtime::store::StoreExt::get)) never wait for a commit:
//!   in WAL mode a reader sees the last commit of any process without
//!   taking the write lock. They run on the caller's thread, from a small
//!   pool of connections with cached prepared statements, so a duplicate
//!   of a completed call is answered by [`FastPath::claim_local`] without a
//!   thread hop and writes nothing. The last completed records read are
//!   kept decoded ([`SqliteOptions::record_cache`]): the row is still
//!   read every time, but when its bytes are those decoded last time the
//!   decoded record is answered again. Only a read that meets a lock (the
//!   file recovering after a crash) goes to a blocking thread and waits
//!   up to the busy timeout. No connection keeps a read transaction open
//!   between reads, so checkpoints are never starved.
//! * With [`Synchronous::Full`] (the default) a record is on disk, and
//!   survives power loss, before the call that wrote it returns — except
//!   an `idempotent_write`'s claim ([`ClaimRequest::durable`] `false`),
//!   whose loss only means the call runs again with the same key. A first
//!   call of that class pays one fsync (its outcome, before it is
//!   acknowledged); a `non_idempotent_write` or `irreversible` call pays
//!   one for its claim, one for its started mark and one for its outcome.
//!   A batch of claims that need not be durable commits with
//!   `synchronous=NORMAL`; a batch with anything else in it fsyncs.
//!   [`Synchronous::Normal`] skips the fsync on every commit: still safe
//!   against a crash of the process, but the last transactions may be lost
//!   on power failure.
//! * Waiters in this process ([`StoreExt::wait`](idem_runtime::store::StoreExt::wait), for a completion or a decision)
//!   are woken the moment the writer commits a completion, a release or a
//!   replace (an approval, a denial); a writer in *another* process (an
//!   operator's `idem approve`) cannot notify them, so waiters also re-read
//!   the record with a back-off from 5 ms to [`CROSS_PROCESS_POLL`].
//! * [`StoreExt::scan_open`](idem_runtime::store::StoreExt::scan_open) pages through a partial index of the open
//!   records (column `open_at`, set by the writer with every record it
//!   writes), newest first: a page reads about as many rows as it returns,
//!   however many settled records the file holds.
//! * [`StoreExt::sweep`](idem_runtime::store::StoreExt::sweep) deletes expired records 100 at a time, one write
//!   transaction per batch, so writes queued meanwhile go in between
//!   the batches instead of waiting for a million rows to go. Between
//!   batches it waits for the checkpointer to copy what it wrote, so the
//!   WAL stays short and callers never wait for a long checkpoint.
//! * Checkpoints (copying the WAL back into the database file) run on a
//!   thread of their own, not on the writer's commit path: once the WAL
//!   holds [`CHECKPOINT_PAGES`] pages the writer asks the checkpointer,
//!   whose `PASSIVE` checkpoints never block the writer or the readers.
//!   Under a steady stream of writes such a checkpoint never reaches the
//!   end of the WAL, which therefore could not start over; past
//!   [`WAL_LIMIT_PAGES`] the writer checkpoints the rest itself, once, so
//!   the WAL stays bounded.

mod backend;
mod checkpointer;
mod codec;
mod connection;
mod error;
mod options;
mod reader;
mod schema;
mod shared;
#[cfg(test)]
mod tests;
mod writer;

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use idem_runtime::audit::{self, AuditEvent, AuditPage, AuditQuery};
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{Fence, Outcome, Record};
use idem_runtime::store::transition;
use idem_runtime::store::{
    scan_open_by_scanning, ClaimOutcome, ClaimRequest, Expected, FastPath, LocalClaim, OpenCursor,
    ScanPage, Store, StoreError,
};
use idem_runtime::store::{Answer, Operation, WaitFor};

pub use backend::{Sqlite, BACKEND};
pub use checkpointer::{CHECKPOINT_PAGES, SWEEP_CHECKPOINT_WAIT, WAL_LIMIT_PAGES};
pub use options::{SqliteOptions, Synchronous, DEFAULT_RECORD_CACHE};
pub use schema::{OLDEST_READABLE, SCHEMA_VERSION};
pub use shared::CROSS_PROCESS_POLL;

use reader::{audit_page, scan, scan_open};
use schema::{AUDIT_SINCE, OPEN_INDEX_SINCE};
use shared::Shared;
use writer::{Job, Op, SWEEP_BATCH};

/// Records in one SQLite file. See the [module docs](self).
///
/// ```
/// use idem_runtime::store::StoreExt;
/// use idem_sqlite::SqliteStore;
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let dir = std::env::temp_dir().join(format!("idem-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let store = SqliteStore::open(dir.join("idem.db")).await.unwrap();
/// assert_eq!(store.sweep().await.unwrap(), 0);
/// # drop(store);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # });
/// ```
pub struct SqliteStore {
    shared: Arc<Shared>,
    /// The schema version found on opening (`None`: this store created it).
    schema_found: Option<u32>,
    /// The only sender to the writer thread; `None` once closed.
    writer: Mutex<Option<mpsc::Sender<Job>>>,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

/// Claims answered from a read on this thread; completions always go to
/// the writer (they must be durable before they are answered).
impl FastPath for SqliteStore {
    /// Answers a claim that finds a completed call, an approval still to
    /// be decided or a key reused, from a read on this thread (see
    /// [`SqliteStore`'s module docs](self)). `None` for every claim that
    /// writes, and for a call in flight: the executor then shares one
    /// claim among this process's callers and waits for the owner.
    fn claim_local(&self, req: &ClaimRequest<'_>) -> Option<Result<LocalClaim, StoreError>> {
        let record = match self.read_here(req.key)? {
            Ok(record) => record?,
            Err(e) => return Some(Err(e)),
        };
        // Read after the record, as the usual claim does: a record that
        // expires meanwhile counts as expired.
        let now = self.shared.clock.now();
        if record.is_expired(now) {
            return None;
        }
        match transition::answer(&record, req, now)? {
            ClaimOutcome::InFlight { .. } => None,
            answer => Some(Ok(LocalClaim::Claim(answer))),
        }
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn describe(&self) -> String {
        self.shared.name.clone()
    }

    fn fast_path(&self) -> Option<&dyn FastPath> {
        Some(self)
    }

    async fn call(&self, op: Operation<'_>) -> Result<Answer, StoreError> {
        idem_runtime::answer_operation!(self, op)
    }
}

/// The operations [`Store::call`] answers, one method each
/// ([`answer_operation!`](idem_runtime::answer_operation)).
impl SqliteStore {
    async fn on_claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        // A duplicate (completed, in flight, key reused) is answered from a
        // read connection without touching the write lock; only a claim
        // that must write goes to the writer, which decides again inside
        // its transaction.
        let existing = self.read_record(req.key).await?;
        let decision = transition::claim(existing, req, self.shared.clock.now(), || Fence(0));
        if decision.write.is_none() {
            return Ok(decision.claim);
        }
        match self
            .submit(Op::Claim {
                key: req.key.clone(),
                tool: req.tool.to_owned(),
                fingerprint: req.fingerprint.clone(),
                check_fingerprint: req.check_fingerprint,
                lease: req.lease,
                info: req.info.to_owned(),
                worker: req.worker.map(str::to_owned),
                durable: req.durable,
            })
            .await?
        {
            Answer::Claim(claim) => Ok(claim),
            _ => unreachable!("the writer answers a claim with a claim"),
        }
    }

    async fn on_checkpoint(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        step: &str,
        value: &Value,
        lease: Duration,
    ) -> Result<(), StoreError> {
        self.submit(Op::Checkpoint {
            key: key.clone(),
            fence,
            step: Some((step.to_owned(), value.clone())),
            lease,
        })
        .await
        .map(drop)
    }

    async fn on_renew(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        self.submit(Op::Checkpoint {
            key: key.clone(),
            fence,
            step: None,
            lease,
        })
        .await
        .map(drop)
    }

    async fn on_complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.submit(Op::Complete {
            key: key.clone(),
            fence,
            outcome: outcome.clone(),
            ttl,
        })
        .await
        .map(drop)
    }

    async fn on_release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        self.submit(Op::Release {
            key: key.clone(),
            fence,
        })
        .await
        .map(drop)
    }

    async fn on_get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Ok(self.read_live(key).await?.0)
    }

    async fn on_replace(
        &self,
        key: &IdempotencyKey,
        expected: Expected,
        new: Option<&Record>,
        audit: Option<&AuditEvent>,
    ) -> Result<Option<Fence>, StoreError> {
        match self
            .submit(Op::Replace {
                key: key.clone(),
                expected,
                new: new.cloned().map(Box::new),
                audit: audit.cloned().map(Box::new),
            })
            .await?
        {
            Answer::Replaced(fence) => Ok(fence),
            _ => unreachable!("the writer answers a replace with a fence"),
        }
    }

    /// Pages in key order; the cursor is the last key of the page.
    async fn on_scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        let shared = self.shared.clone();
        let cursor = cursor.map(str::to_owned);
        let now = self.shared.clock.now();
        self.read(move |conn| {
            scan(conn, cursor.as_deref(), limit, now).map_err(|e| shared.sql(e))?
        })
        .await
    }

    /// Pages through the index of open records (schema version 4),
    /// newest first: a page reads about `limit` rows, however many records
    /// the file holds. A file of an older version opened read-only has no
    /// such index: it is read whole for every page
    /// ([`scan_open_by_scanning`]).
    async fn on_scan_open(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage, StoreError> {
        if self.shared.read_only && self.schema_found.is_some_and(|v| v < OPEN_INDEX_SINCE) {
            return scan_open_by_scanning(self, cursor, limit).await;
        }
        let after = cursor
            .map(|c| OpenCursor::parse_for(&self.shared.name, c))
            .transpose()?;
        let shared = self.shared.clone();
        let now = self.shared.clock.now();
        self.read(move |conn| {
            scan_open(conn, after.as_ref(), limit, now).map_err(|e| shared.sql(e))
        })
        .await
    }

    async fn on_wait(
        &self,
        key: &IdempotencyKey,
        until: WaitFor,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.shared
            .waiters
            .wait(key, until, timeout, || self.read_live(key))
            .await
    }

    /// Deletes in batches of 100 records, each its own transaction,
    /// until a batch finds fewer: only records expired when the sweep
    /// started, so a sweep ends even while records keep expiring.
    ///
    /// Between two batches the sweep lets the checkpointer finish any
    /// checkpoint its deletions asked for (for up to
    /// [`SWEEP_CHECKPOINT_WAIT`]): deleting rows writes pages much faster
    /// than a checkpoint copies them, and a WAL left to grow to
    /// [`WAL_LIMIT_PAGES`] is checkpointed on the writer's commit path,
    /// where every caller's claim waits for it.
    async fn on_sweep(&self) -> Result<u64, StoreError> {
        let cutoff = self.shared.clock.now();
        self.sweep_audit(cutoff).await?;
        let mut total = 0;
        loop {
            match self.submit(Op::Sweep { cutoff }).await? {
                Answer::Swept(n) => {
                    total += n;
                    if n < SWEEP_BATCH {
                        return Ok(total);
                    }
                }
                _ => unreachable!("the writer answers a sweep with a count"),
            }
            let waited = tokio::time::Instant::now();
            while !self.shared.checkpoints_caught_up() && waited.elapsed() < SWEEP_CHECKPOINT_WAIT {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    async fn on_append_audit(&self, event: &AuditEvent) -> Result<u64, StoreError> {
        match self
            .submit(Op::AppendAudit {
                event: Box::new(event.clone()),
            })
            .await?
        {
            Answer::Appended(seq) => Ok(seq),
            _ => unreachable!("the writer answers an append with a seq"),
        }
    }

    /// Pages by position in the log; the cursor is the `at` and `seq` of
    /// the page's last event.
    async fn on_audit(
        &self,
        query: &AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        let after = cursor
            .map(|c| {
                audit::parse_position_cursor(c).ok_or_else(|| StoreError::BadCursor {
                    store: self.shared.name.clone(),
                    cursor: c.to_owned(),
                    kind: "audit",
                })
            })
            .transpose()?;
        // A store read as it is, at a version before the log existed
        // (opened read-only), has no log yet: an empty one.
        if self.shared.read_only && self.schema_found.is_some_and(|v| v < AUDIT_SINCE) {
            return Ok(AuditPage::default());
        }
        let shared = self.shared.clone();
        let query = query.clone();
        self.read(move |conn| audit_page(conn, &query, after, limit).map_err(|e| shared.sql(e))?)
            .await
    }

    async fn on_now(&self) -> Result<Timestamp, StoreError> {
        self.shared.check_open()?;
        Ok(self.shared.clock.now())
    }

    /// Commit the writes already queued (their callers are answered as
    /// usual), stop the writer thread and close every connection to the
    /// file. Later operations, and waiters, fail with
    /// [`StoreError::Closed`]. Dropping the store without closing it does
    /// the same in the background.
    async fn on_close(&self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        // Dropping the only sender ends the writer's loop once every job
        // already queued is committed and answered.
        let writer = self.writer.lock().expect("not poisoned").take();
        drop(writer);
        let thread = self.writer_thread.lock().expect("not poisoned").take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        self.shared
            .idle_readers
            .lock()
            .expect("not poisoned")
            .clear();
        self.shared
            .local_readers
            .lock()
            .expect("not poisoned")
            .clear();
        self.shared.waiters.wake_all();
    }
}
