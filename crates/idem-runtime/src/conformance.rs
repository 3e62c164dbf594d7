//! The [`Store`] conformance suite: one contract, checked the same way for
//! every backend, including yours.
//!
//! Implement [`Harness`] for your store (how to make one, how to let time
//! pass for it), then generate one test per case with
//! [`store_conformance_tests!`](crate::store_conformance_tests):
//!
//! ```
//! // tests/my_store.rs (needs tokio with "macros" and "rt-multi-thread");
//! // here with the in-memory store's own harness.
//! use idem_runtime::conformance::MemoryHarness;
//!
//! async fn harness() -> Option<MemoryHarness> {
//!     Some(MemoryHarness::new())
//! }
//!
//! idem_runtime::store_conformance_tests!(harness);
//! # fn main() {}
//! ```
//!
//! A harness factory returning `None` (a server binary is missing) makes each
//! case print a loud `SKIPPED` line and pass, unless `IDEM_REQUIRE_SERVERS=1`
//! is set, in which case it fails.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

mod audit;
mod decisions;
mod durability;
mod operations;
pub use audit::*;
pub use decisions::*;
pub use durability::*;
pub use operations::*;

use crate::audit::DEFAULT_AUDIT_RETENTION;
use crate::clock::ManualClock;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::record::{FailureCode, Fence, Outcome, OutputJson, RecordState, StoredFailure};
use crate::store::{
    ClaimOutcome, ClaimRequest, FenceHolder, MemoryStore, Store, StoreError, WaitFor,
};

/// A store under test and control over its notion of time.
pub trait Harness: Send + Sync + 'static {
    /// The store type.
    type Store: Store;

    /// The store. Every case gets a fresh harness, but keys are random so a
    /// shared database is fine.
    fn store(&self) -> Arc<Self::Store>;

    /// Let `by` pass for the store: advance a manual clock, or sleep for a
    /// store on a server clock.
    fn advance(&self, by: Duration) -> impl Future<Output = ()> + Send;

    /// The unit of the leases and TTLs used by the cases; a store on a
    /// server clock wants it short (e.g. 200 ms) since [`Harness::advance`]
    /// sleeps.
    fn tick(&self) -> Duration {
        Duration::from_secs(10)
    }

    /// How many tasks claim one key at once in the concurrency case.
    fn concurrency(&self) -> usize {
        10_000
    }

    /// Whether the backend deletes expired records by itself (Redis key
    /// TTLs), leaving [`Store::sweep`] nothing to count. Such a store must
    /// still read expired records as absent and let their keys be claimed
    /// anew; the cases check that instead of a count.
    fn expires_natively(&self) -> bool {
        false
    }

    /// A new store on the same data as [`Harness::store`], opened after that
    /// one was closed, so the close case can check that closing lost no
    /// acknowledged write. `None` (the default) when the harness cannot
    /// reopen its store (an in-memory store); the case then checks only
    /// that the closed store refuses operations.
    fn reopen(&self) -> impl Future<Output = Option<Arc<Self::Store>>> + Send {
        std::future::ready(None)
    }

    /// The audit retention the store was opened with (default
    /// [`DEFAULT_AUDIT_RETENTION`]). The retention case lets this much
    /// time pass: a store on a server clock wants it short (a few seconds),
    /// but longer than any other case takes, since their sweeps delete older
    /// events in a shared database.
    fn audit_retention(&self) -> Duration {
        DEFAULT_AUDIT_RETENTION
    }
}

/// The harness of [`MemoryStore`] on a [`ManualClock`].
#[derive(Debug, Clone)]
pub struct MemoryHarness {
    store: Arc<MemoryStore>,
    clock: ManualClock,
}

impl MemoryHarness {
    /// A fresh store at a fixed instant.
    pub fn new() -> Self {
        let clock = ManualClock::new(1_700_000_000_000);
        MemoryHarness {
            store: Arc::new(MemoryStore::with_clock(Arc::new(clock.clone()))),
            clock,
        }
    }
}

impl Default for MemoryHarness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness for MemoryHarness {
    type Store = MemoryStore;
    fn store(&self) -> Arc<MemoryStore> {
        self.store.clone()
    }
    fn advance(&self, by: Duration) -> impl Future<Output = ()> + Send {
        self.clock.advance(by);
        std::future::ready(())
    }
}

