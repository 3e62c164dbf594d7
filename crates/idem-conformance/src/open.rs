//! Cases for [`StoreExt::scan_open`]: the open records alone, newest first,
//! each once, and none once it settles.

use std::collections::BTreeMap;

use super::{acquire, approval_step, complete, fp, parked, random_key, req, success, Harness};
use idem_runtime::approval::Approval;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{
    FailureCode, Fence, Outcome, Record, RecordState, Status, StoredFailure, APPROVAL_STEP,
};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{Expected, ExpectedState, OpenCursor, Store};

/// Every page of an open scan from the start, with `page_size`: the
/// records in the order returned. Checks the order as it goes, over every
/// record returned (other cases' included: they share the store).
async fn open_scan<S: Store + ?Sized>(store: &S, page_size: usize) -> Vec<Record> {
    let mut all: Vec<Record> = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100_000 {
        let page = store.scan_open(cursor.as_deref(), page_size).await.unwrap();
        assert!(
            page.records.len() <= page_size,
            "a page of {page_size} held {}",
            page.records.len()
        );
        for record in page.records {
            assert!(
                record.is_open(),
                "{} is {} and was scanned as open",
                record.key,
                record.status().as_str()
            );
            if let Some(last) = all.last() {
                assert!(
                    OpenCursor::after(last).precedes(&record),
                    "{} (created {:?}) came after {} (created {:?}): not newest first",
                    record.key,
                    record.created_at,
                    last.key,
                    last.created_at
                );
            }
            all.push(record);
        }
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => return all,
        }
    }
    panic!("the open scan with pages of {page_size} does not end");
}

/// Park the in-flight call `key` of `fence` as awaiting approval for
/// `ttl`, approved when `approve` says so; returns the new fence.
async fn ask<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    fence: Fence,
    ttl: std::time::Duration,
    approve: bool,
) -> Fence {
    let now = store.now().await.unwrap();
    let record = store.get(key).await.unwrap().expect("in flight");
    let (expected, mut record) = parked(record, fence, now, ttl);
    if approve {
        let approval = approval_step(Approval::granted_by("ana"));
        record.steps.insert(APPROVAL_STEP.into(), approval);
    }
    store
        .replace(key, expected, Some(&record), None)
        .await
        .expect("ask")
        .expect("a fence for the new record")
}

/// An open scan returns every open record once — in flight, awaiting
/// approval, approved, unknown — newest first by creation then key,
/// whatever the page size; never a succeeded or failed record, nor an
/// approval request that lapsed.
pub async fn scan_open_returns_open_records_newest_first_once<H: Harness>(h: H) {
    let store = h.store();
    let f = fp("a");
    // Long enough that no record lapses while the others are made, even
    // with every case running at once against one server (200 s there).
    let long = h.tick() * 1000;
    let mut open: BTreeMap<IdempotencyKey, Status> = BTreeMap::new();
    let mut settled = Vec::new();
    for i in 0..30u32 {
        let key = random_key();
        let fence = acquire(&*store, &req(&key, &f, long)).await;
        let status = match i % 6 {
            0 => Status::InFlight,
            1 => {
                let done = success(i64::from(i));
                store.complete(&key, fence, &done, long).await.unwrap();
                Status::Succeeded
            }
            2 => {
                ask(&*store, &key, fence, long, false).await;
                Status::AwaitingApproval
            }
            3 => {
                ask(&*store, &key, fence, long, true).await;
                Status::Approved
            }
            4 => {
                let failed = Outcome::Failure {
                    failure: StoredFailure {
                        code: FailureCode::Permanent,
                        message: "no".into(),
                        details: None,
                    },
                };
                store.complete(&key, fence, &failed, long).await.unwrap();
                Status::Failed
            }
            _ => {
                let unknown = Outcome::Unknown { reason: "?".into() };
                store.complete(&key, fence, &unknown, long).await.unwrap();
                Status::Unknown
            }
        };
        match status {
            Status::Succeeded | Status::Failed => settled.push(key),
            _ => {
                open.insert(key, status);
            }
        }
        // Some records a millisecond apart, some within one: the key
        // orders those.
        if i % 5 == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }
    let lapsing = random_key();
    let fence = acquire(&*store, &req(&lapsing, &f, long)).await;
    ask(&*store, &lapsing, fence, h.tick(), false).await;
    h.advance(h.tick() * 2).await;

    for page_size in [1, 7, 1000] {
        let mut seen: BTreeMap<IdempotencyKey, Status> = BTreeMap::new();
        for record in open_scan(&*store, page_size).await {
            assert_ne!(record.key, lapsing, "a lapsed approval request was scanned");
            assert!(
                !settled.contains(&record.key),
                "a settled record was scanned"
            );
            if open.contains_key(&record.key) {
                let key = record.key.clone();
                assert!(
                    seen.insert(key, record.status()).is_none(),
                    "{} returned twice with pages of {page_size}",
                    record.key
                );
            }
        }
        assert_eq!(seen, open, "pages of {page_size}");
    }
}

