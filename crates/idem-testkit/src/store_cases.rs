//! Scenario pieces shared by the backends' own tests (`idem-sqlite`,
//! `idem-redis`, `idem-postgres`): one call's request, claim, park and
//! approve; wake-up latencies; failing closed; read-only refusals.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::record::{Fence, Outcome, OutputJson, Record, RecordState, APPROVAL_STEP};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{
    ClaimOutcome, ClaimRequest, Expected, ExpectedState, Store, StoreError, WaitFor,
};
use serde_json::json;

/// The fingerprint of the arguments of every call in these tests.
pub fn fingerprint() -> Fingerprint {
    Fingerprint::new("f".repeat(64))
}

/// A `send_email` call under `key`, with a 30 s lease.
pub fn request<'a>(key: &'a IdempotencyKey, fingerprint: &'a Fingerprint) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        tool: "send_email",
        fingerprint,
        check_fingerprint: true,
        lease: Duration::from_secs(30),
        info: idem_runtime::record::CallInfoRef::EMPTY,
        worker: None,
        durable: true,
    }
}

/// What `send_email` returns.
pub fn sent(id: &str) -> Outcome {
    Outcome::Success {
        output: OutputJson::from_value(&json!({ "message_id": id })),
    }
}

/// Claim a fresh `key` and complete it with `outcome`, kept for `ttl`;
/// the owner's fence.
pub async fn completed<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    outcome: &Outcome,
    ttl: Duration,
) -> Fence {
    let fence = acquire(store, key).await;
    store.complete(key, fence, outcome, ttl).await.unwrap();
    fence
}

/// Assert that one page of a scan of `store` lists `keys` but the middle
/// one, which it reports corrupt beside them.
///
/// # Panics
///
/// When it does not.
pub async fn assert_the_middle_one_is_corrupt<S: Store + ?Sized>(
    store: &S,
    keys: &[IdempotencyKey; 3],
) {
    let page = store.scan(None, 100).await.unwrap();
    let mut listed: Vec<_> = page.records.iter().map(|r| r.key.clone()).collect();
    listed.sort();
    let mut good = vec![keys[0].clone(), keys[2].clone()];
    good.sort();
    assert_eq!(listed, good);
    assert_eq!(page.corrupt.len(), 1);
    assert_eq!(page.corrupt[0].key, keys[1].as_str());
}

/// Assert that `opened` (opening a store) was refused for a schema version
/// `found` newer than the `supported` one.
///
/// # Panics
///
/// When it was not.
pub fn assert_schema_too_new<S: std::fmt::Debug>(
    opened: Result<S, StoreError>,
    found: u32,
    supported: u32,
) {
    match opened {
        Err(StoreError::SchemaTooNew {
            found: f,
            supported: s,
            ..
        }) => assert_eq!((f, s), (found, supported)),
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
}

/// The schema version the SQLite store file at `path` records.
///
/// # Panics
///
/// When the file cannot be read or records none.
#[cfg(feature = "sqlite")]
pub fn sqlite_schema_version(path: &std::path::Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap()
}

/// Claim a fresh `key` and return the owner's fence.
pub async fn acquire<S: Store + ?Sized>(store: &S, key: &IdempotencyKey) -> Fence {
    let f = fingerprint();
    match store.claim(&request(key, &f)).await.unwrap() {
        ClaimOutcome::Acquired { fence, .. } => fence,
        other => panic!("expected to own a fresh key, got {other:?}"),
    }
}

/// Park the in-flight `key` owned by `fence` as awaiting a person's
/// approval (asked an hour ago at most), as the executor does; returns the
/// parked record's fence.
pub async fn park<S: Store + ?Sized>(store: &S, key: &IdempotencyKey, fence: Fence) -> Fence {
    let now = store.now().await.unwrap();
    let mut record = store.get(key).await.unwrap().expect("in flight");
    record.state = RecordState::AwaitingApproval {
        fence,
        requested_at: now,
        expires_at: now.plus(Duration::from_secs(3600)),
        message: "ask a person".into(),
    };
    replace(store, key, fence, ExpectedState::InFlight, &record)
        .await
        .expect("a fence for the parked record")
}

/// Approve the parked `key` holding `fence`: the next claim runs the call.
pub async fn approve<S: Store + ?Sized>(store: &S, key: &IdempotencyKey, fence: Fence) {
    let mut record = store.get(key).await.unwrap().expect("parked");
    record
        .steps
        .insert(APPROVAL_STEP.into(), json!({ "by": "ada" }));
    replace(store, key, fence, ExpectedState::AwaitingApproval, &record).await;
}

/// Replace `key`'s record, expected in `state` under `fence`, with
/// `record`; the new record's fence, if it has one.
async fn replace<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    fence: Fence,
    state: ExpectedState,
    record: &Record,
) -> Option<Fence> {
    store
        .replace(key, Expected { fence, state }, Some(record), None)
        .await
        .unwrap()
}

