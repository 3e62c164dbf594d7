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
//! * Reads (a duplicate's claim, [`Store::get`]) never wait for a commit:
//!   in WAL mode a reader sees the last commit of any process without
//!   taking the write lock. They run on the caller's thread, from a small
//!   pool of connections with cached prepared statements, so a duplicate
//!   of a completed call is answered by [`Store::claim_local`] without a
//!   thread hop and writes nothing. The last completed records read are
//!   kept decoded ([`SqliteOptions::record_cache`]): the row is still
//!   read every time, but when its bytes are those decoded last time the
//!   decoded record is answered again. Only a read that meets a lock (the
//!   file recovering after a crash) goes to a blocking thread and waits
//!   up to the busy timeout. No connection keeps a read transaction open
//!   between reads, so checkpoints are never starved.
//! * With [`Synchronous::Full`] (the default) a record is on disk, and
//!   survives power loss, before the call that wrote it returns: at most two
//!   durable commits per first call (the claim before the tool runs, the
//!   outcome before it is acknowledged). [`Synchronous::Normal`] skips the
//!   fsync on commit: still safe against a crash of the process, but the
//!   last transactions may be lost on power failure.
//! * Waiters in this process ([`Store::wait`], [`Store::wait_for_decision`])
//!   are woken the moment the writer commits a completion, a release or a
//!   replace (an approval, a denial); a writer in *another* process (an
//!   operator's `idem approve`) cannot notify them, so waiters also re-read
//!   the record with a back-off from 5 ms to [`CROSS_PROCESS_POLL`].
//! * [`Store::sweep`] deletes expired records 100 at a time, one write
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

mod decoded;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::wal::CheckpointMode;
use rusqlite::{ffi, Connection, OpenFlags, OptionalExtension, TransactionBehavior};
use serde_json::Value;
use tokio::sync::{oneshot, Semaphore};

use super::transition;
use super::wait_for::WaitFor;
use super::waiters::Waiters;
use super::{Cause, ClaimOutcome, ClaimRequest, Expected, ScanPage, Store, StoreError};
use crate::audit::{self, AuditEvent, AuditPage, AuditQuery, DEFAULT_AUDIT_RETENTION};
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::key::{Fingerprint, IdempotencyKey};
use crate::record::{CallInfo, CorruptRecord, Fence, Outcome, Record};

/// The schema version this build writes and understands. Version 2 (idem
/// 0.2) adds records awaiting approval, call details and operator audit to
/// the stored record; a version 1 file is migrated in place on open (its
/// records read unchanged), and a version 1 build refuses a version 2 file
/// rather than misreading a record it does not know.
///
/// Version 3 adds the audit log (table `idem_audit`), and keeps completed
/// records with an unknown outcome until a person settles them: the
/// migration from 1 or 2 clears the expiry of those already stored.
pub const SCHEMA_VERSION: u32 = 3;

/// The oldest schema version a store opened read-only
/// ([`SqliteStore::open_read_only`]) reads as it is, without migrating it:
/// version 1 records decode as version 2 ones lacking what version 1 did
/// not record. An older file is refused with [`StoreError::SchemaTooOld`].
pub const OLDEST_READABLE: u32 = 1;

/// How many bytes of decoded completed records a store keeps unless
/// [`SqliteOptions::record_cache`] says otherwise.
pub const DEFAULT_RECORD_CACHE: usize = 4 * 1024 * 1024;

/// The longest a waiter goes without re-reading its record, to see a
/// completion written by another process.
pub const CROSS_PROCESS_POLL: Duration = Duration::from_millis(100);

/// How many requests one write transaction takes at most.
const MAX_BATCH: usize = 512;

/// WAL pages (4 KiB each by default) after which the checkpointer copies
/// the WAL back into the database file: SQLite's own autocheckpoint
/// threshold.
pub const CHECKPOINT_PAGES: i32 = 1000;

/// WAL pages after which the writer checkpoints itself, after a commit,
/// when the checkpointer has not let the WAL start over: the bound on the
/// WAL's size (plus one transaction).
pub const WAL_LIMIT_PAGES: i32 = 8 * CHECKPOINT_PAGES;

/// How many connections for reads on the caller's thread are kept open
/// when idle; more are opened while more threads read at once, and closed
/// after.
const LOCAL_READERS: usize = 16;

/// How many expired records one sweep transaction deletes at most. A sweep
/// is a series of such transactions, so the claims and completions queued
/// behind one batch commit with the next: a caller waits for about one
/// batch, never for the whole sweep. Small, because expired records lie in
/// expiry order with their keys all over the key index, so each deleted
/// row dirties about one page of it; `benches/stores/` measured 100
/// against 1,000 (BENCHMARKS.md): callers' median wait during a sweep about
/// 9 ms against 72 ms, the sweep itself about twice as long.
const SWEEP_BATCH: u64 = 100;

/// The longest a sweep waits between two batches for the checkpointer to
/// finish the checkpoints asked of it (see [`Store::sweep`] on
/// [`SqliteStore`]).
pub const SWEEP_CHECKPOINT_WAIT: Duration = Duration::from_secs(1);

/// SQLite's `synchronous` setting: what a commit waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Every commit is fsynced before the caller is answered: a completed
    /// record survives power loss. The default.
    #[default]
    Full,
    /// Commits are not fsynced (the WAL is synced at checkpoints): a crash
    /// of the process loses nothing, a power failure may lose the last
    /// transactions — and with them a claim, so a call could run twice.
    Normal,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// How to open a [`SqliteStore`].
///
/// ```
/// use idem_runtime::store::{SqliteOptions, Synchronous};
/// use std::time::Duration;
///
/// let options = SqliteOptions::default()
///     .synchronous(Synchronous::Normal)
///     .busy_timeout(Duration::from_secs(10));
/// # let _ = options;
/// ```
#[derive(Clone)]
pub struct SqliteOptions {
    synchronous: Synchronous,
    busy_timeout: Duration,
    max_size: Option<u64>,
    readers: usize,
    record_cache: usize,
    clock: Arc<dyn Clock>,
    audit_retention: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::Full,
            busy_timeout: Duration::from_secs(5),
            max_size: None,
            readers: 4,
            record_cache: DEFAULT_RECORD_CACHE,
            clock: Arc::new(SystemClock),
            audit_retention: DEFAULT_AUDIT_RETENTION,
        }
    }
}

impl fmt::Debug for SqliteOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteOptions")
            .field("synchronous", &self.synchronous)
            .field("busy_timeout", &self.busy_timeout)
            .field("max_size", &self.max_size)
            .field("readers", &self.readers)
            .field("record_cache", &self.record_cache)
            .field("audit_retention", &self.audit_retention)
            .finish_non_exhaustive()
    }
}

impl SqliteOptions {
    /// What a commit waits for (default [`Synchronous::Full`]).
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// How long a transaction waits for another process's lock before the
    /// operation fails with [`StoreError::Unavailable`] (default 5 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Cap the database file at about `bytes`; a write that would grow it
    /// further fails with [`StoreError::Full`] and changes nothing (default:
    /// no cap beyond the disk).
    pub fn max_size(mut self, bytes: u64) -> Self {
        self.max_size = Some(bytes);
        self
    }

    /// How many reads run at once (default 4).
    pub fn readers(mut self, readers: usize) -> Self {
        self.readers = readers.max(1);
        self
    }

