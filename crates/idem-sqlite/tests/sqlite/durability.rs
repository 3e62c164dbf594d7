//! What the SQLite store keeps across restarts, and what it does not
//! write: a completed record survives a restart, fences are not handed out
//! again, a duplicate writes nothing, and a large sweep paced by the
//! checkpointer deletes every expired record.

use std::path::Path;
use std::time::Duration;

use crate::sqlite_support::{
    file_with_a_record, fresh_file, fresh_store, fresh_store_with_clock, record, sqlite,
};
use idem_conformance::random_key;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, StoreError};
use idem_sqlite::SqliteStore;
use idem_testkit::store_cases::{acquire, completed, fingerprint, request, sent};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_record_survives_a_restart_of_the_store() {
    let key = random_key();
    let (_dir, path) = file_with_a_record(&key, &sent("m-1")).await;

    let reopened = SqliteStore::open(&path).await.unwrap();
    let f = fingerprint();
    match reopened.claim(&request(&key, &f)).await.unwrap() {
        ClaimOutcome::Completed(r) => assert_eq!(r.outcome(), Some(&sent("m-1"))),
        other => panic!("the completed call was forgotten: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_of_a_completed_call_writes_nothing() {
    let (_dir, path, store) = fresh_store().await;
    let key = random_key();
    record(&store, &key, &sent("m-1")).await;
    let wal = path.with_extension("db-wal");
    let version = |p: &Path| {
        let conn = rusqlite::Connection::open(p).unwrap();
        (
            std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0),
            conn.query_row("SELECT count(*) FROM idem_records", [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap(),
        )
    };
    let before = version(&path);
    let f = fingerprint();
    for _ in 0..20 {
        assert!(matches!(
            store.claim(&request(&key, &f)).await.unwrap(),
            ClaimOutcome::Completed(_)
        ));
    }
    assert_eq!(version(&path), before, "a duplicate appended to the WAL");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_are_not_handed_out_again_after_a_restart() {
    let (_dir, path) = fresh_file();
    let key = random_key();
    let store = SqliteStore::open(&path).await.unwrap();
    let first = acquire(&store, &key).await;
    store.release(&key, first).await.unwrap();
    store.close().await;
    let store = SqliteStore::open(&path).await.unwrap();
    let second = acquire(&store, &key).await;
    assert!(
        second > first,
        "fence {second} after a restart, {first} before"
    );
    assert!(matches!(
        store
            .complete(&key, first, &sent("m"), Duration::from_secs(60))
            .await,
        Err(StoreError::StaleFence { .. })
    ));
}

/// A sweep large enough to write thousands of WAL pages (so the
/// checkpointer is asked several times and the sweep waits for it between
/// batches) still deletes every expired record and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_paced_by_the_checkpointer_deletes_every_expired_record() {
    let (_dir, path, clock, store) = fresh_store_with_clock().await;
    let (expired, live) = (random_key(), random_key());
    completed(&store, &expired, &sent("m-1"), Duration::from_secs(1)).await;
    record(&store, &live, &sent("m-2")).await;
    // 5,000 copies of the expired record under random keys.
    sqlite(
        &path,
        &format!(
            "WITH RECURSIVE s(i, k) AS (
                 SELECT 0, printf('%016x%016x%016x%016x', random(), random(), random(), random())
                 UNION ALL SELECT i + 1,
                     printf('%016x%016x%016x%016x', random(), random(), random(), random())
                 FROM s WHERE i + 1 < 5000
             )
             INSERT INTO idem_records (key, expires_at, record)
             SELECT k, t.expires_at, CAST(replace(CAST(t.record AS TEXT), t.key, k) AS BLOB)
             FROM s, idem_records AS t WHERE t.key = '{}'",
            expired.as_str()
        ),
    );
    clock.advance(Duration::from_secs(2));
    assert_eq!(store.sweep().await.unwrap(), 5_001);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let left: i64 = conn
        .query_row("SELECT count(*) FROM idem_records", [], |row| row.get(0))
        .unwrap();
    assert_eq!(left, 1, "only the live record is left");
    assert!(store.get(&live).await.unwrap().is_some());
    assert_eq!(store.sweep().await.unwrap(), 0);
}
