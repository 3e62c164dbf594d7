//! `store::intercept` through the public API: a store behind an
//! interceptor behaves exactly as the store (the whole conformance suite,
//! with a hook that sees every operation), the executor's caller's-thread
//! claim still reaches the store's fast path, and a hook that refuses or
//! answers wrongly makes the executor refuse rather than run the tool.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_conformance::Harness;
use idem_runtime::class::NonIdempotentWrite;
use idem_runtime::clock::ManualClock;
use idem_runtime::store::intercept::{Answer, Hook, Interceptor, OpKind, Operation};
use idem_runtime::store::{
    ClaimOutcome, ClaimRequest, LocalClaim, MemoryStore, Store, StoreError, StoreExt,
};
use idem_runtime::{ErrorCode, Executor, IdemError, Tool, ToolCtx, ToolDef, ToolError, ToolSpec};

/// Notes every operation that passes (`claim_local` for the
/// caller's-thread claim), with whether its key was set, and what it
/// answered.
#[derive(Debug, Default)]
struct Trace {
    seen: Mutex<Vec<String>>,
}

impl Trace {
    fn names(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Hook for Trace {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        let kind = op.kind();
        let result = op.run(store).await;
        let outcome = match &result {
            Ok(Answer::Claim(ClaimOutcome::Acquired { .. })) => " acquired",
            Ok(Answer::Claim(ClaimOutcome::Completed(_))) => " completed",
            Ok(_) => "",
            Err(_) => " failed",
        };
        self.seen.lock().unwrap().push(format!("{kind}{outcome}"));
        result
    }

    fn around_local(
        &self,
        req: &ClaimRequest<'_>,
        store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        let answer = store.fast_path().and_then(|fast| fast.claim_local(req));
        let outcome = match &answer {
            Some(Ok(LocalClaim::Claim(ClaimOutcome::Acquired { .. }))) => " acquired",
            Some(Ok(LocalClaim::Completed(_) | LocalClaim::Claim(ClaimOutcome::Completed(_)))) => {
                " completed"
            }
            Some(_) => "",
            None => " declined",
        };
        self.seen
            .lock()
            .unwrap()
            .push(format!("claim_local{outcome}"));
        answer
    }

    fn describe(&self, inner: String) -> String {
        format!("traced({inner})")
    }
}

/// The in-memory store behind a tracing interceptor, for the conformance
/// suite.
struct Traced {
    store: Arc<Interceptor<Trace, MemoryStore>>,
    clock: ManualClock,
}

impl Harness for Traced {
    type Store = Interceptor<Trace, MemoryStore>;
    fn store(&self) -> Arc<Self::Store> {
        self.store.clone()
    }
    fn advance(&self, by: Duration) -> impl Future<Output = ()> + Send {
        self.clock.advance(by);
        std::future::ready(())
    }
}

async fn traced() -> Option<Traced> {
    let clock = ManualClock::new(1_700_000_000_000);
    let inner = MemoryStore::with_clock(Arc::new(clock.clone()));
    Some(Traced {
        store: Arc::new(Interceptor::new(inner, Trace::default())),
        clock,
    })
}

idem_conformance::store_conformance_tests!(traced);

/// A tool that counts its runs.
#[derive(Clone, Copy)]
struct Charge;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Amount {
    cents: u64,
}

impl ToolDef for Charge {
    type Class = NonIdempotentWrite;
    type Args = Amount;
    type Output = u64;
    const SPEC: ToolSpec = ToolSpec::new("charge", "charges a card");
}

impl Tool<Arc<AtomicUsize>> for Charge {
    fn call(
        &self,
        args: Amount,
        _ctx: &ToolCtx,
        runs: &Arc<AtomicUsize>,
    ) -> impl Future<Output = Result<u64, ToolError>> + Send {
        runs.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(args.cents))
    }
}

/// An executor on the in-memory store behind `hook`, with the counter of
/// the tool's runs and the store.
struct Setup<H> {
    executor: Executor<Arc<AtomicUsize>>,
    runs: Arc<AtomicUsize>,
    store: Arc<Interceptor<H, MemoryStore>>,
}

fn executor<H: Hook>(hook: H) -> Setup<H> {
    let runs = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(Interceptor::new(MemoryStore::new(), hook));
    let executor = Executor::builder(store.clone()).state(runs.clone()).build();
    Setup {
        executor,
        runs,
        store,
    }
}

#[tokio::test]
async fn the_executor_claims_on_the_callers_thread_through_the_interceptor() {
    let Setup {
        executor,
        runs,
        store,
    } = executor(Trace::default());
    assert_eq!(store.describe(), "traced(memory)");
    let first = executor
        .call(Charge, Amount { cents: 500 })
        .call_id("call_1")
        .await
        .unwrap();
    let again = executor
        .call(Charge, Amount { cents: 500 })
        .call_id("call_1")
        .await
        .unwrap();
    assert_eq!((first.output, again.output), (500, 500));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "one charge");
    let seen = store.hook().names();
    // The first call is claimed on the caller's thread and the duplicate
    // answered there: no asynchronous claim reaches the store.
    assert_eq!(
        seen.first().map(String::as_str),
        Some("claim_local acquired")
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("claim_local completed")
    );
    assert!(
        !seen.iter().any(|s| s.starts_with("claim ")),
        "no claim went the slow way: {seen:?}"
    );
    assert!(seen.iter().any(|s| s == "complete"), "{seen:?}");
}

/// A hook that misbehaves, and declines the caller's-thread claim so that
/// the misbehaviour is seen.
#[derive(Debug)]
enum Misbehaving {
    /// Refuses every write, as a store that cannot be reached would.
    RefusesWrites,
    /// Answers every claim with a made-up "done".
    AnswersWrongly,
}

#[async_trait::async_trait]
impl Hook for Misbehaving {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        match self {
            Misbehaving::RefusesWrites if op.kind().writes() => {
                let key = op.key().map(|k| k.as_str());
                Err(StoreError::Unavailable {
                    store: store.describe(),
                    cause: format!("refused {} of {key:?}", op.kind()).into(),
                })
            }
            Misbehaving::AnswersWrongly if op.kind() == OpKind::Claim => Ok(Answer::Done),
            _ => op.run(store).await,
        }
    }
    fn around_local(
        &self,
        _req: &ClaimRequest<'_>,
        _store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        None
    }
}

#[tokio::test]
async fn a_hook_that_refuses_before_the_store_keeps_the_tool_from_running() {
    let Setup {
        executor,
        runs,
        store,
    } = executor(Misbehaving::RefusesWrites);
    let err = executor
        .call(Charge, Amount { cents: 500 })
        .call_id("call_1")
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::StoreUnavailable, "{err}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Nothing reached the store.
    let page = store.inner().scan(None, 10).await.unwrap();
    assert!(page.records.is_empty());
}

#[tokio::test]
async fn a_hook_that_answers_the_wrong_kind_of_answer_is_an_unavailable_store() {
    let Setup { executor, runs, .. } = executor(Misbehaving::AnswersWrongly);
    let err: IdemError = executor
        .call(Charge, Amount { cents: 500 })
        .call_id("call_1")
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::StoreUnavailable, "{err}");
    assert!(
        err.to_string().contains("answered `claim` with done"),
        "{err}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}
