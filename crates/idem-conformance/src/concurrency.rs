//! Cases for a store shared and shut: closing flushes and then refuses,
//! and concurrent claims of one key have exactly one owner.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::Outcome;
use idem_runtime::store::{ClaimOutcome, Store, StoreError, WaitFor};
use serde_json::json;

use super::{acquire, assert_closed, complete, fp, outcome_of, random_key, req, success, Harness};
use idem_runtime::store::StoreExt;

/// [`StoreExt::close`] finishes what is under way and then refuses: every
/// write racing with it is either acknowledged and kept (it is there when
/// the store is reopened) or refused with [`StoreError::Closed`] and not
/// applied; a waiter blocked on an in-flight record is released with
/// `Closed`; every operation afterwards fails with `Closed` at once instead
/// of hanging; closing twice is harmless.
pub async fn close_flushes_and_refuses_further_writes<H: Harness>(h: H) {
    let store = h.store();
    let f = fp("a");
    let lease = h.tick() * 100;
    let done = random_key();
    let fence = acquire(&*store, &req(&done, &f, lease)).await;
    complete(&*store, &done, fence, &success(1), lease).await;
    let pending = random_key();
    let pending_fence = acquire(&*store, &req(&pending, &f, lease)).await;
    let waiter = {
        let (store, pending) = (store.clone(), pending.clone());
        tokio::spawn(async move {
            store
                .wait(&pending, WaitFor::Completion, Duration::from_secs(60))
                .await
        })
    };
    let mut racing = Vec::new();
    for i in 0..16 {
        let key = random_key();
        let fence = acquire(&*store, &req(&key, &f, lease)).await;
        racing.push((key, fence, success(100 + i)));
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Completions staggered over 0-3 ms, and the close after 1 ms: some
    // are answered before it, some are under way (queued for SQLite's
    // writer, awaiting a reply), some start after it.
    let completions: Vec<_> = racing
        .iter()
        .enumerate()
        .map(|(i, (key, fence, outcome))| {
            let (store, key, fence, outcome) =
                (store.clone(), key.clone(), *fence, outcome.clone());
            let delay = Duration::from_millis(i as u64 % 4);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                store.complete(&key, fence, &outcome, lease).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1)).await;
    tokio::time::timeout(Duration::from_secs(10), store.close())
        .await
        .expect("close finished within 10 s");

    let mut acknowledged = Vec::new();
    for (task, (key, _, outcome)) in completions.into_iter().zip(&racing) {
        let result = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("a write racing with close was answered within 10 s")
            .expect("task");
        match result {
            Ok(()) => acknowledged.push((key, outcome)),
            Err(StoreError::Closed { .. }) => {}
            Err(e) => panic!("a write racing with close failed with {e:?}, not Closed"),
        }
    }
    let waited = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("close released the waiter within 10 s")
        .expect("waiter task");
    assert_closed(waited, "a waiter blocked on an in-flight record");

    tokio::time::timeout(Duration::from_secs(10), async {
        assert_closed(store.claim(&req(&random_key(), &f, lease)).await, "claim");
        assert_closed(
            store
                .checkpoint(&pending, pending_fence, "s", &json!(1), lease)
                .await,
            "checkpoint",
        );
        assert_closed(
            store
                .complete(&pending, pending_fence, &success(2), lease)
                .await,
            "complete",
        );
        assert_closed(store.release(&pending, pending_fence).await, "release");
        assert_closed(store.get(&done).await, "get");
        assert_closed(
            store.wait(&pending, WaitFor::Completion, h.tick()).await,
            "wait",
        );
        assert_closed(store.sweep().await, "sweep");
        assert_closed(store.now().await, "now");
        store.close().await;
    })
    .await
    .expect("operations after close failed at once");

    let Some(reopened) = h.reopen().await else {
        return;
    };
    assert_eq!(
        outcome_of(&*reopened, &done).await,
        Some(success(1)),
        "a completed record was lost"
    );
    for (key, want) in &acknowledged {
        assert_eq!(
            outcome_of(&*reopened, key).await.as_ref(),
            Some(*want),
            "an acknowledged completion was lost by close"
        );
    }
    for (key, _, _) in &racing {
        if !acknowledged.iter().any(|(k, _)| *k == key) {
            assert_eq!(
                outcome_of(&*reopened, key).await,
                None,
                "a refused completion was applied"
            );
        }
    }
    assert!(
        reopened.get(&pending).await.unwrap().is_some(),
        "the in-flight record was lost"
    );
    reopened.close().await;
}

/// Many concurrent claims of one key: exactly one owner runs, and every
/// claimant ends with the owner's outcome.
pub async fn concurrent_claims_have_one_owner<H: Harness>(h: H) {
    let key = random_key();
    let n = h.concurrency();
    let (runs, outcomes) = contend_for_key(h.store(), &key, n, 0, h.tick() * 100).await;
    assert_eq!(runs, 1, "more than one owner ran");
    assert_eq!(outcomes.len(), n);
    assert!(
        outcomes.iter().all(|o| o == &success(0)),
        "a claimant saw another outcome"
    );
}

/// `tasks` tasks of this process claim `key` at once; the one that acquires
/// it "runs the tool" and completes with an outcome carrying `tag` (tell
/// processes apart with it); the others wait for and read the outcome.
/// Returns how many tasks ran the tool, and every task's final outcome.
///
/// Run it in several OS processes against one store for the multi-process
/// case: across all of them exactly one task may run.
pub async fn contend_for_key<S: Store + ?Sized>(
    store: Arc<S>,
    key: &IdempotencyKey,
    tasks: usize,
    tag: i64,
    lease: Duration,
) -> (usize, Vec<Outcome>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (store, key, runs) = (store.clone(), key.clone(), runs.clone());
        set.spawn(async move {
            let f = fp("same");
            loop {
                match store.claim(&req(&key, &f, lease)).await.expect("claim") {
                    ClaimOutcome::Acquired { fence, .. } => {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        complete(&*store, &key, fence, &success(tag), lease).await;
                        return success(tag);
                    }
                    ClaimOutcome::Completed(record) => return record.outcome().unwrap().clone(),
                    ClaimOutcome::InFlight { .. } => {
                        store
                            .wait(&key, WaitFor::Completion, Duration::from_secs(60))
                            .await
                            .expect("wait");
                    }
                    ClaimOutcome::KeyReused { .. } => {
                        panic!("same arguments reported as key reuse")
                    }
                    ClaimOutcome::AwaitingApproval(_) => {
                        panic!("nothing here asks for an approval")
                    }
                }
            }
        });
    }
    let mut outcomes = Vec::with_capacity(tasks);
    while let Some(done) = set.join_next().await {
        outcomes.push(done.expect("task"));
    }
    (runs.load(Ordering::SeqCst), outcomes)
}
