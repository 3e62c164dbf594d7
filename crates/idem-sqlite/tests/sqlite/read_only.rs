//! The SQLite store read-only: a read-only file is refused for writing,
//! and a store opened read-only reads beside a live one, writes nothing,
//! leaves other applications' files and old schemas byte for byte, and
//! refuses what it cannot read naming what to do.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use crate::sqlite_support::{
    file_at_schema_version, file_with_a_record, fresh_file, record, snapshot, sqlite,
    version_1_file,
};
use idem_conformance::random_key;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, StoreError};
use idem_sqlite::SqliteStore;
use idem_testkit::store_cases::{
    acquire, every_write_is_refused_read_only, fingerprint, request, sent, sqlite_schema_version,
};
use idem_testkit::TempDir;

/// Set or clear a file attribute (`+i`: immutable, even for root).
fn chattr(change: &str, path: &Path) -> bool {
    std::process::Command::new("chattr")
        .arg(change)
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_file_is_refused_before_anything_runs() {
    let key = random_key();
    let (_dir, path) = file_with_a_record(&key, &sent("m-1")).await;

    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    // Root ignores permission bits; an immutable file stops root too.
    let immutable = chattr("+i", &path);
    let writable = std::fs::OpenOptions::new().write(true).open(&path).is_ok();
    let result = if writable {
        None
    } else {
        Some(SqliteStore::open(&path).await)
    };
    if immutable {
        assert!(chattr("-i", &path));
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    match result {
        None => eprintln!(
            "SKIPPED read_only_file_is_refused_before_anything_runs: cannot make a file read-only here"
        ),
        Some(Err(StoreError::ReadOnly { store, .. })) => assert!(store.contains("idem.db")),
        Some(other) => panic!("expected ReadOnly, got {other:?}"),
    }
    let reopened = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        reopened.get(&key).await.unwrap().unwrap().outcome(),
        Some(&sent("m-1"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_applications_database_opened_read_only_is_refused_and_left_byte_for_byte() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    // One in rollback-journal mode, one in WAL mode closed by its
    // application (no -wal or -shm file left), and a text file.
    let rollback = dir.path().join("other-app.db");
    sqlite(
        &rollback,
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users (name) VALUES ('ana');",
    );
    let wal = dir.path().join("other-wal-app.db");
    sqlite(
        &wal,
        "PRAGMA journal_mode = WAL; CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('hi');",
    );
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database at all\n".repeat(100)).unwrap();
    for path in [&rollback, &wal, &text] {
        let before = snapshot(path);
        assert!(before[0].is_some() && before[1].is_none() && before[2].is_none());
        let url = format!("sqlite://{}", path.display());
        for refusal in [
            SqliteStore::open_read_only(path).await.map(drop),
            crate::sqlite_support::BACKENDS
                .connect_read_only(&url)
                .await
                .map(drop),
        ] {
            match refusal {
                Err(e @ StoreError::NotAnIdemStore { .. }) => {
                    assert!(e.to_string().contains("is not an idem store"), "{e}");
                    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
                }
                other => panic!("{}: expected NotAnIdemStore, got {other:?}", path.display()),
            }
        }
        assert_eq!(snapshot(path), before, "{} changed", path.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_file_opened_read_only_is_refused_and_not_created() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("typo.db");
    match SqliteStore::open_read_only(&path).await {
        Err(e @ StoreError::NoStore { .. }) => {
            assert!(e.to_string().contains("no idem store at"), "{e}")
        }
        other => panic!("expected NoStore, got {other:?}"),
    }
    assert_eq!(snapshot(&path), [None, None, None]);
}

/// A worker's store is live (its WAL not yet checkpointed) while an
/// operator reads the file read-only: the reader sees every commit,
/// refuses every write, and the worker carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_read_only_beside_a_live_store_sees_its_commits_and_writes_nothing() {
    let (_dir, path) = fresh_file();
    let live = SqliteStore::open(&path).await.unwrap();
    let (done, running) = (random_key(), random_key());
    record(&live, &done, &sent("m-1")).await;
    let fence = acquire(&live, &running).await;

    let reader = SqliteStore::open_read_only(&path).await.unwrap();
    assert!(reader.is_read_only());
    assert_eq!(reader.schema_found(), Some(idem_sqlite::SCHEMA_VERSION));
    let page = reader.scan(None, 100).await.unwrap();
    let mut keys: Vec<_> = page.records.iter().map(|r| r.key.clone()).collect();
    keys.sort();
    let mut expected = vec![done.clone(), running.clone()];
    expected.sort();
    assert_eq!(keys, expected);
    assert_eq!(
        reader.get(&done).await.unwrap().unwrap().outcome(),
        Some(&sent("m-1"))
    );
    // A later commit of the worker is seen.
    let later = random_key();
    record(&live, &later, &sent("m-2")).await;
    assert!(reader.get(&later).await.unwrap().is_some());
    // A duplicate of a completed call is answered; anything else writes.
    let f = fingerprint();
    assert!(matches!(
        reader.claim(&request(&done, &f)).await.unwrap(),
        ClaimOutcome::Completed(_)
    ));
    every_write_is_refused_read_only(&reader, &running, fence).await;
    live.complete(&running, fence, &sent("m-3"), Duration::from_secs(60))
        .await
        .unwrap();
    reader.close().await;
    live.close().await;

    // No process has the file open now: read-only, it reads the same and
    // the database file is not written.
    let before = snapshot(&path)[0].clone();
    let reader = SqliteStore::open_read_only(&path).await.unwrap();
    assert_eq!(reader.scan(None, 100).await.unwrap().records.len(), 3);
    reader.close().await;
    assert_eq!(snapshot(&path)[0], before);
    assert_eq!(
        sqlite_schema_version(&path),
        i64::from(idem_sqlite::SCHEMA_VERSION)
    );
    // And the worker opens it again as usual.
    let live = SqliteStore::open(&path).await.unwrap();
    assert!(live.get(&running).await.unwrap().is_some());
    live.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_file_reads_read_only_and_stays_version_1() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem-0.1.db");
    let done = random_key();
    version_1_file(&path, &done, None);
    let before = snapshot(&path);
    let reader = SqliteStore::open_read_only(&path).await.unwrap();
    assert_eq!(reader.schema_found(), Some(1));
    let page = reader.scan(None, 10).await.unwrap();
    assert_eq!(page.records.len(), 1);
    assert_eq!(page.records[0].key, done);
    reader.close().await;
    assert_eq!(
        snapshot(&path),
        before,
        "the file was not migrated or written"
    );
    assert_eq!(sqlite_schema_version(&path), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_read_only_cannot_read_are_refused_naming_what_to_do() {
    let (_dir, path) = file_at_schema_version(9).await;
    match SqliteStore::open_read_only(&path).await {
        Err(StoreError::SchemaTooNew { found: 9, .. }) => {}
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
    // Older than any version this build reads without migrating.
    sqlite(
        &path,
        "UPDATE idem_meta SET value = 0 WHERE name = 'schema_version'",
    );
    match SqliteStore::open_read_only(&path).await {
        Err(e @ StoreError::SchemaTooOld { found: 0, .. }) => {
            assert!(e.to_string().contains("idem migrate"), "{e}")
        }
        other => panic!("expected SchemaTooOld, got {other:?}"),
    }
    sqlite(&path, "DELETE FROM idem_meta WHERE name = 'schema_version'");
    assert!(matches!(
        SqliteStore::open_read_only(&path).await,
        Err(StoreError::NotAnIdemStore { .. })
    ));
}
