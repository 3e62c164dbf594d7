//! Tests of the SQLite store's internals.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use crate::writer::SWEEP_BATCH;
use crate::{SqliteOptions, SqliteStore, Synchronous};
use idem_runtime::clock::ManualClock;
use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::record::{CallInfoRef, Fence, Outcome, OutputJson};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, ClaimRequest};

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
        durable: true,
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
    let dir = fresh_dir("idem-sweep");
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

/// A store opened through a named VFS opens every connection with it: the
/// default VFS under its own name works like no name at all, and an
/// unknown name fails the opening, creating nothing.
#[tokio::test]
async fn the_store_opens_its_connections_through_the_vfs_named_in_its_options() {
    let dir = fresh_dir("idem-vfs");

    let path = dir.join("unknown.db");
    let err = SqliteStore::open_with(&path, SqliteOptions::default().vfs("no-such-vfs"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, idem_runtime::store::StoreError::Unavailable { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("no-such-vfs"), "{err}");
    assert!(!path.exists(), "an unknown VFS created the file");

    // SAFETY: sqlite3_vfs_find with a null name only reads SQLite's list
    // of VFSes; the default VFS it returns lives as long as the process.
    let default = unsafe { rusqlite::ffi::sqlite3_vfs_find(std::ptr::null()) };
    assert!(!default.is_null());
    // SAFETY: zName of a registered VFS is a NUL-terminated static string.
    let name = unsafe { std::ffi::CStr::from_ptr((*default).zName) };
    let name = name.to_str().unwrap().to_owned();
    let path = dir.join("default.db");
    let store = SqliteStore::open_with(&path, SqliteOptions::default().vfs(name))
        .await
        .unwrap();
    let k = key(7);
    completed(&store, &k, Duration::from_secs(3600)).await;
    assert!(store.get(&k).await.unwrap().is_some());
    store.close().await;

    std::fs::remove_dir_all(&dir).unwrap();
}

/// A new directory `PREFIX-RANDOM` in the system's temporary directory
/// (each test removes its own).
fn fresh_dir(prefix: &str) -> std::path::PathBuf {
    let bytes: [u8; 8] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let dir = std::env::temp_dir().join(format!("{prefix}-{hex}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The open scan's statements walk the index of open records, in its
/// order (no sort), starting at the cursor: a page reads about `limit`
/// rows of the index, not the table, with statistics or without.
#[tokio::test]
async fn the_open_scan_reads_the_index_of_open_records_from_its_cursor() {
    use crate::reader::{SCAN_OPEN_AFTER, SCAN_OPEN_FIRST};

    let dir = fresh_dir("idem-open");
    let path = dir.join("idem.db");
    let options = SqliteOptions::default().synchronous(Synchronous::Normal);
    let store = SqliteStore::open_with(&path, options).await.unwrap();
    let (template, open) = (key(1), key(2));
    completed(&store, &template, Duration::from_secs(3600)).await;
    acquire(&store, &open).await;
    // 20,000 settled records beside the open one.
    let conn = Connection::open(&path).unwrap();
    conn.execute(
        "WITH RECURSIVE s(i) AS (SELECT 1000 UNION ALL SELECT i + 1 FROM s WHERE i < 20999)
         INSERT INTO idem_records (key, expires_at, record, open_at)
         SELECT printf('%064x', i), t.expires_at,
                CAST(replace(CAST(t.record AS TEXT), t.key, printf('%064x', i)) AS BLOB), NULL
         FROM s, idem_records AS t WHERE t.key = ?1",
        [template.as_str()],
    )
    .unwrap();
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt
            .query_map(rusqlite::params![0i64, "", 0i64, 51i64], |row| {
                row.get::<_, String>(3)
            })
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
    };
    for analyzed in [false, true] {
        if analyzed {
            conn.execute_batch("ANALYZE").unwrap();
        }
        let first = plan(SCAN_OPEN_FIRST);
        let after = plan(SCAN_OPEN_AFTER);
        println!("first page: {first}\nafter a cursor: {after}");
        for plan in [&first, &after] {
            assert!(plan.contains("USING INDEX idem_records_open"), "{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "sorted: {plan}");
        }
        assert!(after.contains("(open_at,key)<(?,?)"), "{after}");
    }
    // And what the index answers is the open record alone.
    let page = store.scan_open(None, 50).await.unwrap();
    let keys: Vec<_> = page.records.iter().map(|r| r.key.clone()).collect();
    assert_eq!(keys, [open]);
    assert_eq!(page.cursor, None);

    drop(conn);
    store.close().await;
    std::fs::remove_dir_all(&dir).unwrap();
}