/// Whether a missing server must fail the tests (`IDEM_REQUIRE_SERVERS=1`).
pub fn servers_required() -> bool {
    std::env::var("IDEM_REQUIRE_SERVERS").is_ok_and(|v| v == "1" || v == "true")
}

/// Called by the generated tests when the harness factory returned `None`.
pub fn skip(case: &str) {
    assert!(
        !servers_required(),
        "IDEM_REQUIRE_SERVERS=1 but the server for conformance case `{case}` is not available"
    );
    eprintln!("SKIPPED store conformance case `{case}`: server not available (set IDEM_REQUIRE_SERVERS=1 to make this a failure)");
}

/// A random key, so cases can share a database.
pub fn random_key() -> IdempotencyKey {
    let bytes: [u8; 32] = rand::random();
    IdempotencyKey::parse(&crate::key::lower_hex(&bytes)).expect("64 hex digits")
}

fn fp(s: &str) -> Fingerprint {
    Fingerprint::new(s)
}

fn req<'a>(
    key: &'a IdempotencyKey,
    fingerprint: &'a Fingerprint,
    lease: Duration,
) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        tool: "conformance_tool",
        fingerprint,
        check_fingerprint: true,
        lease,
        info: crate::record::CallInfoRef::EMPTY,
        worker: None,
        durable: true,
    }
}

fn success(n: i64) -> Outcome {
    Outcome::Success {
        output: OutputJson::from_value(
            &json!({ "n": n, "text": "élan — 1e0", "nested": { "b": [1.5, null], "a": true } }),
        ),
    }
}

async fn acquire<S: Store + ?Sized>(store: &S, r: &ClaimRequest<'_>) -> Fence {
    match store.claim(r).await.expect("claim") {
        ClaimOutcome::Acquired { fence, .. } => fence,
        other => panic!("expected to acquire the key, got {other:?}"),
    }
}

fn assert_stale<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    match result {
        Err(StoreError::StaleFence { .. }) => {}
        other => panic!("expected a stale-fence rejection, got {other:?}"),
    }
}

/// A new key is acquired, and the record is in flight under that fence.
pub async fn claim_of_a_new_key_acquires<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let lease = h.tick();
    let fence = acquire(&*store, &req(&key, &f, lease)).await;
    let record = store.get(&key).await.unwrap().expect("record exists");
    assert_eq!(record.key, key);
    assert_eq!(record.tool, "conformance_tool");
    assert_eq!(record.fingerprint, f);
    assert!(matches!(record.state, RecordState::InFlight { fence: x, .. } if x == fence));
}

/// A second claim while the first owner's lease is live reports in flight.
pub async fn claim_while_in_flight_reports_owner<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick() * 5)).await;
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::InFlight { fence: owner, .. } => assert_eq!(owner, fence),
        other => panic!("expected in flight, got {other:?}"),
    }
}

/// A completed outcome is returned to later claims exactly as stored.
pub async fn completed_outcome_is_returned_exactly<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick())).await;
    store
        .complete(&key, fence, &success(7), h.tick() * 10)
        .await
        .unwrap();
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::Completed(record) => {
            assert_eq!(record.outcome(), Some(&success(7)));
            assert_eq!(record.fence(), fence);
        }
        other => panic!("expected completed, got {other:?}"),
    }
    // Failures and unknown outcomes are stored as faithfully.
    for outcome in [
        Outcome::Failure {
            failure: StoredFailure {
                code: FailureCode::Permanent,
                message: "card declined".into(),
                details: Some(json!({"decline_code": "insufficient_funds"})),
            },
        },
        Outcome::Unknown {
            reason: "owner vanished".into(),
        },
    ] {
        let key = random_key();
        let fence = acquire(&*store, &req(&key, &f, h.tick())).await;
        store
            .complete(&key, fence, &outcome, h.tick() * 10)
            .await
            .unwrap();
        let got = store.get(&key).await.unwrap().unwrap();
        assert_eq!(got.outcome(), Some(&outcome));
    }
}

