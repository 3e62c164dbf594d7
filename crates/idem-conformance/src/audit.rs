//! Cases for the store's audit log: events read back exactly, oldest first
//! and paged; filtered by key and time; appended by a replace exactly when
//! it swaps; kept after their record is gone; swept after the retention
//! only; appended concurrently without loss.

use std::collections::BTreeSet;

use super::{acquire, assert_stale, complete, fp, random_key, req, success, Harness};
use idem_runtime::audit::{AuditEvent, AuditQuery};
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{AuditAction, Fence, Status};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{Expected, ExpectedState, Store};

/// An event about `key` at the store's current time.
async fn event<S: Store + ?Sized>(store: &S, key: &IdempotencyKey, n: usize) -> AuditEvent {
    let actions = [
        AuditAction::Released,
        AuditAction::Deleted,
        AuditAction::ApprovedByPolicy,
        AuditAction::DeniedByPolicy,
        AuditAction::ResolvedSucceeded,
        AuditAction::Asked,
        AuditAction::SignedIn,
        AuditAction::SessionsRevoked,
    ];
    AuditEvent {
        seq: None,
        at: store.now().await.expect("now"),
        by: format!("operator-{n} «zoë»"),
        action: actions[n % actions.len()],
        reason: n
            .is_multiple_of(2)
            .then(|| format!("ticket #{n}: \"quoted\" \\ é")),
        key: key.clone(),
        tool: "conformance_tool".into(),
        namespace: n.is_multiple_of(3).then(|| "tenant-7".into()),
        fingerprint: fp("a"),
        before: Some(Status::Unknown),
        after: (n % 2 == 1).then_some(Status::Succeeded),
    }
}

/// `event` as the store reads it back after giving it `seq`.
fn stored(event: &AuditEvent, seq: u64) -> AuditEvent {
    AuditEvent {
        seq: Some(seq),
        ..event.clone()
    }
}

/// Every event of `query`, read `page` at a time; panics on a repeated
/// event.
/// Every event of `key`, read in pages of 10.
async fn events_of<S: Store + ?Sized>(store: &S, key: &IdempotencyKey) -> Vec<AuditEvent> {
    read_all(store, &AuditQuery::for_key(key.clone()), 10).await
}

async fn read_all<S: Store + ?Sized>(
    store: &S,
    query: &AuditQuery,
    page: usize,
) -> Vec<AuditEvent> {
    let mut events = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100_000 {
        let got = store
            .audit(query, cursor.as_deref(), page)
            .await
            .expect("audit");
        assert!(got.events.len() <= page, "a page holds more than its limit");
        events.extend(got.events);
        cursor = got.cursor;
        if cursor.is_none() {
            return events;
        }
    }
    panic!("the audit log's pages never ended");
}

/// Events appended to the audit log read back exactly as appended, with
/// the seq the append returned, oldest first, over pages that lose and
/// repeat none — for one key, and among every key's events.
pub async fn audit_events_read_back_exactly_in_pages<H: Harness>(h: H) {
    let store = h.store();
    let key = random_key();
    let start = store.now().await.unwrap();
    let mut want = Vec::new();
    for n in 0..7 {
        let e = event(&*store, &key, n).await;
        let seq = store.append_audit(&e).await.expect("append");
        assert!(
            want.last()
                .is_none_or(|last: &AuditEvent| last.seq < Some(seq)),
            "seqs grow with the appends"
        );
        want.push(stored(&e, seq));
        if n % 3 == 2 {
            h.advance(h.tick() / 4).await;
        }
    }
    for page in [1, 3, 7, 100] {
        let got = read_all(&*store, &AuditQuery::for_key(key.clone()), page).await;
        assert_eq!(got, want, "pages of {page}");
    }
    // Every key's events (other cases may share the store): ours are there
    // once each, in order, and the whole log is oldest first.
    let all = read_all(
        &*store,
        &AuditQuery {
            since: Some(start),
            ..AuditQuery::default()
        },
        2,
    )
    .await;
    let ours: Vec<_> = all.iter().filter(|e| e.key == key).cloned().collect();
    assert_eq!(ours, want);
    assert!(
        all.windows(2).all(|w| w[0].at <= w[1].at),
        "the log is read oldest first"
    );
}

/// A query by key reads that key's events only; `since` and `until` keep
/// the events at or after and before them.
pub async fn audit_is_filtered_by_key_and_time<H: Harness>(h: H) {
    let store = h.store();
    let (a, b) = (random_key(), random_key());
    let mut at_a = Vec::new();
    for n in 0..3 {
        let ea = event(&*store, &a, n).await;
        let seq = store.append_audit(&ea).await.unwrap();
        at_a.push(stored(&ea, seq));
        let eb = event(&*store, &b, n).await;
        store.append_audit(&eb).await.unwrap();
        h.advance(h.tick()).await;
    }
    let got = events_of(&*store, &a).await;
    assert_eq!(got, at_a);
    let window = AuditQuery {
        key: Some(a.clone()),
        since: Some(at_a[1].at),
        until: Some(at_a[2].at),
    };
    assert_eq!(read_all(&*store, &window, 10).await, vec![at_a[1].clone()]);
    let since_last = AuditQuery {
        key: Some(a.clone()),
        since: Some(at_a[2].at),
        until: None,
    };
    assert_eq!(
        read_all(&*store, &since_last, 10).await,
        vec![at_a[2].clone()]
    );
    let before_first = AuditQuery {
        key: Some(a),
        since: None,
        until: Some(at_a[0].at),
    };
    assert!(read_all(&*store, &before_first, 10).await.is_empty());
}