    /// How much memory, in bytes, the store spends keeping the completed
    /// records it read last decoded, so that duplicates of recent calls
    /// skip decoding them (default [`DEFAULT_RECORD_CACHE`], 4 MiB: some
    /// 2,700 records of a typical 700 bytes; 0 keeps none). A record
    /// costs about twice its stored size; records over 16 KiB are not
    /// kept. Every read still reads the row, and a record is answered from
    /// memory only while the row holds the very bytes it was decoded from,
    /// so a change by another process or an operator is always seen.
    pub fn record_cache(mut self, bytes: usize) -> Self {
        self.record_cache = bytes;
        self
    }

    /// The clock that judges leases and expiry (default the system clock;
    /// a [`crate::clock::ManualClock`] in tests). Every process sharing a
    /// file must use the same clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Keep audit events for `retention` (default
    /// [`DEFAULT_AUDIT_RETENTION`]): [`Store::sweep`] deletes older ones.
    pub fn audit_retention(mut self, retention: Duration) -> Self {
        self.audit_retention = retention;
        self
    }
}

/// Records in one SQLite file. See the [module docs](self).
///
/// ```
/// use idem_runtime::store::{SqliteStore, Store};
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

struct Shared {
    path: PathBuf,
    name: String,
    busy_timeout: Duration,
    clock: Arc<dyn Clock>,
    audit_retention: Duration,
    idle_readers: Mutex<Vec<Connection>>,
    read_slots: Semaphore,
    /// Connections for reads on the caller's thread
    /// ([`SqliteStore::read_here`]), opened on demand, at most
    /// [`LOCAL_READERS`] kept idle.
    local_readers: Mutex<Vec<Connection>>,
    /// Completed records read recently, decoded.
    decoded: decoded::DecodedRecords,
    /// Checkpoints asked of the checkpointer thread, and finished by it
    /// (done or failed): a sweep waits for the two to meet between its
    /// batches.
    checkpoints_asked: AtomicU64,
    checkpoints_done: AtomicU64,
    waiters: Waiters,
    closed: AtomicBool,
    /// Opened with [`SqliteStore::open_read_only`]: no writer, every
    /// connection read-only.
    read_only: bool,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

/// A request for the writer thread, answered after its transaction commits.
struct Job {
    op: Op,
    reply: oneshot::Sender<Result<Answer, StoreError>>,
}

enum Op {
    Claim {
        key: IdempotencyKey,
        tool: String,
        fingerprint: Fingerprint,
        check_fingerprint: bool,
        lease: Duration,
        info: CallInfo,
        worker: Option<String>,
    },
    Replace {
        key: IdempotencyKey,
        expected: Expected,
        /// Boxed: an operator's rare replace should not size every job.
        new: Option<Box<Record>>,
        /// Appended to the audit log when the swap happens.
        audit: Option<Box<AuditEvent>>,
    },
    /// Append an event to the audit log.
    AppendAudit {
        event: Box<AuditEvent>,
    },
    /// Delete at most [`SWEEP_BATCH`] audit events older than `cutoff`.
    SweepAudit {
        cutoff: Timestamp,
    },
    /// A completed step (or, without one, a lease renewal).
    Checkpoint {
        key: IdempotencyKey,
        fence: Fence,
        step: Option<(String, Value)>,
        lease: Duration,
    },
    Complete {
        key: IdempotencyKey,
        fence: Fence,
        outcome: Outcome,
        ttl: Duration,
    },
    Release {
        key: IdempotencyKey,
        fence: Fence,
    },
    /// Delete at most [`SWEEP_BATCH`] records that expired by `cutoff`.
    Sweep {
        cutoff: Timestamp,
    },
}

enum Answer {
    Claim(ClaimOutcome),
    Replaced(Option<Fence>),
    Appended(u64),
    Done,
    Swept(u64),
}

impl SqliteStore {
    /// Open (creating if needed) the store a `sqlite:` URL names, with
    /// default options: `sqlite://idem.db` (relative to the working
    /// directory) or `sqlite:///var/lib/app/idem.db`. The query may set
    /// `synchronous=full` (default) or `synchronous=normal` (see
    /// [`Synchronous`]) and `busy_timeout_ms=N`.
    ///
    /// A URL without a file or with an unknown option is a
    /// [`StoreError::Config`]; otherwise it fails as [`SqliteStore::open_with`]
    /// does.
    pub async fn connect(url: &str) -> Result<SqliteStore, StoreError> {
        Self::connect_with(url, SqliteOptions::default()).await
    }

    /// Like [`SqliteStore::connect`], starting from `options`: the URL's
    /// query options override theirs.
    pub async fn connect_with(
        url: &str,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let (path, options) = parse_url(url, options)?;
        Self::open_with(path, options).await
    }

