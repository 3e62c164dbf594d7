//! The executor with a store that must not be touched or cannot be
//! reached: reads run without it, writes do not run without it.

use std::time::Duration;

use crate::support::{charge, msg, send, App, LookUp};
use idem_runtime::store::intercept::{Answer, Hook, Interceptor, OpKind, Operation};
use idem_runtime::store::{ClaimRequest, LocalClaim, MemoryStore, Store};
use idem_runtime::{Executor, IdemError, RetryPolicy, StoreError, ToolError};

/// A store that must not be touched (`Panics`) or cannot be reached
/// (`Down`): a hook that answers every operation itself, the caller's-thread
/// claim included, and never calls the store it wraps.
#[derive(Debug)]
enum BrokenStore {
    Panics,
    Down,
}

/// Where the broken store says it is.
const ADDRESS: &str = "redis://10.0.0.9:6379";

impl BrokenStore {
    fn fail<T>(&self) -> Result<T, StoreError> {
        match self {
            BrokenStore::Panics => panic!("the store was touched"),
            BrokenStore::Down => Err(StoreError::Unavailable {
                store: ADDRESS.into(),
                cause: "connection refused".into(),
            }),
        }
    }

    /// An in-memory store (never reached) behind this hook.
    fn store(self) -> Interceptor<BrokenStore, MemoryStore> {
        Interceptor::new(MemoryStore::new(), self)
    }
}

#[async_trait::async_trait]
impl Hook for BrokenStore {
    async fn around(&self, op: Operation<'_>, _store: &dyn Store) -> Result<Answer, StoreError> {
        // Closing a connection that never was touches nothing.
        if op.kind() == OpKind::Close {
            return Ok(Answer::Done);
        }
        self.fail()
    }

    fn around_local(
        &self,
        _req: &ClaimRequest<'_>,
        _store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        Some(self.fail())
    }

    fn describe(&self, _inner: String) -> String {
        ADDRESS.into()
    }
}

#[tokio::test]
async fn reads_are_retried_and_never_touch_the_store() {
    let world = App::default();
    let exec = Executor::builder(BrokenStore::Panics.store())
        .state(world.clone())
        .retry(RetryPolicy::exponential().initial_delay(Duration::from_millis(1)))
        .build();
    world.fail_next([ToolError::transient("503")]);
    let out = exec.call(LookUp, msg("ada")).await.unwrap();
    assert_eq!(out.meta.attempts, 2);
    assert_eq!(out.meta.key, None);
}

#[tokio::test]
async fn a_store_that_is_down_means_writes_do_not_run() {
    let world = App::default();
    let exec = Executor::builder(BrokenStore::Down.store())
        .state(world.clone())
        .build();
    let err = send(&exec, "ada", "c").await.unwrap_err();
    assert!(matches!(err, IdemError::Store { .. }));
    let text = err.to_string();
    assert!(
        text.contains("redis://10.0.0.9:6379") && text.contains("connection refused"),
        "{text}"
    );
    assert_eq!(world.calls(), 0);
}

/// Refuses the first `refusals` completions as an unreachable store
/// would; with `applied`, each refused completion reached the store first
/// (its answer was lost on the way back).
#[derive(Debug)]
struct LostCompletions {
    refusals: std::sync::atomic::AtomicUsize,
    applied: bool,
}

#[async_trait::async_trait]
impl Hook for LostCompletions {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        use std::sync::atomic::Ordering;
        let refuse = op.kind() == OpKind::Complete
            && self
                .refusals
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if !refuse {
            return op.run(store).await;
        }
        if self.applied {
            op.run(store).await?;
        }
        Err(StoreError::Unavailable {
            store: ADDRESS.into(),
            cause: "connection reset".into(),
        })
    }
}

async fn completed_after(refusals: usize, applied: bool) {
    let world = App::default();
    let hook = LostCompletions {
        refusals: refusals.into(),
        applied,
    };
    let exec = Executor::builder(Interceptor::new(MemoryStore::new(), hook))
        .state(world.clone())
        .build();
    let out = charge(&exec, "ada", "c").await.unwrap();
    assert_eq!(world.calls(), 1);
    let again = charge(&exec, "ada", "c").await.unwrap();
    assert!(again.meta.deduplicated, "the outcome was recorded");
    assert_eq!(again.output, out.output);
    assert_eq!(world.calls(), 1, "never run twice");
}

#[tokio::test]
async fn an_outcome_the_store_refused_for_a_moment_is_recorded_when_it_answers() {
    completed_after(3, false).await;
}

#[tokio::test]
async fn an_outcome_recorded_whose_answer_was_lost_is_not_refused_on_the_next_try() {
    completed_after(1, true).await;
}
