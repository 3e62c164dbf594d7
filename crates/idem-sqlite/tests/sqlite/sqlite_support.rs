//! Pieces shared by the SQLite store's test files (`mod sqlite_support;`,
//! beside `mod support;`): records written through the store, SQL run
//! beside it, and another process's write lock.
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::clock::ManualClock;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::Outcome;
use idem_runtime::store::StoreExt;
use idem_sqlite::{SqliteOptions, SqliteStore};

use idem_testkit::store_cases::{completed, fingerprint};
use idem_testkit::TempDir;

/// A fresh store file, `idem.db` in a temporary directory of its own
/// (deleted with the guard).
pub(crate) fn fresh_file() -> (TempDir, PathBuf) {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    (dir, path)
}

/// A [`fresh_file`] whose store records schema version `version`.
pub(crate) async fn file_at_schema_version(version: i64) -> (TempDir, PathBuf) {
    let (dir, path) = fresh_file();
    SqliteStore::open(&path).await.unwrap().close().await;
    sqlite(
        &path,
        &format!("UPDATE idem_meta SET value = {version} WHERE name = 'schema_version'"),
    );
    (dir, path)
}

/// A file as idem 0.1 wrote it (schema version 1) at `path`, holding the
/// record of `done`, a sent email (`{"id": "m-1"}`), and, when given, of
/// `unknown`, a charge whose outcome is unknown, both as 0.1 serialized
/// them.
pub(crate) fn version_1_file(path: &Path, done: &IdempotencyKey, unknown: Option<&IdempotencyKey>) {
    let far = 4_000_000_000_000u64;
    let fp = fingerprint();
    let mut sql = format!(
        r#"CREATE TABLE idem_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
           CREATE TABLE idem_records (key TEXT PRIMARY KEY NOT NULL, expires_at INTEGER, record BLOB NOT NULL);
           CREATE INDEX idem_records_expiry ON idem_records (expires_at) WHERE expires_at IS NOT NULL;
           INSERT INTO idem_meta (name, value) VALUES ('next_fence', 3), ('schema_version', 1);
           INSERT INTO idem_records VALUES ('{done}', {far}, CAST('{{"key":"{done}","tool":"send_email","fingerprint":"{fp}","created_at":1700000000000,"state":"completed","fence":1,"outcome":{{"status":"success","output":"{{\"id\":\"m-1\"}}"}},"completed_at":1700000000100,"expires_at":{far}}}' AS BLOB));"#
    );
    if let Some(unknown) = unknown {
        sql += &format!(
            r#"INSERT INTO idem_records VALUES ('{unknown}', {far}, CAST('{{"key":"{unknown}","tool":"charge_card","fingerprint":"{fp}","created_at":1700000000000,"state":"completed","fence":2,"outcome":{{"status":"unknown","reason":"owner vanished"}},"completed_at":1700000000100,"expires_at":{far},"steps":{{"idem:attempt":1}}}}' AS BLOB));"#
        );
    }
    sqlite(path, &sql);
}

/// A [`fresh_file`] whose store holds one record, `key` completed with
/// `outcome`, and is closed.
pub(crate) async fn file_with_a_record(
    key: &IdempotencyKey,
    outcome: &Outcome,
) -> (TempDir, PathBuf) {
    let (dir, path, store) = fresh_store().await;
    record(&store, key, outcome).await;
    store.close().await;
    (dir, path)
}

/// A store on a [`fresh_file`] reading `ManualClock::new(1_000_000)`: the
/// guard, the file, the clock and the store.
pub(crate) async fn fresh_store_with_clock() -> (TempDir, PathBuf, ManualClock, SqliteStore) {
    let (dir, path) = fresh_file();
    let clock = ManualClock::new(1_000_000);
    let store = store_with_clock(&path, &clock).await;
    (dir, path, clock, store)
}

/// A store on a [`fresh_file`]: the guard, the file and the store.
pub(crate) async fn fresh_store() -> (TempDir, PathBuf, SqliteStore) {
    let (dir, path) = fresh_file();
    let store = SqliteStore::open(&path).await.unwrap();
    (dir, path, store)
}

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

/// A table of this one backend, as a program's table holds it: what
/// `idem::store::connect` and `migrate` do with a URL of this scheme.
pub static BACKENDS: idem_runtime::store::backend::Backends =
    idem_runtime::store::backend::Backends::new(&[&idem_sqlite::BACKEND]);