/// The same key with other arguments is a key reuse; nothing changes. With
/// `check_fingerprint: false` (natural keys) it finds the existing record.
pub async fn key_reuse_with_other_arguments_is_reported<H: Harness>(h: H) {
    let store = h.store();
    let (key, a, b) = (random_key(), fp("a"), fp("b"));
    let fence = acquire(&*store, &req(&key, &a, h.tick())).await;
    match store.claim(&req(&key, &b, h.tick())).await.unwrap() {
        ClaimOutcome::KeyReused { tool, fingerprint } => {
            assert_eq!(tool, "conformance_tool");
            assert_eq!(fingerprint, a);
        }
        other => panic!("expected key reuse, got {other:?}"),
    }
    let mut natural = req(&key, &b, h.tick());
    natural.check_fingerprint = false;
    assert!(matches!(
        store.claim(&natural).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    // Another tool under the same key is refused even without the check.
    natural.tool = "another_tool";
    assert!(matches!(
        store.claim(&natural).await.unwrap(),
        ClaimOutcome::KeyReused { .. }
    ));
    store
        .complete(&key, fence, &success(1), h.tick())
        .await
        .unwrap();
    assert_eq!(store.get(&key).await.unwrap().unwrap().fingerprint, a);
}

/// An owner whose lease expired and was taken over cannot complete, and the
/// new owner's outcome stands.
pub async fn stale_owner_cannot_complete<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let old = acquire(&*store, &req(&key, &f, h.tick())).await;
    h.advance(h.tick() * 2).await;
    let new = match store.claim(&req(&key, &f, h.tick() * 10)).await.unwrap() {
        ClaimOutcome::Acquired {
            fence,
            takeover: Some(t),
            ..
        } => {
            assert_eq!(t.previous, old);
            fence
        }
        other => panic!("expected a takeover, got {other:?}"),
    };
    assert_ne!(old, new);
    assert_stale(store.complete(&key, old, &success(1), h.tick() * 10).await);
    assert_stale(store.checkpoint(&key, old, "s", &json!(1), h.tick()).await);
    assert_stale(store.release(&key, old).await);
    store
        .complete(&key, new, &success(2), h.tick() * 10)
        .await
        .unwrap();
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().outcome(),
        Some(&success(2))
    );
}

/// A completed outcome is never overwritten, not even by its own owner.
pub async fn completed_outcome_is_never_overwritten<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick())).await;
    store
        .complete(&key, fence, &success(1), h.tick() * 10)
        .await
        .unwrap();
    match store
        .complete(&key, fence, &success(2), h.tick() * 10)
        .await
    {
        Err(StoreError::StaleFence { current, .. }) => {
            assert_eq!(current, FenceHolder::Completed(fence))
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_stale(store.release(&key, fence).await);
    assert_eq!(
        store.get(&key).await.unwrap().unwrap().outcome(),
        Some(&success(1))
    );
}

/// Completing or releasing a key nobody holds is rejected.
pub async fn writes_to_an_absent_key_are_rejected<H: Harness>(h: H) {
    let store = h.store();
    let key = random_key();
    match store.complete(&key, Fence(1), &success(1), h.tick()).await {
        Err(StoreError::StaleFence { current, .. }) => assert_eq!(current, FenceHolder::Nobody),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_stale(store.release(&key, Fence(1)).await);
    assert!(store.get(&key).await.unwrap().is_none());
}

/// Step checkpoints are kept, extend the lease, and are handed to the owner
/// that takes over after a crash.
pub async fn steps_survive_a_takeover<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let old = acquire(&*store, &req(&key, &f, h.tick() * 2)).await;
    store
        .checkpoint(
            &key,
            old,
            "charge",
            &json!({"charge_id": "ch_1"}),
            h.tick() * 2,
        )
        .await
        .unwrap();
    h.advance(h.tick() * 3).await;
    match store.claim(&req(&key, &f, h.tick() * 10)).await.unwrap() {
        ClaimOutcome::Acquired {
            steps,
            takeover: Some(_),
            ..
        } => {
            let mut want = BTreeMap::new();
            want.insert("charge".to_owned(), json!({"charge_id": "ch_1"}));
            assert_eq!(steps, want);
        }
        other => panic!("expected a takeover with steps, got {other:?}"),
    }
}

/// A checkpoint extends the owner's lease.
pub async fn checkpoint_extends_the_lease<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick() * 2)).await;
    h.advance(h.tick()).await;
    store
        .checkpoint(&key, fence, "one", &json!(1), h.tick() * 4)
        .await
        .unwrap();
    h.advance(h.tick() * 2).await;
    // Without the extension the lease would have run out by now.
    assert!(matches!(
        store.claim(&req(&key, &f, h.tick())).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    store
        .complete(&key, fence, &success(1), h.tick() * 10)
        .await
        .unwrap();
}

/// A renewal extends the owner's lease and changes nothing else; a stale
/// fence cannot renew (the superseded owner learns it lost the key).
pub async fn renewal_extends_the_lease_and_is_fenced<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick() * 2)).await;
    h.advance(h.tick()).await;
    store.renew(&key, fence, h.tick() * 4).await.unwrap();
    h.advance(h.tick() * 2).await;
    // Without the renewal the lease would have run out by now.
    assert!(matches!(
        store.claim(&req(&key, &f, h.tick())).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    let record = store.get(&key).await.unwrap().unwrap();
    assert!(record.steps.is_empty(), "a renewal records no step");
    // Once the lease runs out and another owner takes over, the first
    // owner's renewal is refused.
    h.advance(h.tick() * 3).await;
    let ClaimOutcome::Acquired { fence: second, .. } =
        store.claim(&req(&key, &f, h.tick() * 10)).await.unwrap()
    else {
        panic!("the lapsed lease is taken over");
    };
    assert_stale(store.renew(&key, fence, h.tick() * 10).await);
    store.renew(&key, second, h.tick() * 10).await.unwrap();
    // A renewal never revives a completed or absent record.
    store
        .complete(&key, second, &success(1), h.tick() * 10)
        .await
        .unwrap();
    assert_stale(store.renew(&key, second, h.tick()).await);
    assert_stale(store.renew(&random_key(), second, h.tick()).await);
}

/// A released key can be claimed again, under a fence never used before, and
/// the earlier fence cannot write to the new claim.
pub async fn released_key_is_claimed_with_a_new_fence<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let first = acquire(&*store, &req(&key, &f, h.tick())).await;
    store.release(&key, first).await.unwrap();
    assert!(store.get(&key).await.unwrap().is_none());
    let second = acquire(&*store, &req(&key, &f, h.tick())).await;
    assert_ne!(first, second);
    assert_stale(store.complete(&key, first, &success(1), h.tick()).await);
    store
        .complete(&key, second, &success(2), h.tick() * 10)
        .await
        .unwrap();
}