    /// Open (creating if needed) the store at `path` with default options.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Open (creating if needed) the store at `path`.
    ///
    /// Fails with [`StoreError::Unavailable`] when the file cannot be opened
    /// or is not a SQLite database (it is left untouched),
    /// [`StoreError::ReadOnly`] when it cannot be written, and
    /// [`StoreError::SchemaTooNew`] when a newer idem created it.
    pub async fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let shared = Arc::new(Shared::new(path.as_ref(), &options, false));
        let (ready_tx, ready_rx) = oneshot::channel();
        let (writer, jobs) = mpsc::channel();
        let thread_shared = shared.clone();
        let writer_thread = std::thread::Builder::new()
            .name("idem-sqlite-writer".into())
            .spawn(move || match open_writer(&thread_shared, &options) {
                Ok((mut conn, found)) => {
                    let checkpointer = start_checkpointer(&thread_shared, &options, &mut conn);
                    let _ = ready_tx.send(Ok(found));
                    Writer {
                        conn,
                        shared: thread_shared,
                    }
                    .run(jobs);
                    // The writer's connection, and with it the only sender
                    // to the checkpointer, is gone: it stops.
                    if let Some(checkpointer) = checkpointer {
                        let _ = checkpointer.join();
                    }
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(|e| {
                shared.unavailable(Cause::with_source(
                    format!("cannot start the writer thread: {e}"),
                    e,
                ))
            })?;
        let schema_found = ready_rx
            .await
            .map_err(|_| shared.unavailable("the writer thread died while opening"))??;
        Ok(SqliteStore {
            shared,
            schema_found,
            writer: Mutex::new(Some(writer)),
            writer_thread: Mutex::new(Some(writer_thread)),
        })
    }

    /// Open the store a `sqlite:` URL names for reading only, with default
    /// options (the URL's query options apply as for
    /// [`SqliteStore::connect`]). See [`SqliteStore::open_read_only_with`].
    pub async fn connect_read_only(url: &str) -> Result<SqliteStore, StoreError> {
        let (path, options) = parse_url(url, SqliteOptions::default())?;
        Self::open_read_only_with(path, options).await
    }

    /// Open the store at `path` for reading only, with default options.
    pub async fn open_read_only(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        Self::open_read_only_with(path, SqliteOptions::default()).await
    }

    /// Open the store at `path` for reading only: every connection is
    /// opened `SQLITE_OPEN_READ_ONLY`, nothing is created, migrated or
    /// switched to WAL, and no writer or checkpointer thread starts. Reads
    /// ([`Store::get`], [`Store::scan`], a claim that finds a record it
    /// need not change) work as on a store opened read-write, and see what
    /// live writers of the file committed; anything that would write fails
    /// with [`StoreError::ReadOnly`] and changes nothing.
    ///
    /// The file is checked before anything else reads it, and refused:
    ///
    /// * missing: [`StoreError::NoStore`] (nothing is created);
    /// * not a SQLite database, or one without idem's tables and schema
    ///   version: [`StoreError::NotAnIdemStore`], the file (and its
    ///   `-wal`/`-shm` files, or their absence) left exactly as it was;
    /// * older than [`OLDEST_READABLE`]: [`StoreError::SchemaTooOld`];
    ///   newer than [`SCHEMA_VERSION`]: [`StoreError::SchemaTooNew`].
    ///
    /// A WAL database can be read only through its `-shm` index: when no
    /// process has the file open (no `-wal` file) the check reads it as
    /// `immutable`, creating nothing; reading an idem store then lets
    /// SQLite create the empty `-wal` and `-shm` files every WAL reader
    /// needs, so that a writer starting meanwhile is seen correctly. The
    /// database file itself is never written.
    pub async fn open_read_only_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let shared = Arc::new(Shared::new(path.as_ref(), &options, true));
        let checked = shared.clone();
        let found = tokio::task::spawn_blocking(move || check_read_only(&checked))
            .await
            .map_err(|e| {
                shared.unavailable(Cause::with_source(format!("open task failed: {e}"), e))
            })??;
        Ok(SqliteStore {
            shared,
            schema_found: Some(found),
            writer: Mutex::new(None),
            writer_thread: Mutex::new(None),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Whether this store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    /// The schema version the file had when this store opened it: `None`
    /// when this store created the schema, an older version than
    /// [`SCHEMA_VERSION`] when a store opened read-write migrated it (a
    /// store opened read-only never does).
    pub fn schema_found(&self) -> Option<u32> {
        self.schema_found
    }

    async fn submit(&self, op: Op) -> Result<Answer, StoreError> {
        if self.shared.read_only {
            self.shared.check_open()?;
            return Err(StoreError::ReadOnly {
                store: self.shared.name.clone(),
                cause: "it was opened read-only, for reading; open it read-write to change it"
                    .into(),
            });
        }
        let (reply, answer) = oneshot::channel();
        // Sent under the lock, so `close` cannot take the sender between
        // the check and the send: a job is either refused or committed.
        match &*self.writer.lock().expect("not poisoned") {
            None => return Err(self.shared.closed_error()),
            Some(writer) => writer
                .send(Job { op, reply })
                .map_err(|_| self.shared.unavailable("the writer thread has stopped"))?,
        }
        answer
            .await
            .map_err(|_| self.shared.unavailable("the writer thread has stopped"))?
    }

    /// Run `f` on a read connection, off the async runtime.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.shared.check_open()?;
        let _slot = self
            .shared
            .read_slots
            .acquire()
            .await
            .expect("the semaphore is never closed");
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let conn = match shared.idle_readers.lock().expect("not poisoned").pop() {
                Some(conn) => conn,
                None => shared.open_reader()?,
            };
            let result = f(&conn);
            if !shared.closed.load(Ordering::SeqCst) {
                shared.idle_readers.lock().expect("not poisoned").push(conn);
            }
            result
        })
        .await
        .map_err(|e| {
            self.shared
                .unavailable(Cause::with_source(format!("read task failed: {e}"), e))
        })?
    }

    /// Read the record of `key` on this thread, from a cached connection
    /// and prepared statement: no thread hop, no wait for the writer (WAL
    /// readers see the last commit of any process without taking its
    /// lock). `None` when SQLite cannot answer at once (the file is busy
    /// recovering, say): the caller then reads the usual way, which waits
    /// up to the busy timeout and reports the error. A closed store and a
    /// corrupt row are answers: [`StoreError::Closed`],
    /// [`StoreError::Corrupt`].
    fn read_here(&self, key: &IdempotencyKey) -> Option<Result<Option<Arc<Record>>, StoreError>> {
        let shared = &self.shared;
        if let Err(e) = shared.check_open() {
            return Some(Err(e));
        }
        let popped = shared.local_readers.lock().expect("not poisoned").pop();
        let conn = match popped {
            Some(conn) => conn,
            None => shared.open_local_reader().ok()?,
        };
        // The statement is reset when the row is read, which ends the read
        // transaction: an idle connection holds no snapshot that would keep
        // a checkpoint from reaching the end of the WAL.
        let result = load_with(&conn, key, |bytes| shared.decoded.decode(key, bytes)).ok()?;
        let mut idle = shared.local_readers.lock().expect("not poisoned");
        // Checked under the lock `close` empties the pool under, so no
        // connection is put back after it.
        if !shared.closed.load(Ordering::SeqCst) && idle.len() < LOCAL_READERS {
            idle.push(conn);
        }
        Some(result)
    }

    /// The record of `key`, expired or not: read on this thread when it
    /// can be ([`SqliteStore::read_here`]), otherwise on a blocking thread.
    async fn read_record(&self, key: &IdempotencyKey) -> Result<Option<Arc<Record>>, StoreError> {
        if let Some(read) = self.read_here(key) {
            return read;
        }
        let shared = self.shared.clone();
        let key = key.clone();
        self.read(move |conn| {
            load_with(conn, &key, |bytes| shared.decoded.decode(&key, bytes))
                .map_err(|e| shared.sql(e))?
        })
        .await
    }

    async fn read_live(
        &self,
        key: &IdempotencyKey,
    ) -> Result<(Option<Record>, Timestamp), StoreError> {
        let record = self.read_record(key).await?;
        let now = self.shared.clock.now();
        let live = record.filter(|r| !r.is_expired(now));
        Ok((live.map(Arc::unwrap_or_clone), now))
    }
}

impl SqliteStore {
    /// Delete the audit events older than the retention at `now`, a batch
    /// per transaction as the sweep of records does.
    async fn sweep_audit(&self, now: Timestamp) -> Result<(), StoreError> {
        let Some(cutoff) = audit::retention_cutoff(now, self.shared.audit_retention) else {
            return Ok(());
        };
        loop {
            match self.submit(Op::SweepAudit { cutoff }).await? {
                Answer::Swept(n) if n < SWEEP_BATCH => return Ok(()),
                Answer::Swept(_) => {}
                _ => unreachable!("the writer answers a sweep with a count"),
            }
        }
    }
}

/// The file and options of a `sqlite:` URL, the query's options applied to
/// `options`.
fn parse_url(url: &str, mut options: SqliteOptions) -> Result<(&str, SqliteOptions), StoreError> {
    let Some(rest) = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
    else {
        return Err(StoreError::Config(format!(
            "{url:?} is not a SQLite URL; write sqlite://idem.db or sqlite:///absolute/path.db"
        )));
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() {
        return Err(StoreError::Config(format!(
            "{url:?} names no file; write sqlite://idem.db or sqlite:///absolute/path.db"
        )));
    }
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        options = match (name, value.to_ascii_lowercase().as_str()) {
            ("synchronous", "full") => options.synchronous(Synchronous::Full),
            ("synchronous", "normal") => options.synchronous(Synchronous::Normal),
            ("busy_timeout_ms", ms) => match ms.parse() {
                Ok(ms) => options.busy_timeout(Duration::from_millis(ms)),
                Err(_) => {
                    return Err(StoreError::Config(format!(
                        "busy_timeout_ms must be a number of milliseconds, not {value:?}"
                    )))
                }
            },
            _ => {
                return Err(StoreError::Config(format!(
                    "unknown SQLite option {param:?} in {url:?}; known: synchronous=full|normal, busy_timeout_ms=N"
                )))
            }
        };
    }
    Ok((path, options))
}

impl Shared {
    fn new(path: &Path, options: &SqliteOptions, read_only: bool) -> Shared {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.into());
        let name = format!("sqlite:{}", path.display());
        Shared {
            path,
            name,
            busy_timeout: options.busy_timeout,
            clock: options.clock.clone(),
            audit_retention: options.audit_retention,
            idle_readers: Mutex::new(Vec::new()),
            read_slots: Semaphore::new(options.readers),
            local_readers: Mutex::new(Vec::new()),
            decoded: decoded::DecodedRecords::new(options.record_cache),
            checkpoints_asked: AtomicU64::new(0),
            checkpoints_done: AtomicU64::new(0),
            waiters: Waiters::new(CROSS_PROCESS_POLL),
            closed: AtomicBool::new(false),
            read_only,
        }
    }

