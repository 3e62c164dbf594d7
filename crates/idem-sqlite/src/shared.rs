//! The state the store's threads share: the file's path and name, the
//! options, the readers, the waiters; and the read-only connections
//! opened from it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

use crate::codec::DecodedRecords;
use crate::options::SqliteOptions;
use idem_runtime::clock::Clock;
use idem_runtime::store::backend::Waiters;
use idem_runtime::store::StoreError;

/// The longest a waiter goes without re-reading its record, to see a
/// completion written by another process.
pub const CROSS_PROCESS_POLL: Duration = Duration::from_millis(100);

pub(super) struct Shared {
    pub(super) path: PathBuf,
    pub(super) name: String,
    pub(super) busy_timeout: Duration,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) audit_retention: Duration,
    pub(super) idle_readers: Mutex<Vec<Connection>>,
    pub(super) read_slots: Semaphore,
    /// Connections for reads on the caller's thread
    /// ([`SqliteStore::read_here`]), opened on demand, at most
    /// [`LOCAL_READERS`] kept idle.
    ///
    /// [`LOCAL_READERS`]: crate::reader::LOCAL_READERS
    pub(super) local_readers: Mutex<Vec<Connection>>,
    /// Completed records read recently, decoded.
    pub(super) decoded: DecodedRecords,
    /// Checkpoints asked of the checkpointer thread, and finished by it
    /// (done or failed): a sweep waits for the two to meet between its
    /// batches.
    pub(super) checkpoints_asked: AtomicU64,
    pub(super) checkpoints_done: AtomicU64,
    pub(super) waiters: Waiters,
    pub(super) closed: AtomicBool,
    /// Opened with [`SqliteStore::open_read_only`]: no writer, every
    /// connection read-only.
    pub(super) read_only: bool,
    /// The VFS every connection is opened with ([`SqliteOptions::vfs`];
    /// `None`: SQLite's default).
    pub(super) vfs: Option<String>,
}

impl Shared {
    pub(super) fn new(path: &Path, options: &SqliteOptions, read_only: bool) -> Shared {
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
            decoded: DecodedRecords::new(options.record_cache),
            checkpoints_asked: AtomicU64::new(0),
            checkpoints_done: AtomicU64::new(0),
            waiters: Waiters::new(CROSS_PROCESS_POLL),
            closed: AtomicBool::new(false),
            read_only,
            vfs: options.vfs.clone(),
        }
    }

    /// Open a connection to `target` (the file, or a `file:` URI with
    /// [`OpenFlags::SQLITE_OPEN_URI`]) through the store's VFS: every
    /// connection of the store is opened here.
    pub(super) fn open_connection(
        &self,
        target: impl AsRef<Path>,
        flags: OpenFlags,
    ) -> rusqlite::Result<Connection> {
        match &self.vfs {
            None => Connection::open_with_flags(target, flags),
            Some(vfs) => Connection::open_with_flags_and_vfs(target, flags, vfs.as_str()),
        }
    }

    /// [`StoreError::Closed`] once [`StoreExt::close`] was called.
    ///
    /// [`StoreExt::close`]: idem_runtime::store::StoreExt::close
    pub(super) fn check_open(&self) -> Result<(), StoreError> {
        match self.closed.load(Ordering::SeqCst) {
            false => Ok(()),
            true => Err(self.closed_error()),
        }
    }

    /// A connection for [`SqliteStore::read_here`]: no busy timeout, so a
    /// lock it meets fails at once and the read goes the usual way.
    pub(super) fn open_local_reader(&self) -> rusqlite::Result<Connection> {
        let conn = self.open_connection(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::ZERO)?;
        Ok(conn)
    }

    pub(super) fn open_reader(&self) -> Result<Connection, StoreError> {
        let access = match self.read_only {
            true => OpenFlags::SQLITE_OPEN_READ_ONLY,
            false => OpenFlags::SQLITE_OPEN_READ_WRITE,
        };
        let conn = self
            .open_connection(&self.path, access | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .map_err(|e| self.sql(e))?;
        conn.busy_timeout(self.busy_timeout)
            .map_err(|e| self.sql(e))?;
        Ok(conn)
    }
}

/// A read-only connection that creates nothing next to the file: a WAL
/// database no process has open (no `-wal` file) would otherwise get new
/// `-wal` and `-shm` files, so it is read `immutable` (nobody is writing
/// it, or the `-wal` file would be there).
pub(super) fn open_to_check(shared: &Shared) -> rusqlite::Result<Connection> {
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
        shared.open_connection(
            format!("{}?immutable=1", file_uri(path)),
            flags | OpenFlags::SQLITE_OPEN_URI,
        )
    } else {
        shared.open_connection(path, flags)
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