/// A record leaves the open scan as it settles — completed with an
/// outcome, released, settled or denied by a person, deleted, swept —
/// and comes back when a person reopens it; a scan in progress goes on
/// past records settled under it, and still returns each open one once.
pub async fn scan_open_follows_records_as_they_settle<H: Harness>(h: H) {
    let store = h.store();
    let f = fp("a");
    let long = h.tick() * 1000;
    let is_listed = |key: IdempotencyKey| {
        let store = store.clone();
        async move { open_scan(&*store, 1000).await.iter().any(|r| r.key == key) }
    };

    // Completed: gone; released: gone.
    let (done, released) = (random_key(), random_key());
    let done_fence = acquire(&*store, &req(&done, &f, long)).await;
    let released_fence = acquire(&*store, &req(&released, &f, long)).await;
    assert!(is_listed(done.clone()).await && is_listed(released.clone()).await);
    complete(&*store, &done, done_fence, &success(1), long).await;
    store.release(&released, released_fence).await.unwrap();
    assert!(!is_listed(done.clone()).await, "a succeeded record is open");
    assert!(!is_listed(released.clone()).await, "a released key is open");

    // Unknown, settled by a person as succeeded: gone; reopened: back;
    // deleted: gone.
    let unknown = random_key();
    let fence = acquire(&*store, &req(&unknown, &f, long)).await;
    let outcome = Outcome::Unknown { reason: "?".into() };
    complete(&*store, &unknown, fence, &outcome, long).await;
    assert!(is_listed(unknown.clone()).await);
    let mut record = store.get(&unknown).await.unwrap().unwrap();
    let now = store.now().await.unwrap();
    let unknown_state = record.state.clone();
    record.state = RecordState::Completed {
        fence,
        outcome: success(2),
        completed_at: now,
        expires_at: now.plus(long),
    };
    let completed = |fence| Expected {
        fence,
        state: ExpectedState::Completed,
    };
    let fence = store
        .replace(&unknown, completed(fence), Some(&record), None)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !is_listed(unknown.clone()).await,
        "a settled record is open"
    );
    record.state = unknown_state;
    let fence = store
        .replace(&unknown, completed(fence), Some(&record), None)
        .await
        .unwrap()
        .unwrap();
    assert!(is_listed(unknown.clone()).await, "a reopened record is not");
    store
        .replace(&unknown, completed(fence), None, None)
        .await
        .unwrap();
    assert!(
        !is_listed(unknown.clone()).await,
        "a deleted record is open"
    );

    // Awaiting approval, denied: gone.
    let denied = random_key();
    let fence = acquire(&*store, &req(&denied, &f, long)).await;
    let fence = ask(&*store, &denied, fence, long, false).await;
    assert!(is_listed(denied.clone()).await);
    let mut record = store.get(&denied).await.unwrap().unwrap();
    let now = store.now().await.unwrap();
    record.state = RecordState::Completed {
        fence,
        outcome: Outcome::Failure {
            failure: StoredFailure {
                code: FailureCode::ApprovalDenied,
                message: "denied by ana".into(),
                details: None,
            },
        },
        completed_at: now,
        expires_at: now.plus(long),
    };
    let awaiting = Expected {
        fence,
        state: ExpectedState::AwaitingApproval,
    };
    store
        .replace(&denied, awaiting, Some(&record), None)
        .await
        .unwrap();
    assert!(!is_listed(denied.clone()).await, "a denied call is open");

    // A scan in progress: pages of one, with records settling under it.
    let mut ours = Vec::new();
    for _ in 0..6 {
        let key = random_key();
        let fence = acquire(&*store, &req(&key, &f, long)).await;
        ours.push((key, fence));
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let newest = ours[5].0.clone();
    let mut seen: Vec<IdempotencyKey> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = store.scan_open(cursor.as_deref(), 1).await.unwrap();
        pages += 1;
        assert!(pages < 100_000, "the open scan does not end");
        seen.extend(page.records.into_iter().map(|r| r.key));
        // Once the newest of ours is seen, the two oldest settle.
        if ours.len() == 6 && seen.contains(&newest) {
            for (key, fence) in ours.drain(..2) {
                complete(&*store, &key, fence, &success(3), long).await;
            }
        }
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    for (key, _) in &ours {
        let times = seen.iter().filter(|k| *k == key).count();
        assert_eq!(times, 1, "{key} open throughout, seen {times} times");
    }
}
