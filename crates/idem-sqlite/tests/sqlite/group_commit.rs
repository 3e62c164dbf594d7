//! The SQLite store's group commit: concurrent first calls share
//! transactions yet stay apart, a request failing inside one fails alone,
//! two claims of one key in one have one owner, and a lease runs from when
//! its claim is written.

use std::sync::Arc;
use std::time::Duration;

use crate::sqlite_support::{fresh_file, WriteLock};
use idem_conformance::random_key;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, StoreError};
use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_testkit::store_cases::{acquire, fingerprint, request, sent};
use idem_testkit::TempDir;
use serde_json::json;

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
async fn a_request_failing_inside_a_group_commit_fails_alone() {
    // One caller's write is too big for the capped file; another caller's
    // completion lands in the same transaction. The big one must fail with
    // Full and change nothing; the completion must still be recorded (or
    // the call's outcome is lost although the store had room for it).
    let (_dir, path) = fresh_file();
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
    let (_dir, path) = fresh_file();
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
    let (_dir, path) = fresh_file();
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
