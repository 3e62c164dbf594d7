//! The schema: its version, the migrations that bring an older file up
//! to it, and the check of a file opened read-only.

use rusqlite::{ffi, Connection, OptionalExtension, TransactionBehavior};

use crate::shared::{open_to_check, Shared};
use idem_runtime::store::{Cause, StoreError};

/// The schema version this build writes and understands. Version 2 (idem
/// 0.2) adds records awaiting approval, call details and operator audit to
/// the stored record; a version 1 file is migrated in place on open (its
/// records read unchanged), and a version 1 build refuses a version 2 file
/// rather than misreading a record it does not know.
///
/// Version 3 adds the audit log (table `idem_audit`), and keeps completed
/// records with an unknown outcome until a person settles them: the
/// migration from 1 or 2 clears the expiry of those already stored.
///
/// Version 4 indexes the open records (in flight, awaiting approval,
/// approved, unknown outcome) for [`StoreExt::scan_open`]: column `open_at`,
/// the record's creation time while it is open and `NULL` once it
/// settles, kept by the writer with every record it writes, and the
/// partial index `idem_records_open` on `(open_at DESC, key DESC)`. The
/// migration from 3 fills the column from the records already stored.
///
/// [`StoreExt::scan_open`]: idem_runtime::store::StoreExt::scan_open
pub const SCHEMA_VERSION: u32 = 4;

/// The oldest schema version a store opened read-only
/// ([`SqliteStore::open_read_only`]) reads as it is, without migrating it:
/// version 1 records decode as version 2 ones lacking what version 1 did
/// not record. An older file is refused with [`StoreError::SchemaTooOld`].
///
/// [`SqliteStore::open_read_only`]: crate::SqliteStore::open_read_only
pub const OLDEST_READABLE: u32 = 1;

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
    // Version 4: the index of open records. Adding a nullable column
    // rewrites nothing; the open records already stored get their creation
    // time, read from the record (a row whose record is not JSON stays out:
    // it has no creation time to order it by). Open is as `Record::is_open`
    // says: anything but a completed record whose outcome is a success or
    // a failure.
    "ALTER TABLE idem_records ADD COLUMN open_at INTEGER;
     UPDATE idem_records
     SET open_at = json_extract(CAST(record AS TEXT), '$.created_at')
     WHERE CASE WHEN json_valid(CAST(record AS TEXT))
           THEN json_extract(CAST(record AS TEXT), '$.state') IS NOT 'completed'
             OR json_extract(CAST(record AS TEXT), '$.outcome.status') NOT IN ('success', 'failure')
           ELSE 0 END;
     CREATE INDEX IF NOT EXISTS idem_records_open ON idem_records (open_at DESC, key DESC)
         WHERE open_at IS NOT NULL;",
];

// Every migration step moves the schema one version.
const _: () = assert!(MIGRATIONS.len() + 1 == SCHEMA_VERSION as usize);

/// The schema version that added the audit log (`idem_audit`).
pub(super) const AUDIT_SINCE: u32 = 3;

/// The schema version that added the index of open records (`open_at`,
/// `idem_records_open`).
pub(super) const OPEN_INDEX_SINCE: u32 = 4;

/// The schema version `idem_meta` records, if any.
fn stored_version(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.query_row(
        "SELECT value FROM idem_meta WHERE name = 'schema_version'",
        [],
        |row| row.get(0),
    )
    .optional()
}

/// Create the schema in a fresh file, or check the version of an existing
/// one and migrate it to [`SCHEMA_VERSION`]; returns the version found
/// (`None`: created). Never touches a schema newer than [`SCHEMA_VERSION`].
pub(super) fn migrate(conn: &mut Connection, shared: &Shared) -> Result<Option<u32>, StoreError> {
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
    let found = stored_version(&tx).map_err(sql)?;
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
///
/// [`SqliteStore::open_read_only`]: crate::SqliteStore::open_read_only
pub(super) fn check_read_only(shared: &Shared) -> Result<u32, StoreError> {
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
    let found = stored_version(&conn).map_err(schema)?;
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
