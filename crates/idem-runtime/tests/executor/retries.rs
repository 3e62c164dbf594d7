//! How the executor retries, by the tool's class and the error's kind:
//! reads and idempotent writes retry, a non-idempotent write never does,
//! an ambiguous failure is recorded as unknown (or reconciled), a
//! permanent one is recorded, and timeouts and `Retry-After` are kept.

use std::time::Duration;

use crate::support::{charge, fresh, msg, send, App, SendEmail, Sent};
use idem_runtime::store::MemoryStore;
use idem_runtime::{ErrorKind, Executor, IdemError, Reconciled, RetryPolicy, ToolError};

#[tokio::test]
async fn idempotent_writes_retry_transient_and_ambiguous_errors_with_the_same_key() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::transient("503"), ToolError::ambiguous("timeout")]);
    let out = send(&exec, "ada", "c").await.unwrap();
    assert_eq!(out.meta.attempts, 3);
    assert_eq!(world.effects(), ["send_email:ada"]);
    assert_eq!(exec.metrics().retries, 2);
}

#[tokio::test]
async fn non_idempotent_writes_are_never_retried_and_a_transient_failure_releases_the_key() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::transient("card network busy")]);
    let err = charge(&exec, "ada", "c").await.unwrap_err();
    assert!(matches!(&err, IdemError::Tool { error, .. } if error.kind() == ErrorKind::Transient));
    assert_eq!(world.calls(), 1, "retried a non-idempotent write");
    // Known not applied: the same call may run again later.
    charge(&exec, "ada", "c").await.unwrap();
    assert_eq!(world.effects(), ["charge_card:ada"]);
}

#[tokio::test]
async fn an_ambiguous_failure_of_a_non_idempotent_write_is_recorded_as_unknown_and_refused() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::ambiguous(
        "timeout after the card network accepted",
    )]);
    let err = charge(&exec, "ada", "c").await.unwrap_err();
    assert!(matches!(err, IdemError::OutcomeUnknown { .. }), "{err}");
    let again = charge(&exec, "ada", "c").await.unwrap_err();
    assert!(matches!(again, IdemError::OutcomeUnknown { .. }), "{again}");
    assert_eq!(world.calls(), 1, "an unknown outcome was re-run");
}

#[tokio::test]
async fn the_reconcile_hook_resolves_an_ambiguous_failure() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::ambiguous("timeout")]);
    let found = Sent {
        id: "ch_found".into(),
        key: None,
    };
    *world.reconcile.lock().unwrap() = Some(Reconciled::Applied(found.clone()));
    let out = charge(&exec, "ada", "c").await.unwrap();
    assert_eq!(out.output, found);
    let dup = charge(&exec, "ada", "c").await.unwrap();
    assert_eq!(dup.output, found);
    assert!(dup.meta.deduplicated);
}

#[tokio::test]
async fn permanent_failures_are_recorded_and_replayed() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::permanent("mailbox does not exist")]);
    let first = send(&exec, "nobody", "c").await.unwrap_err();
    let second = send(&exec, "nobody", "c").await.unwrap_err();
    assert!(!first.is_deduplicated());
    assert!(second.is_deduplicated());
    assert!(second.to_string().contains("mailbox does not exist"));
    assert_eq!(world.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_is_an_ambiguous_error() {
    let world = App::default();
    *world.delay.lock().unwrap() = Some(Duration::from_secs(60));
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .timeout(Duration::from_secs(1))
        .build();
    let err = charge(&exec, "ada", "c").await.unwrap_err();
    assert!(matches!(err, IdemError::OutcomeUnknown { .. }), "{err}");
    assert!(err.to_string().contains("timed out"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::transient("429").with_retry_after(Duration::from_secs(7))]);
    let start = tokio::time::Instant::now();
    send(&exec, "ada", "c").await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_secs(7),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn an_explicit_retry_policy_limits_attempts() {
    let (exec, world) = fresh();
    world.fail_next((0..5).map(|_| ToolError::transient("503")));
    let err = exec
        .call(SendEmail, msg("ada"))
        .call_id("c")
        .retry(
            RetryPolicy::exponential()
                .max_attempts(2)
                .initial_delay(Duration::ZERO),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, IdemError::Tool { .. }));
    assert_eq!(world.calls(), 2);
}

#[tokio::test]
async fn a_timeout_of_duration_max_means_no_timeout_not_an_overflow() {
    let world = App::default();
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .timeout(Duration::MAX)
        .build();
    send(&exec, "ada", "c").await.unwrap();
    assert_eq!(world.effects(), ["send_email:ada"]);
}