/// Assert that a waiter on `store` is woken by a notification: the median
/// of 10 [`wake_up_latencies`] is under 50 ms (the waiters' polling
/// back-off had reached 160 ms: anything well below that was a
/// notification). Prints the median and the maximum, for `name`.
///
/// # Panics
///
/// When the median is not under 50 ms.
pub async fn assert_woken_by_notification<S: Store>(name: &str, store: S) {
    let store = Arc::new(store);
    let latencies = wake_up_latencies(store.clone(), store, 10).await;
    eprintln!(
        "{name} wake-up latency over 10 waits: median {:?}, max {:?}",
        latencies[5], latencies[9]
    );
    assert!(latencies[5] < Duration::from_millis(50), "{latencies:?}");
}

/// Times from `complete` returning on `writer` to `wait` returning on
/// `waiter`, sorted, over `rounds` calls. Each waiter waits 200 ms first,
/// so its polling back-off has grown to 160 ms: a wake-up much faster than
/// that came from a notification.
pub async fn wake_up_latencies<S: Store>(
    writer: Arc<S>,
    waiter: Arc<S>,
    rounds: usize,
) -> Vec<Duration> {
    let mut latencies = Vec::new();
    for _ in 0..rounds {
        let key = idem_conformance::random_key();
        let fence = acquire(&*writer, &key).await;
        let waiting = {
            let (waiter, key) = (waiter.clone(), key.clone());
            tokio::spawn(async move {
                let record = waiter
                    .wait(&key, WaitFor::Completion, Duration::from_secs(10))
                    .await
                    .unwrap();
                assert!(record.expect("record").outcome().is_some());
                Instant::now()
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        let completed = Instant::now();
        writer
            .complete(&key, fence, &sent("m"), Duration::from_secs(60))
            .await
            .unwrap();
        latencies.push(waiting.await.unwrap().duration_since(completed));
    }
    latencies.sort();
    latencies
}

/// A store whose server `stop` takes away fails closed: a new claim and the
/// completion of a claimed call are `Unavailable`, naming the store, within
/// a bounded time.
pub async fn fails_closed_when_the_server_goes_away<S: Store>(store: S, stop: impl FnOnce()) {
    let key = idem_conformance::random_key();
    let fence = acquire(&store, &key).await;
    tokio::task::block_in_place(stop);
    let started = Instant::now();
    let f = fingerprint();
    let other = idem_conformance::random_key();
    match store.claim(&request(&other, &f)).await {
        Err(StoreError::Unavailable { store: name, cause }) => {
            assert_eq!(name, store.describe());
            assert!(!cause.is_empty());
        }
        other => panic!("a claim without a server must fail closed, got {other:?}"),
    }
    assert!(matches!(
        store
            .complete(&key, fence, &sent("m"), Duration::from_secs(60))
            .await,
        Err(StoreError::Unavailable { .. })
    ));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

/// Restart the server under an open `store` `rounds` times (`restart`
/// returns once the server takes connections again), each time after
/// every pooled connection was in use, and make calls once it is back:
/// none fails. `kept` says whether the server keeps its data across a
/// restart (a record completed before the first restart is then read
/// back after each).
///
/// The calls made after a restart, concurrently, are what a worker does:
/// claims, completions, reads of the record, the server's clock.
pub async fn no_call_after_a_restart_fails<S: Store + 'static>(
    store: Arc<S>,
    rounds: usize,
    kept: bool,
    mut restart: impl FnMut(),
) {
    let completed_record = |record: Option<Record>| {
        matches!(
            record,
            Some(Record {
                state: RecordState::Completed { .. },
                ..
            })
        )
    };
    let before = idem_conformance::random_key();
    completed(&*store, &before, &sent("before"), Duration::from_secs(3600)).await;
    for round in 0..rounds {
        // Every connection the pool may hold, open (and idle) when the
        // server goes away.
        let busy: Vec<_> = (0..16)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.now().await })
            })
            .collect();
        for answer in busy {
            answer.await.unwrap().unwrap();
        }
        tokio::task::block_in_place(&mut restart);
        let calls: Vec<_> = (0..24)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let key = idem_conformance::random_key();
                    let f = fingerprint();
                    let fence = match store.claim(&request(&key, &f)).await {
                        Ok(ClaimOutcome::Acquired { fence, .. }) => fence,
                        other => panic!("round {round}, call {i}: the claim failed: {other:?}"),
                    };
                    let outcome = sent("after");
                    let done = store.complete(&key, fence, &outcome, Duration::from_secs(60));
                    if let Err(e) = done.await {
                        panic!("round {round}, call {i}: the completion failed: {e}");
                    }
                    match store.get(&key).await {
                        Ok(record) => assert!(completed_record(record), "round {round}, call {i}"),
                        Err(e) => panic!("round {round}, call {i}: the read failed: {e}"),
                    }
                    if let Err(e) = store.now().await {
                        panic!("round {round}, call {i}: the clock failed: {e}");
                    }
                })
            })
            .collect();
        for call in calls {
            call.await.unwrap();
        }
        if kept {
            assert!(
                completed_record(store.get(&before).await.unwrap()),
                "round {round}"
            );
        }
    }
}