/// An expired completed record reads as absent, is swept, and the key can be
/// claimed anew.
pub async fn expired_record_is_swept_and_key_reclaimed<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick())).await;
    store
        .complete(&key, fence, &success(1), h.tick() * 2)
        .await
        .unwrap();
    h.advance(h.tick() * 3).await;
    assert!(
        store.get(&key).await.unwrap().is_none(),
        "expired record still readable"
    );
    let swept = store.sweep().await.unwrap();
    assert!(
        swept >= 1 || h.expires_natively(),
        "sweep deleted nothing though a record had expired"
    );
    let again = acquire(&*store, &req(&key, &f, h.tick())).await;
    assert_ne!(again, fence);
}

/// The sweeper deletes expired completed records only: never an in-flight
/// record, however old, and never a live completed one.
pub async fn sweep_spares_in_flight_and_live_records<H: Harness>(h: H) {
    let store = h.store();
    let f = fp("a");
    let (in_flight, live, expired) = (random_key(), random_key(), random_key());
    acquire(&*store, &req(&in_flight, &f, h.tick())).await;
    let fl = acquire(&*store, &req(&live, &f, h.tick())).await;
    store
        .complete(&live, fl, &success(1), h.tick() * 100)
        .await
        .unwrap();
    let fe = acquire(&*store, &req(&expired, &f, h.tick())).await;
    store
        .complete(&expired, fe, &success(2), h.tick())
        .await
        .unwrap();
    h.advance(h.tick() * 3).await;
    store.sweep().await.unwrap();
    assert!(store.get(&expired).await.unwrap().is_none());
    let record = store
        .get(&in_flight)
        .await
        .unwrap()
        .expect("in-flight record kept");
    assert!(record.outcome().is_none());
    assert_eq!(
        store.get(&live).await.unwrap().unwrap().outcome(),
        Some(&success(1))
    );
}

