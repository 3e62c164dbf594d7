//! How to open a [`SqliteStore`]: [`SqliteOptions`], and the `sqlite:`
//! URLs that name a file and set some of them.
//!
//! [`SqliteStore`]: crate::SqliteStore

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::audit::DEFAULT_AUDIT_RETENTION;
use idem_runtime::clock::{Clock, SystemClock};
use idem_runtime::store::url::sqlite_file;
use idem_runtime::store::{redact, BadOption, StoreError, UnknownOption};

/// How many bytes of decoded completed records a store keeps unless
/// [`SqliteOptions::record_cache`] says otherwise.
pub const DEFAULT_RECORD_CACHE: usize = 4 * 1024 * 1024;

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
    pub(super) fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// How to open a [`SqliteStore`].
///
/// ```
/// use idem_sqlite::{SqliteOptions, Synchronous};
/// use std::time::Duration;
///
/// let options = SqliteOptions::default()
///     .synchronous(Synchronous::Normal)
///     .busy_timeout(Duration::from_secs(10));
/// # let _ = options;
/// ```
///
/// [`SqliteStore`]: crate::SqliteStore
#[derive(Clone)]
pub struct SqliteOptions {
    pub(super) synchronous: Synchronous,
    pub(super) busy_timeout: Duration,
    pub(super) max_size: Option<u64>,
    pub(super) readers: usize,
    pub(super) record_cache: usize,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) audit_retention: Duration,
    pub(super) vfs: Option<String>,
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
            vfs: None,
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
            .field("vfs", &self.vfs)
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
    /// a [`idem_runtime::clock::ManualClock`] in tests). Every process sharing a
    /// file must use the same clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Keep audit events for `retention` (default
    /// [`DEFAULT_AUDIT_RETENTION`]): [`StoreExt::sweep`] deletes older ones.
    ///
    /// [`StoreExt::sweep`]: idem_runtime::store::StoreExt::sweep
    pub fn audit_retention(mut self, retention: Duration) -> Self {
        self.audit_retention = retention;
        self
    }

    /// Open every connection of the store — the writer's, the readers',
    /// the checkpointer's, the read-only check's — through the SQLite VFS
    /// registered under `name` (default: SQLite's default VFS, `unix` or
    /// `win32`).
    ///
    /// A VFS is the layer under SQLite that reads, writes and syncs the
    /// files: one registered by the application (with
    /// `sqlite3_vfs_register`, before the store opens) can encrypt or
    /// compress the pages, keep the files somewhere else than a local
    /// disk, or, in tests, record every fsync and throw away what was not
    /// synced, to show what a power cut leaves (`idem_testkit::power_cut`
    /// does). Every process sharing the file must read it the same way: a
    /// VFS that changes the bytes on disk is for every one of them or for
    /// none. An unknown name fails the opening with
    /// [`StoreError::Unavailable`].
    pub fn vfs(mut self, name: impl Into<String>) -> Self {
        self.vfs = Some(name.into());
        self
    }
}

/// The options a SQLite URL's query may hold.
const KNOWN_OPTIONS: &str = "synchronous=full|normal, busy_timeout_ms=N";

/// What to write for a SQLite URL.
const URL_FORMS: &str = "write sqlite://idem.db or sqlite:///absolute/path.db";

/// The file and options of a `sqlite:` URL, the query's options applied to
/// `options`.
pub(super) fn parse_url(
    url: &str,
    mut options: SqliteOptions,
) -> Result<(&str, SqliteOptions), StoreError> {
    let invalid = |reason: &str| StoreError::InvalidUrl {
        store: redact(url),
        reason: format!("{reason}; {URL_FORMS}").into(),
    };
    let Some((path, query)) = sqlite_file(url) else {
        return Err(invalid("not a SQLite URL"));
    };
    if path.is_empty() {
        return Err(invalid("the URL names no file"));
    }
    let bad = |option, value: &str, expected| {
        StoreError::from(BadOption {
            store: redact(url),
            option,
            value: value.to_owned(),
            expected,
        })
    };
    let mut unknown = Vec::new();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        options = match (name, value.to_ascii_lowercase().as_str()) {
            ("synchronous", "full") => options.synchronous(Synchronous::Full),
            ("synchronous", "normal") => options.synchronous(Synchronous::Normal),
            ("synchronous", _) => return Err(bad("synchronous", value, "full or normal")),
            ("busy_timeout_ms", ms) => match ms.parse() {
                Ok(ms) => options.busy_timeout(Duration::from_millis(ms)),
                Err(_) => return Err(bad("busy_timeout_ms", value, "a number of milliseconds")),
            },
            _ => {
                unknown.push(name.to_owned());
                options
            }
        };
    }
    if !unknown.is_empty() {
        return Err(UnknownOption {
            store: redact(url),
            backend: "SQLite",
            options: unknown,
            known: KNOWN_OPTIONS,
        }
        .into());
    }
    Ok((path, options))
}