/// A write of `key` (owned by `fence`) sent on its own task, for a test
/// to hold on the server and break in flight: a renewal when `renew`
/// (the same applied twice, so resent), else a completion (never resent).
pub fn write_to_break<S: Store + 'static>(
    store: Arc<S>,
    key: &IdempotencyKey,
    fence: Fence,
    renew: bool,
) -> tokio::task::JoinHandle<Result<(), StoreError>> {
    let key = key.clone();
    tokio::spawn(async move {
        let ttl = Duration::from_secs(60);
        match renew {
            false => store.complete(&key, fence, &sent("m"), ttl).await,
            true => store.renew(&key, fence, ttl).await,
        }
    })
}

/// What [`write_to_break`]'s write answered (`answer`) once its
/// connection broke with it on the server: a completion fails with the
/// store's error and is not sent again (the record is still in flight); a
/// renewal is sent again and succeeds.
///
/// # Panics
///
/// When it is not so.
pub async fn assert_resent_only_when_safe<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    renew: bool,
    answer: Result<(), StoreError>,
) {
    let record = store.get(key).await.unwrap().expect("the record is kept");
    assert!(
        matches!(record.state, RecordState::InFlight { .. }),
        "{:?}",
        record.state
    );
    match renew {
        false => assert!(
            matches!(answer, Err(StoreError::Unavailable { .. })),
            "a completion broken in flight is the caller's failure: {answer:?}"
        ),
        true => assert!(answer.is_ok(), "a renewal is resent: {answer:?}"),
    }
}

/// A loopback port nobody listens on.
pub fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The URL of a test server started once per test binary, or `None` after
/// a loud skip (a failure under `IDEM_REQUIRE_SERVERS=1`) when its binary is
/// missing. `url` reads it off the lazily started server.
pub async fn server_url(test: &str, server: &str, url: fn() -> Option<String>) -> Option<String> {
    let found = tokio::task::spawn_blocking(url).await.unwrap();
    if found.is_none() {
        crate::skip(test, server);
    }
    found
}

/// The driver's error behind `e`: its `Error::source`, which must be of
/// type `D`. The message names the driver's error too.
pub fn driver_error<D: std::error::Error + 'static>(e: &StoreError) -> &D {
    let source = std::error::Error::source(e)
        .unwrap_or_else(|| panic!("{e:?} has no source; the driver's error was dropped"));
    let driver = source.downcast_ref::<D>().unwrap_or_else(|| {
        panic!(
            "the source of {e:?} is not a {}",
            std::any::type_name::<D>()
        )
    });
    assert!(
        e.to_string().contains(&driver.to_string()),
        "{e} does not name the cause {driver}"
    );
    driver
}

/// Every write to `store`, opened read-only, fails with
/// [`StoreError::ReadOnly`] naming it, and `existing` (completed, or in
/// flight under `fence`) reads as before.
pub async fn every_write_is_refused_read_only<S: Store + ?Sized>(
    store: &S,
    existing: &IdempotencyKey,
    fence: Fence,
) {
    let before = store.get(existing).await.unwrap();
    let fresh = idem_conformance::random_key();
    let f = fingerprint();
    let lease = Duration::from_secs(30);
    let expected = Expected {
        fence,
        state: ExpectedState::Completed,
    };
    let refusals: Vec<(&str, Result<(), StoreError>)> = vec![
        ("claim", store.claim(&request(&fresh, &f)).await.map(drop)),
        (
            "checkpoint",
            store
                .checkpoint(existing, fence, "s", &json!(1), lease)
                .await,
        ),
        ("renew", store.renew(existing, fence, lease).await),
        (
            "complete",
            store.complete(existing, fence, &sent("x"), lease).await,
        ),
        ("release", store.release(existing, fence).await),
        (
            "replace",
            store
                .replace(existing, expected, None, None)
                .await
                .map(drop),
        ),
        (
            "append_audit",
            store.append_audit(&audit_event(existing)).await.map(drop),
        ),
        ("sweep", store.sweep().await.map(drop)),
    ];
    for (what, refusal) in refusals {
        match refusal {
            Err(StoreError::ReadOnly { store: name, .. }) => {
                assert_eq!(name, store.describe(), "{what} names the store")
            }
            other => panic!("{what} on a read-only store: expected ReadOnly, got {other:?}"),
        }
    }
    assert_eq!(
        store.get(existing).await.unwrap(),
        before,
        "nothing changed"
    );
    assert!(
        store.get(&fresh).await.unwrap().is_none(),
        "no claim was recorded"
    );
}

/// An audit event about `key`, as an operator's action appends it.
fn audit_event(key: &IdempotencyKey) -> idem_runtime::audit::AuditEvent {
    idem_runtime::audit::AuditEvent {
        seq: None,
        at: idem_runtime::clock::Timestamp(1_700_000_000_000),
        by: "ops".into(),
        action: idem_runtime::record::AuditAction::Released,
        reason: Some("checked".into()),
        key: key.clone(),
        tool: "send_email".into(),
        namespace: None,
        fingerprint: fingerprint(),
        before: Some(idem_runtime::record::Status::Unknown),
        after: None,
    }
}