    /// Whether the checkpointer has finished every checkpoint asked of it.
    fn checkpoints_caught_up(&self) -> bool {
        self.checkpoints_done.load(Ordering::SeqCst)
            >= self.checkpoints_asked.load(Ordering::SeqCst)
    }

    /// [`StoreError::Closed`] once [`Store::close`] was called.
    fn check_open(&self) -> Result<(), StoreError> {
        match self.closed.load(Ordering::SeqCst) {
            false => Ok(()),
            true => Err(self.closed_error()),
        }
    }

    fn closed_error(&self) -> StoreError {
        StoreError::Closed {
            store: self.name.clone(),
        }
    }

    fn unavailable(&self, cause: impl Into<Cause>) -> StoreError {
        StoreError::Unavailable {
            store: self.name.clone(),
            cause: cause.into(),
        }
    }

    /// The typed error for a SQLite failure; `e` stays its source.
    fn sql(&self, e: rusqlite::Error) -> StoreError {
        let store = self.name.clone();
        match e.sqlite_error_code() {
            Some(ffi::ErrorCode::DiskFull) => StoreError::Full {
                store,
                cause: Cause::from_error(e),
            },
            Some(ffi::ErrorCode::ReadOnly) => StoreError::ReadOnly {
                store,
                cause: Cause::from_error(e),
            },
            Some(ffi::ErrorCode::NotADatabase) => StoreError::Unavailable {
                store,
                cause: Cause::with_source(
                    format!(
                        "the file is not a SQLite database ({e}); it was left untouched — point the store at another path"
                    ),
                    e,
                ),
            },
            Some(ffi::ErrorCode::DatabaseBusy | ffi::ErrorCode::DatabaseLocked) => {
                StoreError::Unavailable {
                    store,
                    cause: Cause::with_source(
                        format!(
                            "the database stayed locked by another connection for longer than the busy timeout ({:?}): {e}",
                            self.busy_timeout
                        ),
                        e,
                    ),
                }
            }
            _ => StoreError::Unavailable {
                store,
                cause: Cause::from_error(e),
            },
        }
    }

    /// A connection for [`SqliteStore::read_here`]: no busy timeout, so a
    /// lock it meets fails at once and the read goes the usual way.
    fn open_local_reader(&self) -> rusqlite::Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::ZERO)?;
        Ok(conn)
    }

    fn open_reader(&self) -> Result<Connection, StoreError> {
        let access = match self.read_only {
            true => OpenFlags::SQLITE_OPEN_READ_ONLY,
            false => OpenFlags::SQLITE_OPEN_READ_WRITE,
        };
        let conn =
            Connection::open_with_flags(&self.path, access | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(|e| self.sql(e))?;
        conn.busy_timeout(self.busy_timeout)
            .map_err(|e| self.sql(e))?;
        Ok(conn)
    }
}

/// Open the writer's connection, set WAL and `synchronous`, and create or
/// check the schema; with the schema version found (`None`: created).
fn open_writer(
    shared: &Shared,
    options: &SqliteOptions,
) -> Result<(Connection, Option<u32>), StoreError> {
    let sql = |e| shared.sql(e);
    if let Some(dir) = shared.path.parent() {
        if !dir.as_os_str().is_empty() && !dir.is_dir() {
            return Err(shared.unavailable(format!("directory {} does not exist", dir.display())));
        }
    }
    let mut conn = Connection::open_with_flags(
        &shared.path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql)?;
    // SQLite silently opens a file it may not write read-only; say so now
    // instead of failing on the first claim.
    if conn.is_readonly(rusqlite::MAIN_DB).map_err(sql)? {
        return Err(StoreError::ReadOnly {
            store: shared.name.clone(),
            cause: "the database file cannot be written (check its permissions)".into(),
        });
    }
    conn.busy_timeout(shared.busy_timeout).map_err(sql)?;
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(sql)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(shared.unavailable(format!(
            "could not switch the database to WAL mode (it is in {mode} mode)"
        )));
    }
    conn.pragma_update(None, "synchronous", options.synchronous.pragma())
        .map_err(sql)?;
    if let Some(bytes) = options.max_size {
        // SQLite integers are i64 (rusqlite maps no u64).
        let page: i64 = conn
            .pragma_query_value(None, "page_size", |row| row.get(0))
            .map_err(sql)?;
        let pages = bytes / page.max(1).unsigned_abs();
        let pages = i64::try_from(pages).unwrap_or(i64::MAX).max(1);
        conn.pragma_update(None, "max_page_count", pages)
            .map_err(sql)?;
    }
    let found = migrate(&mut conn, shared)?;
    Ok((conn, found))
}

/// Move checkpoints off the writer's commit path: a thread with its own
/// connection checkpoints when the writer's WAL hook says the WAL has grown
/// past [`CHECKPOINT_PAGES`]; past [`WAL_LIMIT_PAGES`] the hook checkpoints
/// itself. Registering the hook turns SQLite's autocheckpoint off; when
/// anything here fails the autocheckpoint stays, as before. The thread
/// ends once the writer's connection (which owns the hook, the only sender
/// to the thread) is closed.
fn start_checkpointer(
    shared: &Arc<Shared>,
    options: &SqliteOptions,
    writer: &mut Connection,
) -> Option<std::thread::JoinHandle<()>> {
    let warn = |e: &dyn fmt::Display| {
        tracing::warn!(store = %shared.name, error = %e, "no checkpointer thread; the writer checkpoints");
    };
    let open = || -> rusqlite::Result<Connection> {
        let conn = Connection::open_with_flags(
            &shared.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // What a checkpoint syncs follows the store's durability.
        conn.pragma_update(None, "synchronous", options.synchronous.pragma())?;
        Ok(conn)
    };
    let conn = open().map_err(|e| warn(&e)).ok()?;
    // One pending request is enough: a checkpoint copies whatever the WAL
    // holds when it starts.
    let (ask, asked) = mpsc::sync_channel::<()>(1);
    let thread_shared = shared.clone();
    let thread = std::thread::Builder::new()
        .name("idem-sqlite-checkpoint".into())
        .spawn(move || {
            while asked.recv().is_ok() {
                // PASSIVE waits for nobody and copies what no reader still
                // needs; a failure is retried at the next request.
                let done = conn.wal_checkpoint_v2(Some(rusqlite::MAIN_DB), CheckpointMode::PASSIVE);
                if let Err(e) = done {
                    tracing::debug!(error = %e, "checkpoint failed");
                }
                thread_shared
                    .checkpoints_done
                    .fetch_add(1, Ordering::SeqCst);
            }
        })
        .map_err(|e| warn(&e))
        .ok()?;
    // The WAL's size when the checkpointer was last asked: it is asked
    // once per CHECKPOINT_PAGES new pages, not after every commit while
    // the WAL is long (each checkpoint syncs both files).
    let mut asked_at = 0;
    let hook_shared = shared.clone();
    let hook = move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
        if pages < asked_at {
            asked_at = 0; // the WAL started over
        }
        if pages >= WAL_LIMIT_PAGES {
            // The transaction is committed whatever this returns: an error
            // here would only make its COMMIT report one.
            let _ = wal.checkpoint_v2(CheckpointMode::PASSIVE);
        } else if pages - asked_at >= CHECKPOINT_PAGES {
            asked_at = pages;
            // Counted only when sent: a request still pending covers this
            // one.
            if ask.try_send(()).is_ok() {
                hook_shared.checkpoints_asked.fetch_add(1, Ordering::SeqCst);
            }
        }
        Ok(())
    };
    if let Err(e) = writer.wal_hook(Some(hook)) {
        warn(&e);
    }
    Some(thread)
}