/// Step values and outputs come back exactly as written, through every
/// encoding a store uses: empty arrays stay arrays and empty objects stay
/// objects, integers beyond 2^53 keep every digit, escapes survive.
pub async fn values_round_trip_exactly<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, h.tick() * 10)).await;
    let steps = [
        ("empty_array", json!([])),
        ("empty_object", json!({})),
        (
            "integers",
            json!({
                "u64_max": u64::MAX,
                "i64_min": i64::MIN,
                "two_53_plus_1": 9_007_199_254_740_993_u64,
                "array": [[], {}, 0, -0.0],
            }),
        ),
        ("float", json!(0.1)),
        ("text", json!("é \u{0} \"quoted\" \\ 𝄞 </script>")),
        ("null", serde_json::Value::Null),
        ("", json!("a step with an empty name")),
    ];
    for (name, value) in &steps {
        store
            .checkpoint(&key, fence, name, value, h.tick() * 10)
            .await
            .unwrap();
    }
    // Output text is kept byte for byte, even where a JSON parser would
    // round (an integer beyond u64) or respell (1.0).
    let text = r#"{"id":123456789012345678901234567890,"list":[],"map":{},"x":1.0,"y":1e400}"#;
    let outcome = Outcome::Success {
        output: serde_json::from_value(json!(text)).expect("output text"),
    };
    store
        .complete(&key, fence, &outcome, h.tick() * 10)
        .await
        .unwrap();
    let want: BTreeMap<String, serde_json::Value> = steps
        .iter()
        .map(|(name, value)| (name.to_string(), value.clone()))
        .collect();
    let record = store.get(&key).await.unwrap().expect("record");
    assert_eq!(record.steps, want);
    assert_eq!(record.outcome(), Some(&outcome));
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::Completed(record) => {
            assert_eq!(record.outcome(), Some(&outcome));
            assert_eq!(record.steps, want);
        }
        other => panic!("expected completed, got {other:?}"),
    }
}

/// A lease or TTL too long to add to a timestamp (`Duration::MAX`, a TTL of
/// "forever") is as long as the store can keep: the owner keeps its lease,
/// the outcome stays recorded and is never swept. It must not wrap around
/// into the past, fail the write, or be rounded into another number.
pub async fn very_long_leases_and_ttls_mean_forever<H: Harness>(h: H) {
    let store = h.store();
    let (key, f) = (random_key(), fp("a"));
    let fence = acquire(&*store, &req(&key, &f, Duration::MAX)).await;
    h.advance(h.tick() * 2).await;
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::InFlight { fence: owner, .. } => assert_eq!(owner, fence),
        other => panic!("a lease of Duration::MAX ran out: {other:?}"),
    }
    store
        .checkpoint(&key, fence, "one", &json!(1), Duration::MAX)
        .await
        .unwrap();
    assert!(matches!(
        store.claim(&req(&key, &f, h.tick())).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
    store
        .complete(&key, fence, &success(4), Duration::MAX)
        .await
        .unwrap();
    h.advance(h.tick() * 2).await;
    store.sweep().await.unwrap();
    let record = store
        .get(&key)
        .await
        .unwrap()
        .expect("the outcome was lost");
    assert_eq!(record.outcome(), Some(&success(4)));
    match store.claim(&req(&key, &f, h.tick())).await.unwrap() {
        ClaimOutcome::Completed(record) => assert_eq!(record.outcome(), Some(&success(4))),
        other => panic!("a TTL of Duration::MAX expired: {other:?}"),
    }
}

/// A waiter is woken when the owner completes, and sees the outcome.
pub async fn waiter_is_woken_by_completion<H: Harness>(h: H) {
    let (store, key) = (h.store(), random_key());
    let fence = acquire(&*store, &req(&key, &fp("a"), h.tick() * 100)).await;
    let record = woken_waiter(&store, &key, || async {
        store
            .complete(&key, fence, &success(3), h.tick() * 10)
            .await
            .unwrap()
    })
    .await
    .expect("record");
    assert_eq!(record.outcome(), Some(&success(3)));
}

/// Start a waiter on `key` ([`Store::wait`]), then `act`, and return what
/// the waiter saw; see [`woken`].
async fn woken_waiter<S: Store, F, Fut>(
    store: &Arc<S>,
    key: &IdempotencyKey,
    act: F,
) -> Option<crate::record::Record>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    let waiter = {
        let (store, key) = (store.clone(), key.clone());
        tokio::spawn(async move { store.wait(&key, WaitFor::Completion, WAITER_TIMEOUT).await })
    };
    woken(waiter, act).await
}

/// How long the waiters of the wake-up cases would wait if nothing woke
/// them: three times the bound [`woken`] gives them to return.
const WAITER_TIMEOUT: Duration = Duration::from_secs(30);

