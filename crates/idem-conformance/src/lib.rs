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
//! use idem_conformance::MemoryHarness;
//!
//! async fn harness() -> Option<MemoryHarness> {
//!     Some(MemoryHarness::new())
//! }
//!
//! idem_conformance::store_conformance_tests!(harness);
//! # fn main() {}
//! ```
//!
//! A harness factory returning `None` (a server binary is missing) makes each
//! case print a loud `SKIPPED` line and pass, unless `IDEM_REQUIRE_SERVERS=1`
//! is set, in which case it fails.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::StoreExt;
use serde_json::json;

mod audit;
mod concurrency;
mod decisions;
mod durability;
mod lifecycle;
mod macros;
mod open;
mod operations;
pub use audit::*;
pub use concurrency::*;
pub use decisions::*;
pub use durability::*;
pub use lifecycle::*;
pub use open::*;
pub use operations::*;

use idem_runtime::approval::{Approval, ApprovalDecision};
use idem_runtime::audit::DEFAULT_AUDIT_RETENTION;
use idem_runtime::clock::{ManualClock, Timestamp};
use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::record::{Fence, Outcome, OutputJson, Record, RecordState};
use idem_runtime::store::{
    ClaimOutcome, ClaimRequest, Expected, ExpectedState, MemoryStore, Store, StoreError, WaitFor,
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
    /// TTLs), leaving [`StoreExt::sweep`] nothing to count. Such a store must
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
    IdempotencyKey::parse(&hex::encode(bytes)).expect("64 hex digits")
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
        info: idem_runtime::record::CallInfoRef::EMPTY,
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

/// Complete `key`, owned by `fence`, with `outcome`, kept `ttl`.
async fn complete<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    fence: Fence,
    outcome: &Outcome,
    ttl: Duration,
) {
    store
        .complete(key, fence, outcome, ttl)
        .await
        .expect("complete");
}

fn assert_stale<T: std::fmt::Debug>(result: Result<T, StoreError>) {
    match result {
        Err(StoreError::StaleFence { .. }) => {}
        other => panic!("expected a stale-fence rejection, got {other:?}"),
    }
}

/// Start a waiter on `key` ([`StoreExt::wait`]), then `act`, and return what
/// the waiter saw; see [`woken`].
async fn woken_waiter<S: Store, F, Fut>(
    store: &Arc<S>,
    key: &IdempotencyKey,
    act: F,
) -> Option<idem_runtime::record::Record>
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
    waiter: tokio::task::JoinHandle<Result<Option<idem_runtime::record::Record>, StoreError>>,
    act: F,
) -> Option<idem_runtime::record::Record>
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

/// `record`, in flight under `fence`, parked as the executor parks a call
/// awaiting a person's decision asked for at `now`: the lease given up, the
/// request lapsing unanswered after `ttl`. With what the stored record must
/// be for the swap.
fn parked(mut record: Record, fence: Fence, now: Timestamp, ttl: Duration) -> (Expected, Record) {
    record.state = RecordState::AwaitingApproval {
        fence,
        requested_at: now,
        expires_at: now.plus(ttl),
        message: "ask #payments-oncall".to_owned(),
    };
    let expected = Expected {
        fence,
        state: ExpectedState::InFlight,
    };
    (expected, record)
}

/// The value of the approval step that records `approval`, as
/// [`Operator::approve`](idem_runtime::operator::Operator::approve) writes it.
fn approval_step(approval: Approval) -> serde_json::Value {
    serde_json::to_value(ApprovalDecision::Approved(approval)).expect("an approval serializes")
}