/// Migrations of an existing file: entry `i` takes the schema from version
/// `i + 1` to `i + 2`, inside the transaction that then records the new
/// version.
const MIGRATIONS: &[&str] = &[
    // Version 2 only adds optional fields to the record itself.
    "",
    // Version 3: the audit log, and unknown outcomes kept until a person
    // settles them (no expiry column, the record's own expiry the longest
    // there is). The record is JSON text in a BLOB; SQLite 3.45+ would read
    // a BLOB as its binary JSONB, so it is cast to text first.
    "CREATE TABLE IF NOT EXISTS idem_audit (
         seq   INTEGER PRIMARY KEY AUTOINCREMENT,
         at    INTEGER NOT NULL,
         key   TEXT NOT NULL,
         event TEXT NOT NULL
     );
     CREATE INDEX IF NOT EXISTS idem_audit_key ON idem_audit (key, seq);
     CREATE INDEX IF NOT EXISTS idem_audit_at ON idem_audit (at);
     UPDATE idem_records
     SET expires_at = NULL,
         record = CAST(json_set(CAST(record AS TEXT), '$.expires_at', 9223372036854775807) AS BLOB)
     WHERE json_extract(CAST(record AS TEXT), '$.state') = 'completed'
       AND json_extract(CAST(record AS TEXT), '$.outcome.status') = 'unknown';",
];

// Every migration step moves the schema one version.
const _: () = assert!(MIGRATIONS.len() + 1 == SCHEMA_VERSION as usize);

/// The schema version that added the audit log (`idem_audit`).
const AUDIT_SINCE: u32 = 3;

/// Create the schema in a fresh file, or check the version of an existing
/// one and migrate it to [`SCHEMA_VERSION`]; returns the version found
/// (`None`: created). Never touches a schema newer than [`SCHEMA_VERSION`].
fn migrate(conn: &mut Connection, shared: &Shared) -> Result<Option<u32>, StoreError> {
    let sql = |e| shared.sql(e);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS idem_meta (
             name  TEXT PRIMARY KEY NOT NULL,
             value INTEGER NOT NULL
         );",
    )
    .map_err(sql)?;
    let found: Option<i64> = tx
        .query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .optional()
        .map_err(sql)?;
    match found {
        None => {
            tx.execute_batch(
                "CREATE TABLE idem_records (
                     key        TEXT PRIMARY KEY NOT NULL,
                     expires_at INTEGER,
                     record     BLOB NOT NULL
                 );
                 CREATE INDEX idem_records_expiry ON idem_records (expires_at)
                     WHERE expires_at IS NOT NULL;
                 INSERT INTO idem_meta (name, value) VALUES ('next_fence', 1);",
            )
            .map_err(sql)?;
            for migration in MIGRATIONS {
                tx.execute_batch(migration).map_err(sql)?;
            }
            tx.execute(
                "INSERT INTO idem_meta (name, value) VALUES ('schema_version', ?1)",
                [SCHEMA_VERSION],
            )
            .map_err(sql)?;
        }
        Some(v) if v >= 1 && v < i64::from(SCHEMA_VERSION) => {
            for migration in &MIGRATIONS[(v - 1) as usize..] {
                tx.execute_batch(migration).map_err(sql)?;
            }
            tx.execute(
                "UPDATE idem_meta SET value = ?1 WHERE name = 'schema_version'",
                [SCHEMA_VERSION],
            )
            .map_err(sql)?;
        }
        Some(v) if v == i64::from(SCHEMA_VERSION) => {}
        Some(v) if v > i64::from(SCHEMA_VERSION) => {
            return Err(StoreError::SchemaTooNew {
                store: shared.name.clone(),
                found: u32::try_from(v).unwrap_or(u32::MAX),
                supported: SCHEMA_VERSION,
            })
        }
        Some(v) => {
            return Err(shared.unavailable(format!(
                "unknown schema version {v} (this idem writes version {SCHEMA_VERSION})"
            )))
        }
    }
    tx.commit().map_err(sql)?;
    Ok(found.map(|v| v as u32))
}

/// Check, for [`SqliteStore::open_read_only`], that the file is an idem
/// store this build reads, without writing anything; its schema version.
fn check_read_only(shared: &Shared) -> Result<u32, StoreError> {
    let path = &shared.path;
    let not_idem = |cause: String| StoreError::NotAnIdemStore {
        store: shared.name.clone(),
        cause: cause.into(),
    };
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::NoStore {
                store: shared.name.clone(),
            })
        }
        Err(e) => {
            return Err(shared.unavailable(Cause::with_source(
                format!("cannot read {}: {e}", path.display()),
                e,
            )))
        }
        Ok(meta) if !meta.is_file() => return Err(not_idem("it is not a file".into())),
        Ok(_) => {}
    }
    let conn = open_to_check(shared).map_err(|e| shared.sql(e))?;
    let schema = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(ffi::ErrorCode::NotADatabase) => not_idem("the file is not a SQLite database".into()),
        _ => shared.sql(e),
    };
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master
             WHERE type = 'table' AND name IN ('idem_meta', 'idem_records')",
            [],
            |row| row.get(0),
        )
        .map_err(schema)?;
    if tables != 2 {
        return Err(not_idem(
            "the database has no idem_meta and idem_records tables".into(),
        ));
    }
    let found: Option<i64> = conn
        .query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .optional()
        .map_err(schema)?;
    let Some(found) = found else {
        return Err(not_idem("idem_meta records no schema version".into()));
    };
    let found = u32::try_from(found).unwrap_or(if found < 0 { 0 } else { u32::MAX });
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            store: shared.name.clone(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < OLDEST_READABLE {
        return Err(StoreError::SchemaTooOld {
            store: shared.name.clone(),
            found,
            oldest_readable: OLDEST_READABLE,
        });
    }
    Ok(found)
}

