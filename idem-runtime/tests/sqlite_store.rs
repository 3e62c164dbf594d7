//! The SQLite store beyond the conformance suite: restarts, several
//! processes on one file, durability costs, and bad files.
#![cfg(feature = "sqlite")]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::clock::ManualClock;
use idem_runtime::conformance::random_key;
use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::record::{Outcome, OutputJson};
use idem_runtime::store::{ClaimOutcome, SqliteOptions, SqliteStore, Store, StoreError};
use idem_testkit::servers::{claim_from_processes, run_child, TempDir};
use serde_json::json;
use support::{
    acquire, approve, driver_error, every_write_is_refused_read_only, fingerprint, park, request,
    sent, wake_up_latencies,
};

/// Claim and complete `key` with `outcome`.
async fn record(store: &SqliteStore, key: &IdempotencyKey, outcome: &Outcome) {
    let fence = acquire(store, key).await;
    store
        .complete(key, fence, outcome, Duration::from_secs(3600))
        .await
        .unwrap();
}

fn sqlite(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(sql).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_record_survives_a_restart_of_the_store() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let key = random_key();
    let store = SqliteStore::open(&path).await.unwrap();
    record(&store, &key, &sent("m-1")).await;
    store.close().await;

    let reopened = SqliteStore::open(&path).await.unwrap();
    let f = fingerprint();
    match reopened.claim(&request(&key, &f)).await.unwrap() {
        ClaimOutcome::Completed(r) => assert_eq!(r.outcome(), Some(&sent("m-1"))),
        other => panic!("the completed call was forgotten: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_of_a_completed_call_writes_nothing() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).await.unwrap();
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

// The entry point of the child processes of the multi-process tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child processes started by the multi-process tests"]
async fn multi_process_child() {
    run_child().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_processes_claiming_one_key_in_one_file_have_one_owner() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("shared.db");
    // Create the file first so the children race on claims, not on setup.
    SqliteStore::open(&path).await.unwrap().close().await;
    let url = format!("sqlite://{}", path.display());
    let key = random_key();
    let report = tokio::task::spawn_blocking(move || {
        claim_from_processes("multi_process_child", &url, &key, 4, 200)
    })
    .await
    .unwrap();
    assert_eq!(report.runs, 1, "more than one process ran the tool");
    assert_eq!(report.finished, 800);
    assert_eq!(report.outcomes.len(), 1, "claimants saw different outcomes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_row_is_reported_and_left_untouched() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let key = random_key();
    record(&store, &key, &sent("m-1")).await;
    sqlite(
        &path,
        &format!(
            "UPDATE idem_records SET record = x'00ff13' WHERE key = '{}'",
            key.as_str()
        ),
    );
    let f = fingerprint();
    assert!(matches!(
        store.claim(&request(&key, &f)).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.claim_local(&request(&key, &f)),
        Some(Err(StoreError::Corrupt(_)))
    ));
    assert!(matches!(store.get(&key).await, Err(StoreError::Corrupt(_))));
    let fence = idem_runtime::record::Fence(1);
    assert!(matches!(
        store
            .complete(&key, fence, &sent("m-2"), Duration::from_secs(1))
            .await,
        Err(StoreError::Corrupt(_))
    ));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let bytes: Vec<u8> = conn
        .query_row(
            "SELECT record FROM idem_records WHERE key = ?1",
            [key.as_str()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        bytes,
        vec![0x00, 0xff, 0x13],
        "the corrupt row was overwritten"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_from_a_newer_idem_is_refused() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    SqliteStore::open(&path).await.unwrap().close().await;
    sqlite(
        &path,
        "UPDATE idem_meta SET value = 99 WHERE name = 'schema_version'",
    );
    match SqliteStore::open(&path).await {
        Err(StoreError::SchemaTooNew {
            found, supported, ..
        }) => assert_eq!(
            (found, supported),
            (99, idem_runtime::store::sqlite::SCHEMA_VERSION)
        ),
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}

/// A file written by idem 0.1 (schema version 1, exactly as 0.1 created
/// it) is migrated on open: its records read unchanged, a duplicate gets its
/// recorded answer, and its unknown outcome can be settled by an operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_by_schema_version_1_is_migrated_and_reads() {
    use idem_runtime::operator::{Actor, Operator, Resolution};
    use idem_runtime::record::Status;

    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem-0.1.db");
    let (done, unknown) = (random_key(), random_key());
    // The 0.1 schema and two records as 0.1 serialized them.
    let far = 4_000_000_000_000u64;
    sqlite(
        &path,
        &format!(
            r#"CREATE TABLE idem_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
               CREATE TABLE idem_records (key TEXT PRIMARY KEY NOT NULL, expires_at INTEGER, record BLOB NOT NULL);
               CREATE INDEX idem_records_expiry ON idem_records (expires_at) WHERE expires_at IS NOT NULL;
               INSERT INTO idem_meta (name, value) VALUES ('next_fence', 3), ('schema_version', 1);
               INSERT INTO idem_records VALUES ('{done}', {far}, CAST('{{"key":"{done}","tool":"send_email","fingerprint":"{fp}","created_at":1700000000000,"state":"completed","fence":1,"outcome":{{"status":"success","output":"{{\"id\":\"m-1\"}}"}},"completed_at":1700000000100,"expires_at":{far}}}' AS BLOB));
               INSERT INTO idem_records VALUES ('{unknown}', {far}, CAST('{{"key":"{unknown}","tool":"charge_card","fingerprint":"{fp}","created_at":1700000000000,"state":"completed","fence":2,"outcome":{{"status":"unknown","reason":"owner vanished"}},"completed_at":1700000000100,"expires_at":{far},"steps":{{"idem:attempt":1}}}}' AS BLOB));"#,
            fp = fingerprint(),
        ),
    );
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    let f = fingerprint();
    match store.claim(&request(&done, &f)).await.unwrap() {
        ClaimOutcome::Completed(record) => assert_eq!(
            record.outcome(),
            Some(&Outcome::Success {
                output: OutputJson::from_value(&json!({ "id": "m-1" }))
            })
        ),
        other => panic!("expected the 0.1 record, got {other:?}"),
    }
    let operator = Operator::new(store.clone());
    let record = operator.show(&unknown).await.unwrap();
    assert_eq!(record.status(), Status::Unknown);
    assert!(record.info.is_empty() && record.audit.is_empty());
    let settled = operator
        .resolve(
            &unknown,
            Resolution::Succeeded(json!({ "charge": "ch_1" })),
            &Actor::new("ana").because("the processor shows the charge"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(settled.status(), Status::Succeeded);
    assert!(settled.fence().0 >= 3, "fences continue after 0.1's");
    store.close().await;
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(version, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_that_is_not_sqlite_is_refused_and_not_overwritten() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("notes.txt");
    let text = "these are my notes, not a database\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    match SqliteStore::open(&path).await {
        Err(StoreError::Unavailable { store, cause }) => {
            assert!(store.contains("notes.txt"), "{store}");
            assert!(cause.contains("not a SQLite database"), "{cause}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

/// rusqlite's error stays the source of the store's error, for reporters
/// that print the chain and callers that look at SQLite's error code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unopenable_file_keeps_the_driver_error_as_source() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "not a database\n".repeat(200)).unwrap();
    let e = SqliteStore::open(&path).await.unwrap_err();
    assert!(matches!(e, StoreError::Unavailable { .. }), "{e:?}");
    let driver: &rusqlite::Error = driver_error(&e);
    assert_eq!(
        driver.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase)
    );
}

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
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let key = random_key();
    let store = SqliteStore::open(&path).await.unwrap();
    record(&store, &key, &sent("m-1")).await;
    store.close().await;

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
async fn full_database_fails_closed_with_full() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let options = SqliteOptions::default().max_size(64 * 1024);
    let store = SqliteStore::open_with(&path, options).await.unwrap();
    let f = fingerprint();
    let big = Outcome::Success {
        output: OutputJson::from_value(&json!("x".repeat(4000))),
    };
    let mut full = None;
    for _ in 0..100 {
        let key = random_key();
        match store.claim(&request(&key, &f)).await {
            Ok(ClaimOutcome::Acquired { fence, .. }) => {
                if let Err(e) = store
                    .complete(&key, fence, &big, Duration::from_secs(60))
                    .await
                {
                    full = Some(e);
                    break;
                }
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    match full {
        Some(StoreError::Full { store, cause }) => {
            assert!(store.contains("idem.db"));
            assert!(cause.contains("full"), "{cause}");
        }
        other => panic!("expected Full, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_directory_is_unavailable() {
    match SqliteStore::open("/nonexistent-idem-dir/sub/idem.db").await {
        Err(StoreError::Unavailable { store, cause }) => {
            assert!(store.contains("/nonexistent-idem-dir/sub/idem.db"));
            assert!(cause.contains("does not exist"), "{cause}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_keeps_concurrent_first_calls_apart() {
    // Many first calls at once share commits; each still gets its own
    // fence, and every outcome is stored under its own key.
    let dir = TempDir::new("idem-sqlite").unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("idem.db")).await.unwrap());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let store = store.clone();
        tasks.spawn(async move {
            let key = random_key();
            let fence = acquire(&*store, &key).await;
            store
                .complete(&key, fence, &sent(&i.to_string()), Duration::from_secs(60))
                .await
                .unwrap();
            (key, fence, i)
        });
    }
    let mut fences = std::collections::BTreeSet::new();
    while let Some(done) = tasks.join_next().await {
        let (key, fence, i) = done.unwrap();
        assert!(fences.insert(fence), "fence handed out twice");
        assert_eq!(
            store.get(&key).await.unwrap().unwrap().outcome(),
            Some(&sent(&i.to_string()))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_at_once_in_process_and_within_the_poll_across_processes() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let one = Arc::new(SqliteStore::open(&path).await.unwrap());
    // A second store on the same file stands for another process: the
    // first one's writer cannot notify it.
    let other = Arc::new(SqliteStore::open(&path).await.unwrap());

    let same = wake_up_latencies(one.clone(), one.clone(), 5).await[2];
    let across = wake_up_latencies(one, other, 5).await[2];
    eprintln!(
        "sqlite wake-up latency (median of 5): same process {same:?}, other process {across:?}"
    );
    // The back-off had grown to 160 ms: only a notification is this fast.
    assert!(same < Duration::from_millis(50), "{same:?}");
    assert!(
        across <= idem_runtime::store::sqlite::CROSS_PROCESS_POLL + Duration::from_millis(50),
        "{across:?}"
    );
}

/// Hold the write lock of the file at `path` from another connection (as
/// another process would) until the returned guard is dropped. Requests
/// sent meanwhile queue up behind the store's writer and share its next
/// transaction.
struct WriteLock(rusqlite::Connection);

impl WriteLock {
    fn take(path: &Path) -> WriteLock {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_failing_inside_a_group_commit_fails_alone() {
    // One caller's write is too big for the capped file; another caller's
    // completion lands in the same transaction. The big one must fail with
    // Full and change nothing; the completion must still be recorded (or
    // the call's outcome is lost although the store had room for it).
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let options = SqliteOptions::default().max_size(64 * 1024);
    let store = Arc::new(SqliteStore::open_with(&path, options).await.unwrap());
    let (small, big) = (random_key(), random_key());
    let small_fence = acquire(&*store, &small).await;
    let big_fence = acquire(&*store, &big).await;

    let lock = WriteLock::take(&path);
    // The writer takes this sweep alone and waits for the lock with it ...
    let sweep = tokio::spawn({
        let store = store.clone();
        async move { store.sweep().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ... while these two queue up for its next transaction.
    let too_big = tokio::spawn({
        let (store, key) = (store.clone(), big.clone());
        async move {
            let value = json!("x".repeat(256 * 1024));
            store
                .checkpoint(&key, big_fence, "huge", &value, Duration::from_secs(30))
                .await
        }
    });
    let complete = tokio::spawn({
        let (store, key) = (store.clone(), small.clone());
        async move {
            store
                .complete(&key, small_fence, &sent("m-1"), Duration::from_secs(3600))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(lock);

    sweep.await.unwrap().unwrap();
    match too_big.await.unwrap() {
        Err(StoreError::Full { .. }) => {}
        other => panic!("expected the oversized step to fail with Full, got {other:?}"),
    }
    complete
        .await
        .unwrap()
        .expect("the completion was failed by another caller's request");
    assert_eq!(
        store.get(&small).await.unwrap().unwrap().outcome(),
        Some(&sent("m-1"))
    );
    let big_record = store.get(&big).await.unwrap().unwrap();
    assert!(big_record.steps.is_empty(), "the failed step was written");
    assert!(big_record.outcome().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_runs_from_when_the_claim_is_written_not_from_when_it_was_queued() {
    // Another process holds the file for a while; the lease granted once the
    // writer gets the lock must still be the full lease from then on.
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    let key = random_key();
    let lock = WriteLock::take(&path);
    let claim = tokio::spawn({
        let (store, key) = (store.clone(), key.clone());
        async move {
            let f = fingerprint();
            store.claim(&request(&key, &f)).await
        }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    let released = store.now().await.unwrap();
    drop(lock);
    match claim.await.unwrap().unwrap() {
        ClaimOutcome::Acquired { lease_until, .. } => {
            let lease = request(&key, &fingerprint()).lease;
            assert!(
                lease_until >= released.plus(lease),
                "the lease was shortened by {:?} of waiting for the lock",
                lease_until.until(released.plus(lease))
            );
        }
        other => panic!("expected to own the key, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_of_one_key_in_one_group_commit_have_one_owner() {
    // Both claims read "absent" on their way to the writer and meet in one
    // transaction: the second must be decided against the first one's write.
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    let key = random_key();
    let lock = WriteLock::take(&path);
    let sweep = tokio::spawn({
        let store = store.clone();
        async move { store.sweep().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let claims: Vec<_> = (0..2)
        .map(|_| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move {
                let f = fingerprint();
                store.claim(&request(&key, &f)).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(lock);
    sweep.await.unwrap().unwrap();
    let mut owners = Vec::new();
    let mut seen = Vec::new();
    for claim in claims {
        match claim.await.unwrap().unwrap() {
            ClaimOutcome::Acquired { fence, .. } => owners.push(fence),
            ClaimOutcome::InFlight { fence, .. } => seen.push(fence),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(owners.len(), 1, "both claims were told they own the key");
    assert_eq!(seen, owners, "the other claim must see the owner's fence");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_are_not_handed_out_again_after_a_restart() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
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

/// The SQLite store reads its own URL, as the Redis and PostgreSQL stores
/// do; `store::connect` only picks it by the scheme.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_reads_its_own_url() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let url = format!("sqlite://{}?synchronous=normal", path.display());
    let store = SqliteStore::connect(&url).await.unwrap();
    assert_eq!(store.describe(), format!("sqlite:{}", path.display()));
    record(&store, &random_key(), &sent("m-1")).await;
    for (url, says) in [
        ("redis://cache/0", "not a SQLite URL"),
        ("sqlite:", "names no file"),
        ("sqlite://idem.db?journal=off", "unknown SQLite option"),
    ] {
        match SqliteStore::connect(url).await {
            Err(StoreError::Config(message)) => assert!(message.contains(says), "{url}: {message}"),
            other => panic!("{url}: expected a configuration error, got {other:?}"),
        }
    }
}

/// A sweep large enough to write thousands of WAL pages (so the
/// checkpointer is asked several times and the sweep waits for it between
/// batches) still deletes every expired record and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_paced_by_the_checkpointer_deletes_every_expired_record() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let clock = ManualClock::new(1_000_000);
    let store = store_with_clock(&path, &clock).await;
    let (expired, live) = (random_key(), random_key());
    let fence = acquire(&store, &expired).await;
    let second = Duration::from_secs(1);
    store
        .complete(&expired, fence, &sent("m-1"), second)
        .await
        .unwrap();
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

// ---------------------------------------------------------------------------
// Claims answered on the caller's thread (`Store::claim_local`).

/// A store on `path` whose clock the test moves.
async fn store_with_clock(path: &Path, clock: &ManualClock) -> SqliteStore {
    let options = SqliteOptions::default().clock(Arc::new(clock.clone()));
    SqliteStore::open_with(path, options).await.unwrap()
}

/// A duplicate answered on the caller's thread sees what another
/// connection wrote. The store keeps the completed records it read last
/// decoded, but answers from them only while the row holds the same bytes:
/// whatever another process does to the row (deletes it, records the key
/// again, corrupts it) is what the next read sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_is_answered_on_the_callers_thread_from_what_another_connection_wrote() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let reader = SqliteStore::open(&path).await.unwrap();
    let writer = SqliteStore::open(&path).await.unwrap();
    let key = random_key();
    let f = fingerprint();
    let answer = |store: &SqliteStore| match store.claim_local(&request(&key, &f)) {
        Some(Ok(ClaimOutcome::Completed(r))) => Some(r),
        None => None,
        Some(other) => panic!("expected a completed record or no answer: {other:?}"),
    };
    // The reader's cached connection has read the key once, absent.
    assert!(answer(&reader).is_none());
    record(&writer, &key, &sent("m-1")).await;
    let first = answer(&reader).expect("the other connection's commit was not seen");
    assert_eq!(first.outcome(), Some(&sent("m-1")));
    let again = answer(&reader).expect("completed");
    assert!(
        Arc::ptr_eq(&first, &again),
        "the unchanged row is not decoded again"
    );

    // Deleted by another process: absent, not the kept record.
    sqlite(&path, "DELETE FROM idem_records");
    assert!(answer(&reader).is_none());
    // Recorded again with another outcome.
    record(&writer, &key, &sent("m-2")).await;
    assert_eq!(answer(&reader).unwrap().outcome(), Some(&sent("m-2")));
    // Corrupted: reported, never answered from memory.
    sqlite(&path, "UPDATE idem_records SET record = X'7b7d'");
    assert!(matches!(
        reader.claim_local(&request(&key, &f)),
        Some(Err(StoreError::Corrupt { .. }))
    ));

    // With no records kept, every read decodes.
    let uncached = SqliteOptions::default().record_cache(0);
    let plain = SqliteStore::open_with(&path, uncached).await.unwrap();
    let other = random_key();
    record(&plain, &other, &sent("m-3")).await;
    let req = request(&other, &f);
    let decoded = |store: &SqliteStore| match store.claim_local(&req) {
        Some(Ok(ClaimOutcome::Completed(r))) => r,
        other => panic!("expected the completed record: {other:?}"),
    };
    assert!(!Arc::ptr_eq(&decoded(&plain), &decoded(&plain)));
    assert_eq!(decoded(&plain).outcome(), Some(&sent("m-3")));
}

/// For every state a record can be in, `claim_local` either declines or
/// answers exactly what `claim` answers: it answers a completed call, a key
/// reused and an approval still to be decided, and declines whatever writes
/// (absent, expired, lease lapsed, approved) or waits (in flight).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_local_answers_as_claim_does_or_not_at_all() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let clock = ManualClock::new(1_000_000);
    let store = store_with_clock(&path, &clock).await;
    let (f, other) = (fingerprint(), Fingerprint::new("e".repeat(64)));
    let [completed, expired, lapsed, awaiting, approved, in_flight, absent] =
        std::array::from_fn(|_| random_key());

    record(&store, &completed, &sent("m-1")).await;
    let fence = acquire(&store, &expired).await;
    let second = Duration::from_secs(1);
    store
        .complete(&expired, fence, &sent("m-2"), second)
        .await
        .unwrap();
    acquire(&store, &lapsed).await;
    park(&store, &awaiting, acquire(&store, &awaiting).await).await;
    let fence = park(&store, &approved, acquire(&store, &approved).await).await;
    approve(&store, &approved, fence).await;
    // Past the 1 s retention and the 30 s lease of `request`.
    clock.advance(Duration::from_secs(31));
    acquire(&store, &in_flight).await;

    let cases = [
        ("completed", &completed, &f, true),
        ("key reused", &completed, &other, true),
        ("awaiting approval", &awaiting, &f, true),
        ("absent", &absent, &f, false),
        ("expired", &expired, &f, false),
        ("in flight", &in_flight, &f, false),
        ("lease lapsed", &lapsed, &f, false),
        ("approved", &approved, &f, false),
    ];
    for (case, key, fingerprint, answered) in cases {
        let req = request(key, fingerprint);
        let local = store.claim_local(&req).map(Result::unwrap);
        assert_eq!(local.is_some(), answered, "{case}: {local:?}");
        let claimed = store.claim(&req).await.unwrap();
        if let Some(local) = local {
            assert_eq!(local, claimed, "{case}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_store_refuses_a_claim_on_the_callers_thread() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let store = SqliteStore::open(dir.path().join("idem.db")).await.unwrap();
    let key = random_key();
    record(&store, &key, &sent("m-1")).await;
    store.close().await;
    let f = fingerprint();
    assert!(matches!(
        store.claim_local(&request(&key, &f)),
        Some(Err(StoreError::Closed { .. }))
    ));
}

/// Another process holds the write lock: a duplicate is still answered,
/// on the caller's thread and through `claim`, without waiting for it
/// (WAL readers never wait for the writer). If the read waited for the
/// lock, `claim_local` would decline and `claim` would fail after the
/// busy timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_is_answered_while_another_process_holds_the_write_lock() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let options = SqliteOptions::default().busy_timeout(Duration::from_secs(3600));
    let store = SqliteStore::open_with(&path, options).await.unwrap();
    let key = random_key();
    record(&store, &key, &sent("m-1")).await;
    let f = fingerprint();
    let lock = WriteLock::take(&path);
    assert!(matches!(
        store.claim_local(&request(&key, &f)),
        Some(Ok(ClaimOutcome::Completed(_)))
    ));
    assert!(matches!(
        store.claim(&request(&key, &f)).await.unwrap(),
        ClaimOutcome::Completed(_)
    ));
    drop(lock);
}

/// The connections kept for reads on the caller's thread hold no read
/// transaction between reads: a checkpoint can copy the whole WAL back and
/// truncate it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_on_the_callers_thread_leave_no_snapshot_open() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let f = fingerprint();
    for _ in 0..10 {
        let key = random_key();
        record(&store, &key, &sent("m-1")).await;
        assert!(store.claim_local(&request(&key, &f)).is_some());
        assert!(store.get(&key).await.unwrap().is_some());
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    let (busy, _, _): (i64, i64, i64) = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    assert_eq!(busy, 0, "a reader kept a snapshot open");
    let wal = std::fs::metadata(path.with_extension("db-wal")).unwrap();
    assert_eq!(wal.len(), 0, "the WAL was not truncated");
}

/// The bytes of `path` and of its `-wal` and `-shm` files (`None`: absent).
fn snapshot(path: &Path) -> [Option<Vec<u8>>; 3] {
    let with = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        std::fs::read(name).ok()
    };
    [std::fs::read(path).ok(), with("-wal"), with("-shm")]
}

fn schema_version(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap()
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
            idem_runtime::store::connect_read_only(&url).await.map(drop),
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
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let live = SqliteStore::open(&path).await.unwrap();
    let (done, running) = (random_key(), random_key());
    record(&live, &done, &sent("m-1")).await;
    let fence = acquire(&live, &running).await;

    let reader = SqliteStore::open_read_only(&path).await.unwrap();
    assert!(reader.is_read_only());
    assert_eq!(
        reader.schema_found(),
        Some(idem_runtime::store::sqlite::SCHEMA_VERSION)
    );
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
        schema_version(&path),
        i64::from(idem_runtime::store::sqlite::SCHEMA_VERSION)
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
    let far = 4_000_000_000_000u64;
    sqlite(
        &path,
        &format!(
            r#"CREATE TABLE idem_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
               CREATE TABLE idem_records (key TEXT PRIMARY KEY NOT NULL, expires_at INTEGER, record BLOB NOT NULL);
               INSERT INTO idem_meta (name, value) VALUES ('next_fence', 2), ('schema_version', 1);
               INSERT INTO idem_records VALUES ('{done}', {far}, CAST('{{"key":"{done}","tool":"send_email","fingerprint":"{fp}","created_at":1700000000000,"state":"completed","fence":1,"outcome":{{"status":"success","output":"{{\"id\":\"m-1\"}}"}},"completed_at":1700000000100,"expires_at":{far}}}' AS BLOB));"#,
            fp = fingerprint(),
        ),
    );
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
    assert_eq!(schema_version(&path), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_read_only_cannot_read_are_refused_naming_what_to_do() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    SqliteStore::open(&path).await.unwrap().close().await;
    sqlite(
        &path,
        "UPDATE idem_meta SET value = 9 WHERE name = 'schema_version'",
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_corrupt_row_does_not_fail_a_scan_it_is_reported_beside_the_rest() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let keys = [random_key(), random_key(), random_key()];
    for key in &keys {
        record(&store, key, &sent("m")).await;
    }
    sqlite(
        &path,
        &format!(
            "UPDATE idem_records SET record = x'00ff13' WHERE key = '{}'",
            keys[1].as_str()
        ),
    );
    let page = store.scan(None, 100).await.unwrap();
    let mut listed: Vec<_> = page.records.iter().map(|r| r.key.clone()).collect();
    listed.sort();
    let mut good = vec![keys[0].clone(), keys[2].clone()];
    good.sort();
    assert_eq!(listed, good);
    assert_eq!(page.corrupt.len(), 1);
    assert_eq!(page.corrupt[0].key, keys[1].as_str());
}
