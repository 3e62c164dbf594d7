//! A real Redis server killed at each phase of a `non_idempotent_write`:
//! before the claim, after the claim before the body, during the body,
//! and after the body before the outcome is recorded. What the caller is
//! told must be what happened — "nothing ran, try again" only while
//! nothing ran; after the body started, "it may have taken effect, the
//! outcome is not recorded", with the key — in the library's words and
//! in its code, and the record stays in doubt for an operator.
#![cfg(feature = "redis")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem::prelude::*;
use idem::record::ATTEMPT_STEP;
use idem::store::intercept::{Answer, Hook, Interceptor, OpKind, Operation};
use idem::store::RedisStore;
use idem::{ErrorCode, StoreError};
use idem_testkit::{skip, RedisServer};
use serde::{Deserialize, Serialize};

/// Where the server is killed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    BeforeClaim,
    BeforeBody,
    DuringBody,
    BeforeCompletion,
}

/// The server, and where to kill it.
#[derive(Clone, Debug)]
struct World {
    server: Arc<Mutex<Option<RedisServer>>>,
    phase: Phase,
    runs: Arc<AtomicUsize>,
}

impl World {
    fn kill(&self) {
        if let Some(mut server) = self.server.lock().unwrap().take() {
            server.stop();
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Checkout {
    branch: String,
}

/// Move HEAD: running it twice is not the same as once.
#[tool(class = "non_idempotent_write")]
async fn checkout(args: Checkout, State(world): State<World>) -> Result<String, ToolError> {
    world.runs.fetch_add(1, Ordering::SeqCst);
    if world.phase == Phase::DuringBody {
        world.kill();
    }
    Ok(args.branch)
}

/// Kills the server just before the operation of its phase reaches it.
#[derive(Debug)]
struct KillAt(World);

#[async_trait::async_trait]
impl Hook for KillAt {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        let due = match (&op, self.0.phase) {
            (Operation::Checkpoint { step, .. }, Phase::BeforeBody) => *step == ATTEMPT_STEP,
            (_, Phase::BeforeCompletion) => op.kind() == OpKind::Complete,
            _ => false,
        };
        if due {
            self.0.kill();
        }
        op.run(store).await
    }
}

/// Call `checkout` with the server killed at `phase`; `None` when
/// `redis-server` is not installed.
async fn killed_at(phase: Phase) -> Option<(IdemError, usize)> {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap()?;
    let url = server.url();
    let world = World {
        server: Arc::new(Mutex::new(Some(server))),
        phase,
        runs: Arc::default(),
    };
    let store = RedisStore::connect(&url).await.unwrap();
    let exec = Executor::builder(Interceptor::new(store, KillAt(world.clone())))
        .state(world.clone())
        // Short, so that a store that stays away ends the call soon.
        .lease(Duration::from_secs(2))
        .build();
    if phase == Phase::BeforeClaim {
        world.kill();
    }
    let started = std::time::Instant::now();
    let err = exec
        .call(
            checkout,
            Checkout {
                branch: "main".into(),
            },
        )
        .call_id("c-1")
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{phase:?}: answered after {:?}",
        started.elapsed()
    );
    Some((err, world.runs.load(Ordering::SeqCst)))
}

#[tokio::test]
async fn a_store_killed_before_the_claim_means_nothing_ran() {
    let Some((err, runs)) = killed_at(Phase::BeforeClaim).await else {
        return skip(
            "a_store_killed_before_the_claim_means_nothing_ran",
            "redis-server",
        );
    };
    assert_eq!(runs, 0);
    assert_eq!(err.code(), ErrorCode::StoreUnavailable, "{err}");
    assert!(err.to_string().contains("nothing ran"), "{err}");
}

#[tokio::test]
async fn a_store_killed_after_the_claim_before_the_body_means_nothing_ran() {
    let test = "a_store_killed_after_the_claim_before_the_body_means_nothing_ran";
    let Some((err, runs)) = killed_at(Phase::BeforeBody).await else {
        return skip(test, "redis-server");
    };
    assert_eq!(runs, 0, "the body must not run without its started mark");
    assert_eq!(err.code(), ErrorCode::StoreUnavailable, "{err}");
    assert!(err.to_string().contains("nothing ran"), "{err}");
}

/// After the body started, the caller hears that the effect may have
/// happened and is not recorded, with the key an operator settles — and
/// not that nothing ran.
fn assert_in_doubt(err: &IdemError, runs: usize) {
    assert_eq!(runs, 1);
    assert_eq!(err.code(), ErrorCode::OutcomeNotRecorded, "{err}");
    let text = err.to_string();
    assert!(!text.contains("nothing ran"), "{text}");
    assert!(text.contains("may have taken effect"), "{text}");
    let key = err.key().expect("the key is named");
    assert!(text.contains(key.as_str()), "{text}");
    assert!(
        matches!(
            err,
            IdemError::OutcomeNotRecorded {
                repeatable: false,
                ..
            }
        ),
        "a non-idempotent write is not repeated: {err:?}"
    );
}

#[tokio::test]
async fn a_store_killed_during_the_body_leaves_the_outcome_in_doubt_and_says_so() {
    let test = "a_store_killed_during_the_body_leaves_the_outcome_in_doubt_and_says_so";
    let Some((err, runs)) = killed_at(Phase::DuringBody).await else {
        return skip(test, "redis-server");
    };
    assert_in_doubt(&err, runs);
}

#[tokio::test]
async fn a_store_killed_after_the_body_before_the_outcome_leaves_it_in_doubt_and_says_so() {
    let test = "a_store_killed_after_the_body_before_the_outcome_leaves_it_in_doubt_and_says_so";
    let Some((err, runs)) = killed_at(Phase::BeforeCompletion).await else {
        return skip(test, "redis-server");
    };
    assert_in_doubt(&err, runs);
}
