//! Reads: on the caller's thread when SQLite answers at once, otherwise
//! on a blocking thread from a small pool of connections; a page of
//! records, a page of the audit log.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use rusqlite::Connection;

use crate::codec::{load_with, millis};
use crate::SqliteStore;
use idem_runtime::audit::{self, AuditEvent, AuditPage, AuditQuery};
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{CorruptRecord, Record};
use idem_runtime::store::{Cause, OpenCursor, ScanPage, StoreError};

/// How many connections for reads on the caller's thread are kept open
/// when idle; more are opened while more threads read at once, and closed
/// after.
pub(super) const LOCAL_READERS: usize = 16;

impl SqliteStore {
    /// Run `f` on a read connection, off the async runtime.
    pub(super) async fn read<T: Send + 'static>(
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
    pub(super) fn read_here(
        &self,
        key: &IdempotencyKey,
    ) -> Option<Result<Option<Arc<Record>>, StoreError>> {
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
    pub(super) async fn read_record(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<Arc<Record>>, StoreError> {
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

    pub(super) async fn read_live(
        &self,
        key: &IdempotencyKey,
    ) -> Result<(Option<Record>, Timestamp), StoreError> {
        let record = self.read_record(key).await?;
        let now = self.shared.clock.now();
        let live = record.filter(|r| !r.is_expired(now));
        Ok((live.map(Arc::unwrap_or_clone), now))
    }
}

/// Read up to `limit` records after `cursor`, in key order.
pub(super) fn scan(
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

/// The statements of [`scan_open`]: the first page, and a page after a
/// cursor (`?1` its creation time, `?2` its key). Both walk the partial
/// index `idem_records_open` (schema version 4) in its order, so a page
/// reads about `limit` rows however large the store; `?3` is now, in
/// milliseconds (approval requests that lapsed are left out), `?4` how
/// many rows to read.
pub(super) const SCAN_OPEN_FIRST: &str = "SELECT open_at, key, record FROM idem_records
     WHERE open_at IS NOT NULL
       AND (expires_at IS NULL OR expires_at > ?3)
     ORDER BY open_at DESC, key DESC
     LIMIT ?4";

/// [`SCAN_OPEN_FIRST`] after the cursor `(?1, ?2)`.
pub(super) const SCAN_OPEN_AFTER: &str = "SELECT open_at, key, record FROM idem_records
     WHERE open_at IS NOT NULL AND (open_at, key) < (?1, ?2)
       AND (expires_at IS NULL OR expires_at > ?3)
     ORDER BY open_at DESC, key DESC
     LIMIT ?4";

/// Read up to `limit` open records after `after`, newest first, from the
/// index of open records. One row more than the page is read, to know
/// whether another page follows; the cursor is the page's last row.
pub(super) fn scan_open(
    conn: &Connection,
    after: Option<&OpenCursor>,
    limit: usize,
    now: Timestamp,
) -> rusqlite::Result<ScanPage> {
    let limit = limit.clamp(1, 10_000);
    let (sql, at, key) = match after {
        None => (SCAN_OPEN_FIRST, 0, ""),
        Some(c) => (SCAN_OPEN_AFTER, millis(c.created_at), c.key.as_str()),
    };
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(
        rusqlite::params![at, key, millis(now), limit as i64 + 1],
        |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, Vec<u8>>(2)?,
            ))
        },
    )?;
    let mut records = Vec::new();
    let mut corrupt = Vec::new();
    let mut last = None;
    let mut more = false;
    for (seen, row) in rows.enumerate() {
        let (open_at, key, bytes) = row?;
        if seen == limit {
            more = true;
            break;
        }
        match Record::from_bytes(&key, &bytes) {
            // Checked again on the record itself: the columns are the
            // writer's, the record is the truth.
            Ok(record) if record.is_expired(now) || !record.is_open() => {}
            Ok(record) => records.push(record),
            Err(e) => corrupt.push(e),
        }
        last = Some((open_at, key));
    }
    Ok(ScanPage {
        records,
        corrupt,
        cursor: last
            .filter(|_| more)
            .map(|(open_at, key)| format!("{open_at}:{key}")),
    })
}

/// Read up to `limit` events of `query` after the position `after`, oldest
/// first.
pub(super) fn audit_page(
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