/// Let `waiter` (a task waiting with [`WAITER_TIMEOUT`]) start, then `act`,
/// and return what the waiter saw; it must return well before its own
/// timeout. A bound against hanging, not a latency check: any store's
/// safety poll (1 s at most) is well within it.
async fn woken<F, Fut>(
    waiter: tokio::task::JoinHandle<Result<Option<crate::record::Record>, StoreError>>,
    act: F,
) -> Option<crate::record::Record>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = ()>,
{
    tokio::time::sleep(Duration::from_millis(20)).await;
    act().await;
    tokio::time::timeout(WAITER_TIMEOUT / 3, waiter)
        .await
        .expect("waiter woken well before its timeout")
        .expect("waiter task")
        .expect("wait")
}

/// A waiter is woken when the owner releases the key, and sees no record.
pub async fn waiter_is_woken_by_release<H: Harness>(h: H) {
    let (store, key) = (h.store(), random_key());
    let fence = acquire(&*store, &req(&key, &fp("a"), h.tick() * 100)).await;
    let record = woken_waiter(&store, &key, || async {
        store.release(&key, fence).await.unwrap()
    })
    .await;
    assert!(record.is_none());
}

async fn outcome_of<S: Store + ?Sized>(store: &S, key: &IdempotencyKey) -> Option<Outcome> {
    store
        .get(key)
        .await
        .unwrap()
        .and_then(|r| r.outcome().cloned())
}

fn assert_closed<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    match result {
        Err(StoreError::Closed { .. }) => {}
        other => panic!("{what} after close: expected StoreError::Closed, got {other:?}"),
    }
}

/// [`Store::close`] finishes what is under way and then refuses: every
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
    store
        .complete(&done, fence, &success(1), lease)
        .await
        .unwrap();
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
                        store
                            .complete(&key, fence, &success(tag), lease)
                            .await
                            .unwrap();
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

/// Generate one `#[tokio::test]` per conformance case for a harness factory
/// `async fn() -> Option<H>`.
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:path) => {
        $crate::store_conformance_tests!(@cases $make;
            claim_of_a_new_key_acquires,
            claim_while_in_flight_reports_owner,
            completed_outcome_is_returned_exactly,
            key_reuse_with_other_arguments_is_reported,
            stale_owner_cannot_complete,
            completed_outcome_is_never_overwritten,
            writes_to_an_absent_key_are_rejected,
            steps_survive_a_takeover,
            checkpoint_extends_the_lease,
            renewal_extends_the_lease_and_is_fenced,
            released_key_is_claimed_with_a_new_fence,
            expired_record_is_swept_and_key_reclaimed,
            sweep_spares_in_flight_and_live_records,
            waiter_is_woken_by_completion,
            waiter_is_woken_by_release,
            concurrent_claims_have_one_owner,
            very_long_leases_and_ttls_mean_forever,
            values_round_trip_exactly,
            close_flushes_and_refuses_further_writes,
            claim_records_call_details_and_worker,
            replace_swaps_only_the_record_it_expects,
            awaiting_approval_is_never_taken_over,
            approved_call_is_claimed_once_with_its_approval,
            replace_overrules_only_an_expired_lease,
            completed_record_is_replaced_and_deleted,
            unanswered_approval_request_expires,
            scan_returns_every_record_once,
            an_approval_is_claimed_only_with_the_arguments_it_was_given_for,
            decisions_outlive_the_ttls_around_them,
            an_approval_wakes_a_waiter_for_it,
            a_denial_wakes_a_waiter_for_it,
            a_waiter_for_a_decision_nobody_makes_returns_the_request,
            audit_events_read_back_exactly_in_pages,
            audit_is_filtered_by_key_and_time,
            replace_appends_its_event_only_when_it_swaps,
            audit_events_outlive_their_records,
            audit_retention_sweeps_only_older_events,
            concurrent_audit_appends_lose_none,
            a_claim_that_need_not_be_durable_decides_as_any_claim,
            relaxed_concurrent_claims_have_one_owner,
            a_completion_on_the_callers_thread_is_a_completion,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {$(
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            match $make().await {
                ::core::option::Option::Some(h) => $crate::conformance::$case(h).await,
                ::core::option::Option::None => $crate::conformance::skip(::core::stringify!($case)),
            }
        }
    )*};
}
