//! Pieces shared by the SQLite store's test files (`mod sqlite_support;`,
//! beside `mod support;`): records written through the store, SQL run
//! beside it, and another process's write lock.
#![allow(dead_code)] // each test file uses its own subset

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::clock::ManualClock;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::Outcome;
use idem_sqlite::{SqliteOptions, SqliteStore};

use idem_testkit::store_cases::completed;

/// Claim and complete `key` with `outcome`.
pub(crate) async fn record(store: &SqliteStore, key: &IdempotencyKey, outcome: &Outcome) {
    completed(store, key, outcome, Duration::from_secs(3600)).await;
}

/// Run `sql` on the file at `path` from a connection of its own.
pub(crate) fn sqlite(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(sql).unwrap();
}

/// Hold the write lock of the file at `path` from another connection (as
/// another process would) until the returned guard is dropped. Requests
/// sent meanwhile queue up behind the store's writer and share its next
/// transaction.
pub(crate) struct WriteLock(rusqlite::Connection);

impl WriteLock {
    pub(crate) fn take(path: &Path) -> WriteLock {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        WriteLock(conn)
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        self.0.execute_batch("ROLLBACK").unwrap();
    }
}

/// A store on `path` whose clock the test moves.
pub(crate) async fn store_with_clock(path: &Path, clock: &ManualClock) -> SqliteStore {
    let options = SqliteOptions::default().clock(Arc::new(clock.clone()));
    SqliteStore::open_with(path, options).await.unwrap()
}

/// The bytes of `path` and of its `-wal` and `-shm` files (`None`: absent).
pub(crate) fn snapshot(path: &Path) -> [Option<Vec<u8>>; 3] {
    let with = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        std::fs::read(name).ok()
    };
    [std::fs::read(path).ok(), with("-wal"), with("-shm")]
}

/// The schema version the file at `path` records.
pub(crate) fn schema_version(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap()
}

/// A table of this one backend, as a program's table holds it: what
/// `idem::store::connect` and `migrate` do with a URL of this scheme.
pub static BACKENDS: idem_runtime::store::backend::Backends =
    idem_runtime::store::backend::Backends::new(&[&idem_sqlite::BACKEND]);