/// A read-only connection that creates nothing next to the file: a WAL
/// database no process has open (no `-wal` file) would otherwise get new
/// `-wal` and `-shm` files, so it is read `immutable` (nobody is writing
/// it, or the `-wal` file would be there).
fn open_to_check(shared: &Shared) -> rusqlite::Result<Connection> {
    let path = &shared.path;
    let mut wal = path.clone().into_os_string();
    wal.push("-wal");
    let mut header = [0u8; 20];
    let wal_mode = std::fs::File::open(path)
        .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut header))
        .is_ok()
        && header.starts_with(b"SQLite format 3\0")
        && header[18] == 2;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if wal_mode && !Path::new(&wal).exists() {
        Connection::open_with_flags(
            format!("{}?immutable=1", file_uri(path)),
            flags | OpenFlags::SQLITE_OPEN_URI,
        )
    } else {
        Connection::open_with_flags(path, flags)
    }
}

/// `path` as a `file:` URI, every byte but unreserved ones and `/`
/// percent-encoded.
fn file_uri(path: &Path) -> String {
    #[cfg(unix)]
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
    #[cfg(not(unix))]
    let bytes = path.to_string_lossy().replace('\\', "/").into_bytes();
    let mut uri = String::from("file:");
    for b in bytes {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                uri.push(b as char)
            }
            _ => uri.push_str(&format!("%{b:02X}")),
        }
    }
    uri
}

/// Read and decode the record of `key`, expired or not. A row that does not
/// decode is a [`StoreError::Corrupt`] — never treated as absent.
fn load(
    conn: &Connection,
    key: &IdempotencyKey,
) -> rusqlite::Result<Result<Option<Record>, StoreError>> {
    load_with(conn, key, |bytes| Record::from_bytes(key.as_str(), bytes))
}

/// Read the row of `key` and decode it with `decode`.
fn load_with<T>(
    conn: &Connection,
    key: &IdempotencyKey,
    decode: impl FnOnce(&[u8]) -> Result<T, CorruptRecord>,
) -> rusqlite::Result<Result<Option<T>, StoreError>> {
    // Decoded from SQLite's own buffer, without copying the blob out first.
    let record = conn
        .prepare_cached("SELECT record FROM idem_records WHERE key = ?1")?
        .query_row([key.as_str()], |row| Ok(decode(row.get_ref(0)?.as_blob()?)))
        .optional()?;
    Ok(record.transpose().map_err(StoreError::from))
}

/// Read up to `limit` records after `cursor`, in key order.
fn scan(
    conn: &Connection,
    cursor: Option<&str>,
    limit: usize,
    now: Timestamp,
) -> rusqlite::Result<Result<ScanPage, StoreError>> {
    let limit = limit.clamp(1, 10_000);
    let mut stmt = conn.prepare_cached(
        "SELECT key, record FROM idem_records WHERE key > ?1 ORDER BY key LIMIT ?2",
    )?;
    let rows = stmt.query_map(
        rusqlite::params![cursor.unwrap_or(""), limit as i64],
        |row| Ok((row.get::<_, String>(0)?, row.get::<_, Vec<u8>>(1)?)),
    )?;
    let mut records = Vec::new();
    let mut corrupt = Vec::new();
    let mut last = None;
    let mut seen = 0;
    for row in rows {
        let (key, bytes) = row?;
        seen += 1;
        match Record::from_bytes(&key, &bytes) {
            Ok(record) if record.is_expired(now) => {}
            Ok(record) => records.push(record),
            Err(e) => corrupt.push(e),
        }
        last = Some(key);
    }
    Ok(Ok(ScanPage {
        records,
        corrupt,
        cursor: if seen == limit { last } else { None },
    }))
}

fn store(conn: &Connection, record: &Record) -> rusqlite::Result<()> {
    store_bytes(conn, record, &record.to_bytes())
}

/// Write `record`, encoded as `bytes`.
fn store_bytes(conn: &Connection, record: &Record, bytes: &[u8]) -> rusqlite::Result<()> {
    let expires_at = record.expires_at().map(millis);
    conn.prepare_cached(
        "INSERT INTO idem_records (key, expires_at, record) VALUES (?1, ?2, ?3)
         ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at, record = excluded.record",
    )?
    .execute(rusqlite::params![record.key.as_str(), expires_at, bytes])?;
    Ok(())
}

fn millis(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

/// The writer thread: one connection, one transaction per batch of jobs.
struct Writer {
    conn: Connection,
    shared: Arc<Shared>,
}

impl Writer {
    fn run(mut self, jobs: mpsc::Receiver<Job>) {
        // Ends when the store (the only sender) is dropped.
        while let Ok(first) = jobs.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match jobs.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.commit(batch);
        }
    }

    /// Apply `batch` in one `BEGIN IMMEDIATE` transaction; answer each job
    /// only after the commit (or the failure of the whole transaction).
    ///
    /// When SQLite fails on one job (the file is full, a value is too big),
    /// that job alone is answered with the error: the transaction is rolled
    /// back — SQLite often abandons it by itself on such errors — and the
    /// other jobs are decided again in a new one. Nobody has been answered
    /// yet, so nothing anybody was told is undone, and fences handed out in
    /// the abandoned transaction were never seen by anyone. Every round
    /// drops one job, so this ends. A failure of the transaction itself
    /// (the lock, the fence counter, COMMIT) fails every job left.
    fn commit(&mut self, mut batch: Vec<Job>) {
        let shared = self.shared.clone();
        loop {
            match self.try_commit(&batch) {
                Ok(answers) => {
                    for (job, answer) in batch.into_iter().zip(answers) {
                        if answer.is_ok() {
                            if let Op::Complete { key, .. }
                            | Op::Release { key, .. }
                            | Op::Replace { key, .. } = &job.op
                            {
                                shared.waiters.wake(key.as_str());
                            }
                        }
                        let _ = job.reply.send(answer);
                    }
                    return;
                }
                Err(Failed::Job(i, e)) => {
                    let job = batch.remove(i);
                    let _ = job.reply.send(Err(shared.sql(e)));
                    if batch.is_empty() {
                        return;
                    }
                }
                Err(Failed::Transaction(e)) => {
                    let error = shared.sql(e);
                    for job in batch {
                        let _ = job.reply.send(Err(error.clone()));
                    }
                    return;
                }
            }
        }
    }

    /// One attempt at committing `batch`: every job's answer, in order, once
    /// the transaction is committed. Dropping the transaction on an error
    /// rolls it back.
    fn try_commit(&mut self, batch: &[Job]) -> Result<Vec<Result<Answer, StoreError>>, Failed> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(Failed::Transaction)?;
        // Read the clock once the write lock is held: time spent waiting for
        // another process's transaction must not shorten the leases and
        // retention granted here.
        let now = self.shared.clock.now();
        let mut fences = match batch
            .iter()
            .any(|j| matches!(j.op, Op::Claim { .. } | Op::Replace { .. }))
        {
            true => Some(FenceCounter::load(&tx).map_err(Failed::Transaction)?),
            false => None,
        };
        let mut answers = Vec::with_capacity(batch.len());
        for (i, job) in batch.iter().enumerate() {
            let answer = apply(&tx, &job.op, now, fences.as_mut(), &self.shared.decoded);
            answers.push(answer.map_err(|e| Failed::Job(i, e))?);
        }
        if let Some(fences) = &fences {
            fences.save(&tx).map_err(Failed::Transaction)?;
        }
        tx.commit().map_err(Failed::Transaction)?;
        Ok(answers)
    }
}

