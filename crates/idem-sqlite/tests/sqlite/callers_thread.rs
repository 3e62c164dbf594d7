//! Claims the SQLite store answers on the caller's thread
//! (`FastPath::claim_local`): exactly as `claim` would or not at all, from
//! what another connection wrote, while another process holds the write
//! lock, and without leaving a snapshot open.

use std::sync::Arc;
use std::time::Duration;

use crate::sqlite_support::{
    fresh_file, fresh_store, fresh_store_with_clock, record, sqlite, WriteLock,
};
use idem_conformance::random_key;
use idem_runtime::key::Fingerprint;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, FastPath, LocalClaim, StoreError};
use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_testkit::store_cases::{acquire, approve, fingerprint, park, request, sent};
use idem_testkit::TempDir;

/// A duplicate answered on the caller's thread sees what another
/// connection wrote. The store keeps the completed records it read last
/// decoded, but answers from them only while the row holds the same bytes:
/// whatever another process does to the row (deletes it, records the key
/// again, corrupts it) is what the next read sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_is_answered_on_the_callers_thread_from_what_another_connection_wrote() {
    let (_dir, path) = fresh_file();
    let reader = SqliteStore::open(&path).await.unwrap();
    let writer = SqliteStore::open(&path).await.unwrap();
    let key = random_key();
    let f = fingerprint();
    let answer = |store: &SqliteStore| match store.claim_local(&request(&key, &f)) {
        Some(Ok(LocalClaim::Claim(ClaimOutcome::Completed(r)))) => Some(r),
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
        Some(Ok(LocalClaim::Claim(ClaimOutcome::Completed(r)))) => r,
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
    let (_dir, _, clock, store) = fresh_store_with_clock().await;
    let (f, other) = (fingerprint(), Fingerprint::new("e".repeat(64)));
    let [completed, expired, lapsed, awaiting, approved, in_flight, absent] =
        std::array::from_fn(|_| random_key());

    record(&store, &completed, &sent("m-1")).await;
    idem_testkit::store_cases::completed(&store, &expired, &sent("m-2"), Duration::from_secs(1))
        .await;
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
            assert_eq!(local, LocalClaim::Claim(claimed), "{case}");
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
    let (_dir, path) = fresh_file();
    let options = SqliteOptions::default().busy_timeout(Duration::from_secs(3600));
    let store = SqliteStore::open_with(&path, options).await.unwrap();
    let key = random_key();
    record(&store, &key, &sent("m-1")).await;
    let f = fingerprint();
    let lock = WriteLock::take(&path);
    assert!(matches!(
        store.claim_local(&request(&key, &f)),
        Some(Ok(LocalClaim::Claim(ClaimOutcome::Completed(_))))
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
    let (_dir, path, store) = fresh_store().await;
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
