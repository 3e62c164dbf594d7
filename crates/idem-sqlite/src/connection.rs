//! Opening the file: the store's constructors, the state its threads
//! share, and the connections of the writer, the readers and the
//! read-only check.

use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;

use crate::checkpointer::start_checkpointer;
use crate::options::{parse_url, SqliteOptions};
use crate::schema::{check_read_only, migrate};
use crate::shared::Shared;
use crate::writer::Writer;
use crate::SqliteStore;
use idem_runtime::store::{Cause, StoreError};

impl SqliteStore {
    /// Open (creating if needed) the store a `sqlite:` URL names, with
    /// default options: `sqlite://idem.db` (relative to the working
    /// directory) or `sqlite:///var/lib/app/idem.db`. The query may set
    /// `synchronous=full` (default) or `synchronous=normal` (see
    /// [`Synchronous`]) and `busy_timeout_ms=N`.
    ///
    /// A URL that is not a SQLite URL or names no file is a
    /// [`StoreError::InvalidUrl`], one with an unknown option a
    /// [`StoreError::UnknownOption`], one with an option's value it cannot
    /// take a [`StoreError::BadOption`]; otherwise it fails as
    /// [`SqliteStore::open_with`] does.
    ///
    /// [`Synchronous`]: crate::Synchronous
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
    /// ([`StoreExt::get`], [`StoreExt::scan`], a claim that finds a record it
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
    ///
    /// [`StoreExt::get`]: idem_runtime::store::StoreExt::get
    /// [`StoreExt::scan`]: idem_runtime::store::StoreExt::scan
    /// [`OLDEST_READABLE`]: crate::OLDEST_READABLE
    /// [`SCHEMA_VERSION`]: crate::SCHEMA_VERSION
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
    ///
    /// [`SCHEMA_VERSION`]: crate::SCHEMA_VERSION
    pub fn schema_found(&self) -> Option<u32> {
        self.schema_found
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
    let mut conn = shared
        .open_connection(
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