/// Why an attempt at committing a batch failed.
enum Failed {
    /// SQLite failed on the job at this index of the batch.
    Job(usize, rusqlite::Error),
    /// The transaction itself failed.
    Transaction(rusqlite::Error),
}

/// Fences handed out in one transaction, from the counter in `idem_meta`.
struct FenceCounter {
    next: u64,
    taken: bool,
}

impl FenceCounter {
    fn load(tx: &Connection) -> rusqlite::Result<FenceCounter> {
        let next: i64 = tx.query_row(
            "SELECT value FROM idem_meta WHERE name = 'next_fence'",
            [],
            |row| row.get(0),
        )?;
        Ok(FenceCounter {
            next: next as u64,
            taken: false,
        })
    }

    fn take(&mut self) -> Fence {
        self.taken = true;
        self.next += 1;
        Fence(self.next - 1)
    }

    fn save(&self, tx: &Connection) -> rusqlite::Result<()> {
        if self.taken {
            tx.execute(
                "UPDATE idem_meta SET value = ?1 WHERE name = 'next_fence'",
                [self.next as i64],
            )?;
        }
        Ok(())
    }
}

/// Apply one operation inside the writer's transaction. The outer error is
/// SQLite failing on it (see [`Writer::commit`]); the inner one is this
/// operation's own answer (stale fence, corrupt record).
fn apply(
    tx: &Connection,
    op: &Op,
    now: Timestamp,
    fences: Option<&mut FenceCounter>,
    decoded: &decoded::DecodedRecords,
) -> rusqlite::Result<Result<Answer, StoreError>> {
    let existing = |key: &IdempotencyKey| load(tx, key);
    Ok(match op {
        Op::Claim {
            key,
            tool,
            fingerprint,
            check_fingerprint,
            lease,
            info,
            worker,
        } => {
            let existing = match existing(key)? {
                Ok(r) => r,
                Err(e) => return Ok(Err(e)),
            };
            let req = ClaimRequest {
                key,
                tool,
                fingerprint,
                check_fingerprint: *check_fingerprint,
                lease: *lease,
                info: info.as_ref(),
                worker: worker.as_deref(),
            };
            let fences = fences.expect("loaded for a batch with claims");
            let decision = transition::claim(existing.map(Arc::new), &req, now, || fences.take());
            if let Some(record) = &decision.write {
                store(tx, record)?;
            }
            Ok(Answer::Claim(decision.claim))
        }
        Op::Checkpoint {
            key,
            fence,
            step,
            lease,
        } => match existing(key)?.and_then(|r| {
            let step = step.as_ref().map(|(name, value)| (name.as_str(), value));
            transition::checkpoint(r, key, *fence, step, *lease, now)
        }) {
            Ok(record) => store(tx, &record).map(|()| Ok(Answer::Done))?,
            Err(e) => Err(e),
        },
        Op::Complete {
            key,
            fence,
            outcome,
            ttl,
        } => match existing(key)?.and_then(|r| {
            transition::complete(
                r.filter(|r| !r.is_expired(now)),
                key,
                *fence,
                outcome,
                *ttl,
                now,
            )
        }) {
            Ok(record) => {
                let bytes = record.to_bytes();
                store_bytes(tx, &record, &bytes)?;
                decoded.written(key, bytes, record);
                Ok(Answer::Done)
            }
            Err(e) => Err(e),
        },
        Op::Release { key, fence } => match existing(key)?
            .and_then(|r| transition::owned(r.filter(|r| !r.is_expired(now)), key, *fence))
        {
            Ok(_) => {
                tx.prepare_cached("DELETE FROM idem_records WHERE key = ?1")?
                    .execute([key.as_str()])?;
                Ok(Answer::Done)
            }
            Err(e) => Err(e),
        },
        Op::Replace {
            key,
            expected,
            new,
            audit,
        } => {
            let existing = match existing(key)? {
                Ok(r) => r,
                Err(e) => return Ok(Err(e)),
            };
            if let Err(e) = transition::check_expected(existing.as_ref(), key, *expected, now) {
                return Ok(Err(e));
            }
            if let Some(event) = audit {
                append_audit(tx, event)?;
            }
            match new {
                None => {
                    tx.prepare_cached("DELETE FROM idem_records WHERE key = ?1")?
                        .execute([key.as_str()])?;
                    Ok(Answer::Replaced(None))
                }
                Some(new) => {
                    let fence = fences.expect("loaded for a batch with replaces").take();
                    store(tx, &transition::replacement(key, new, fence))?;
                    Ok(Answer::Replaced(Some(fence)))
                }
            }
        }
        Op::Sweep { cutoff } => {
            // The expiry index yields the oldest rowids first; deleting by
            // rowid spares a lookup of each key.
            let n = tx
                .prepare_cached(
                    "DELETE FROM idem_records WHERE rowid IN (
                         SELECT rowid FROM idem_records
                         WHERE expires_at <= ?1
                         ORDER BY expires_at
                         LIMIT ?2
                     )",
                )?
                .execute(rusqlite::params![
                    millis((*cutoff).min(now)),
                    SWEEP_BATCH as i64
                ])?;
            Ok(Answer::Swept(n as u64))
        }
        Op::AppendAudit { event } => Ok(Answer::Appended(append_audit(tx, event)?)),
        Op::SweepAudit { cutoff } => {
            let n = tx
                .prepare_cached(
                    "DELETE FROM idem_audit WHERE seq IN (
                         SELECT seq FROM idem_audit WHERE at < ?1 ORDER BY at LIMIT ?2
                     )",
                )?
                .execute(rusqlite::params![millis(*cutoff), SWEEP_BATCH as i64])?;
            Ok(Answer::Swept(n as u64))
        }
    })
}

// The audit log (schema version 3): one row per event, `seq` from
// AUTOINCREMENT so a number is never handed out twice, even after the
// newest events were swept.

/// Append `event` inside the writer's transaction; returns its seq.
fn append_audit(tx: &Connection, event: &AuditEvent) -> rusqlite::Result<u64> {
    let stored = AuditEvent {
        seq: None,
        ..event.clone()
    };
    let text = serde_json::to_string(&stored).expect("an audit event serializes");
    tx.prepare_cached("INSERT INTO idem_audit (at, key, event) VALUES (?1, ?2, ?3)")?
        .execute(rusqlite::params![
            millis(event.at),
            event.key.as_str(),
            text
        ])?;
    Ok(tx.last_insert_rowid() as u64)
}