/// A replace carrying an event appends it exactly when the swap happens:
/// a refused replace (stale fence) appends nothing, a delete and a swap
/// append theirs once.
pub async fn replace_appends_its_event_only_when_it_swaps<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick() * 10)).await;
    complete(&*store, &key, fence, &success(1), h.tick() * 100).await;
    let record = store.get(&key).await.unwrap().unwrap();
    let refused = event(&*store, &key, 1).await;
    let wrong = Expected {
        fence: Fence(fence.0 + 1_000_000),
        state: ExpectedState::Completed,
    };
    assert_stale(
        store
            .replace(&key, wrong, Some(&record), Some(&refused))
            .await,
    );
    assert_stale(store.replace(&key, wrong, None, Some(&refused)).await);
    let query = AuditQuery::for_key(key.clone());
    assert!(
        read_all(&*store, &query, 10).await.is_empty(),
        "a refused replace appended its event"
    );

    let swapped = event(&*store, &key, 2).await;
    let right = Expected {
        fence,
        state: ExpectedState::Completed,
    };
    let new = store
        .replace(&key, right, Some(&record), Some(&swapped))
        .await
        .unwrap()
        .expect("a fence for the new record");
    let got = read_all(&*store, &query, 10).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0], stored(&swapped, got[0].seq.expect("a seq")));

    // The old fence no longer matches: refused, nothing appended.
    assert_stale(store.replace(&key, right, None, Some(&refused)).await);
    assert_eq!(read_all(&*store, &query, 10).await.len(), 1);

    let deleted = event(&*store, &key, 3).await;
    let current = Expected {
        fence: new,
        state: ExpectedState::Completed,
    };
    store
        .replace(&key, current, None, Some(&deleted))
        .await
        .unwrap();
    assert!(store.get(&key).await.unwrap().is_none());
    let got = read_all(&*store, &query, 10).await;
    assert_eq!(got.len(), 2);
    assert_eq!(got[1], stored(&deleted, got[1].seq.expect("a seq")));
}

/// Events outlive their record: deleted by an operator, or expired and
/// swept, the record is gone and its events are still there.
pub async fn audit_events_outlive_their_records<H: Harness>(h: H) {
    let store = h.store();
    let f = fp("a");
    let (deleted, expired) = (random_key(), random_key());

    let fence = acquire(&*store, &req(&deleted, &f, h.tick() * 10)).await;
    complete(&*store, &deleted, fence, &success(1), h.tick() * 100).await;
    let gone = event(&*store, &deleted, 1).await;
    let expected = Expected {
        fence,
        state: ExpectedState::Completed,
    };
    store
        .replace(&deleted, expected, None, Some(&gone))
        .await
        .unwrap();

    let fence = acquire(&*store, &req(&expired, &f, h.tick() * 10)).await;
    complete(&*store, &expired, fence, &success(2), h.tick()).await;
    let noted = event(&*store, &expired, 2).await;
    let seq = store.append_audit(&noted).await.unwrap();
    h.advance(h.tick() * 3).await;
    store.sweep().await.unwrap();

    assert!(store.get(&deleted).await.unwrap().is_none());
    assert!(store.get(&expired).await.unwrap().is_none());
    let got = events_of(&*store, &deleted).await;
    assert_eq!(got.len(), 1, "the delete's event is kept");
    assert_eq!(got[0], stored(&gone, got[0].seq.expect("a seq")));
    let kept = vec![stored(&noted, seq)];
    assert_eq!(
        events_of(&*store, &expired).await,
        kept,
        "the expired record's event is kept"
    );
}

/// A sweep deletes the events older than the store's audit retention
/// ([`Harness::audit_retention`]) and keeps the younger ones.
pub async fn audit_retention_sweeps_only_older_events<H: Harness>(h: H) {
    let store = h.store();
    let key = random_key();
    let old = event(&*store, &key, 1).await;
    store.append_audit(&old).await.unwrap();
    h.advance(h.audit_retention() + h.tick()).await;
    let young = event(&*store, &key, 2).await;
    let seq = store.append_audit(&young).await.unwrap();
    store.sweep().await.unwrap();
    let kept = vec![stored(&young, seq)];
    assert_eq!(
        events_of(&*store, &key).await,
        kept,
        "the old event is swept, the young one kept"
    );
}

/// Many tasks appending at once lose no event, and no two get one seq
/// (for one key; on Redis, one slot).
pub async fn concurrent_audit_appends_lose_none<H: Harness>(h: H) {
    let store = h.store();
    let key = random_key();
    let (tasks, each) = (32, 4);
    let mut set = tokio::task::JoinSet::new();
    for t in 0..tasks {
        let (store, key) = (store.clone(), key.clone());
        set.spawn(async move {
            let mut appended = Vec::new();
            for i in 0..each {
                let mut e = event(&*store, &key, i).await;
                e.by = format!("task-{t}-{i}");
                let seq = store.append_audit(&e).await.expect("append");
                appended.push(stored(&e, seq));
            }
            appended
        });
    }
    let mut want = Vec::new();
    while let Some(done) = set.join_next().await {
        want.extend(done.expect("task"));
    }
    let seqs: BTreeSet<_> = want.iter().map(|e| e.seq).collect();
    assert_eq!(seqs.len(), tasks * each, "two appends got one seq");
    let got = read_all(&*store, &AuditQuery::for_key(key), 7).await;
    assert_eq!(got.len(), tasks * each, "an append was lost");
    for e in &want {
        assert!(got.contains(e), "appended event {e:?} not read back");
    }
}