/// Read up to `limit` events of `query` after the position `after`, oldest
/// first.
fn audit_page(
    conn: &Connection,
    query: &AuditQuery,
    after: Option<(Timestamp, u64)>,
    limit: usize,
) -> rusqlite::Result<Result<AuditPage, StoreError>> {
    let limit = limit.clamp(1, audit::MAX_AUDIT_PAGE);
    let (after_at, after_seq) = after.map_or((-1, 0), |(at, seq)| (millis(at), seq as i64));
    let mut stmt = conn.prepare_cached(
        "SELECT seq, event FROM idem_audit
         WHERE (at > ?1 OR (at = ?1 AND seq > ?2))
           AND (?3 IS NULL OR key = ?3)
           AND at >= ?4 AND at < ?5
         ORDER BY at, seq
         LIMIT ?6",
    )?;
    let rows = stmt.query_map(
        rusqlite::params![
            after_at,
            after_seq,
            query.key.as_ref().map(|k| k.as_str()),
            query.since.map_or(i64::MIN, millis),
            query.until.map_or(i64::MAX, millis),
            limit as i64 + 1,
        ],
        |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?)),
    )?;
    let mut events = Vec::new();
    for row in rows {
        let (seq, text) = row?;
        match serde_json::from_str::<AuditEvent>(&text) {
            Ok(event) => events.push(AuditEvent {
                seq: Some(seq as u64),
                ..event
            }),
            Err(e) => {
                return Ok(Err(StoreError::Corrupt(CorruptRecord {
                    key: format!("audit event {seq}"),
                    detail: e.to_string(),
                })))
            }
        }
    }
    Ok(Ok(audit::page_of(events, limit)))
}

#[async_trait]
impl Store for SqliteStore {
    fn describe(&self) -> String {
        self.shared.name.clone()
    }

    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
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
            })
            .await?
        {
            Answer::Claim(claim) => Ok(claim),
            _ => unreachable!("the writer answers a claim with a claim"),
        }
    }

    /// Answers a claim that finds a completed call, an approval still to
    /// be decided or a key reused, from a read on this thread (see
    /// [`SqliteStore`'s module docs](self)). `None` for every claim that
    /// writes, and for a call in flight: the executor then shares one
    /// claim among this process's callers and waits for the owner.
    fn claim_local(&self, req: &ClaimRequest<'_>) -> Option<Result<ClaimOutcome, StoreError>> {
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
            answer => Some(Ok(answer)),
        }
    }

    async fn checkpoint(
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

    async fn renew(
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

    async fn complete(
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

    async fn release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        self.submit(Op::Release {
            key: key.clone(),
            fence,
        })
        .await
        .map(drop)
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Ok(self.read_live(key).await?.0)
    }

    async fn replace(
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
    async fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        let shared = self.shared.clone();
        let cursor = cursor.map(str::to_owned);
        let now = self.shared.clock.now();
        self.read(move |conn| {
            scan(conn, cursor.as_deref(), limit, now).map_err(|e| shared.sql(e))?
        })
        .await
    }

    async fn wait(
        &self,
        key: &IdempotencyKey,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.shared
            .waiters
            .wait(key, WaitFor::Completion, timeout, || self.read_live(key))
            .await
    }

    async fn wait_for_decision(
        &self,
        key: &IdempotencyKey,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.shared
            .waiters
            .wait(key, WaitFor::Decision, timeout, || self.read_live(key))
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
    async fn sweep(&self) -> Result<u64, StoreError> {
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

    async fn append_audit(&self, event: &AuditEvent) -> Result<u64, StoreError> {
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
    async fn audit(
        &self,
        query: &AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        let after = match cursor {
            None => None,
            Some(c) => Some(audit::parse_position_cursor(c).ok_or_else(|| {
                StoreError::Config(format!(
                    "{c:?} is not an audit cursor of {}",
                    self.shared.name
                ))
            })?),
        };
        // A store read as it is, at a version before the log existed
        // (opened read-only), has no log yet: an empty one.
        if self.schema_found.is_some_and(|v| v < AUDIT_SINCE) {
            return Ok(AuditPage::default());
        }
        let shared = self.shared.clone();
        let query = query.clone();
        self.read(move |conn| audit_page(conn, &query, after, limit).map_err(|e| shared.sql(e))?)
            .await
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.shared.check_open()?;
        Ok(self.shared.clock.now())
    }

    /// Commit the writes already queued (their callers are answered as
    /// usual), stop the writer thread and close every connection to the
    /// file. Later operations, and waiters, fail with
    /// [`StoreError::Closed`]. Dropping the store without closing it does
    /// the same in the background.
    async fn close(&self) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::record::{CallInfoRef, OutputJson};

    fn key(i: u64) -> IdempotencyKey {
        IdempotencyKey::parse(&format!("{i:064x}")).expect("64 hex digits")
    }

    async fn acquire(store: &SqliteStore, key: &IdempotencyKey) -> Fence {
        let f = Fingerprint::new("0".repeat(64));
        let req = ClaimRequest {
            key,
            tool: "t",
            fingerprint: &f,
            check_fingerprint: true,
            lease: Duration::from_secs(3600),
            info: CallInfoRef::EMPTY,
            worker: None,
        };
        match store.claim(&req).await.unwrap() {
            ClaimOutcome::Acquired { fence, .. } => fence,
            other => panic!("{other:?}"),
        }
    }

    async fn completed(store: &SqliteStore, key: &IdempotencyKey, ttl: Duration) {
        let fence = acquire(store, key).await;
        let outcome = Outcome::Success {
            output: OutputJson::from_value(&serde_json::json!({ "ok": true })),
        };
        store.complete(key, fence, &outcome, ttl).await.unwrap();
    }

    /// More expired records than one batch holds: a sweep takes them all,
    /// over several transactions, and leaves live and in-flight records.
    #[tokio::test]
    async fn a_sweep_deletes_every_expired_record_over_several_batches_and_nothing_else() {
        let bytes: [u8; 8] = rand::random();
        let dir =
            std::env::temp_dir().join(format!("idem-sweep-{}", crate::key::lower_hex(&bytes)));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("idem.db");
        let clock = ManualClock::new(1_000_000);
        let options = SqliteOptions::default()
            .synchronous(Synchronous::Normal)
            .clock(Arc::new(clock.clone()));
        let store = SqliteStore::open_with(&path, options).await.unwrap();

        let (template, live, in_flight) = (key(1), key(2), key(3));
        completed(&store, &template, Duration::from_secs(1)).await;
        completed(&store, &live, Duration::from_secs(3600)).await;
        acquire(&store, &in_flight).await;
        // Copies of the short-lived record under keys 1000 ..= 3499.
        let expired = 2 * SWEEP_BATCH + SWEEP_BATCH / 2;
        let conn = Connection::open(&path).unwrap();
        let copied = conn
            .execute(
                "WITH RECURSIVE s(i) AS (SELECT 1000 UNION ALL SELECT i + 1 FROM s WHERE i < ?1)
                 INSERT INTO idem_records (key, expires_at, record)
                 SELECT printf('%064x', i), t.expires_at,
                        CAST(replace(CAST(t.record AS TEXT), t.key, printf('%064x', i)) AS BLOB)
                 FROM s, idem_records AS t WHERE t.key = ?2",
                rusqlite::params![(1000 + expired - 1) as i64, template.as_str()],
            )
            .unwrap();
        assert_eq!(copied as u64, expired);
        assert!(store.get(&key(1000)).await.unwrap().is_some());

        clock.advance(Duration::from_secs(2));
        assert_eq!(store.sweep().await.unwrap(), expired + 1);
        let left: i64 = conn
            .query_row("SELECT count(*) FROM idem_records", [], |row| row.get(0))
            .unwrap();
        assert_eq!(left, 2, "the live and the in-flight record");
        assert!(store.get(&live).await.unwrap().is_some());
        assert!(store.get(&in_flight).await.unwrap().is_some());
        assert_eq!(store.sweep().await.unwrap(), 0);

        drop(conn);
        store.close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
