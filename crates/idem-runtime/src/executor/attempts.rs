//! Phase 6: run the tool body, each attempt under the tool's timeout (a
//! timeout is an ambiguous error), retrying while the class and the error's
//! kind allow it and the retry policy has attempts left. A keyed owner
//! extends its lease (and records the next attempt number) before each
//! retry, so that the pause does not let another caller take the key over.

use std::borrow::Borrow;
use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use tokio::time::error::Elapsed;

use serde_json::Value;

use crate::ctx::ToolCtx;
use crate::error::ToolError;
use crate::retry::may_retry;
use crate::tool::Tool;

use crate::record::ATTEMPT_STEP;
use crate::store::StoreExt;

use super::env::{Call, CallEnv};
use super::metrics::Metrics;
use super::owner::Owner;

/// Run attempts until success, a non-retryable error or the limit.
/// With `owner` (a keyed call), the lease is extended before a retry,
/// and no retry starts once the lease is lost.
/// Returns the last result and how many attempts were made.
// Not an `async fn`: an `async fn`'s future keeps its parameters twice,
// and the copies, laid out apart, keep the phases' states from sharing
// space.
#[allow(clippy::manual_async_fn)]
pub(super) fn run<'s, S, T, R>(
    call: &'s Call<'_, S, T, R>,
    args: &'s T::Args,
    base: ToolCtx,
    owner: Option<&'s Owner<'_>>,
) -> impl Future<Output = (Result<T::Output, ToolError>, u32)> + Send + 's
where
    S: Send + Sync + 'static,
    T: Tool<S>,
    R: Borrow<T> + Send + Sync,
{
    async move {
        let timeout = call.env.timeout();
        let mut attempt = 1;
        loop {
            let ctx = base.clone().with_attempt(attempt);
            Metrics::bump(&call.env.metrics().executions);
            let run = || call.tool().call(args.clone(), &ctx, call.state);
            let result = match within(timeout, run).await {
                Ok(result) => result,
                Err(_) => Err(ToolError::ambiguous(format!(
                    "timed out after {timeout:?}; the effect may or may not have happened"
                ))),
            };
            call.progress.attempted(attempt);
            let error = match result {
                Ok(output) => return (Ok(output), attempt),
                Err(error) => error,
            };
            // Boxed: most calls never retry, and inline the pause's timer
            // and the lease's extension would size every call's future.
            if !Box::pin(before_retry(&call.env, attempt, &error, owner)).await {
                return (Err(error), attempt);
            }
            attempt += 1;
        }
    }
}

/// The context a tool sees: no key for reads.
pub(super) fn base_ctx(env: &CallEnv<'_>) -> ToolCtx {
    ToolCtx::new(env.name(), env.class)
        .with_namespace(env.namespace())
        .with_call_id(env.call_id.clone())
}

/// `run`, cut off `timeout` after it started, as `tokio::time::timeout`
/// does; but the timer is made, boxed, only if the first poll leaves
/// `run` pending. A tool that answers at once (no I/O, or a cache) costs
/// no timer entry and no look-up of the runtime's time driver, and its
/// outcome is the same: `tokio::time::timeout` polls the future before
/// its timer, so a future ready at its first poll is never timed out. A
/// timer inline would size every call's future (tokio's is some 400
/// bytes), used or not.
#[allow(clippy::manual_async_fn)]
fn within<F: Future>(
    timeout: Duration,
    run: impl FnOnce() -> F,
) -> impl Future<Output = Result<F::Output, Elapsed>> {
    // Not an `async fn`, and the tool's future made inside: an `async fn`
    // keeps its parameters twice (as passed, and pinned in its body).
    async move {
        let started = tokio::time::Instant::now();
        let mut run = std::pin::pin!(run());
        if let Poll::Ready(output) = poll_once(run.as_mut()).await {
            return Ok(output);
        }
        match started.checked_add(timeout) {
            Some(deadline) => Box::pin(tokio::time::timeout_at(deadline, run)).await,
            // No deadline a clock can hold (`Duration::MAX`: no timeout).
            None => Ok(run.await),
        }
    }
}

/// Whether attempt `attempt`, which failed with `error`, is followed by
/// another, after a pause (over when this returns `true`). A keyed
/// owner's lease is extended over the pause and the next attempt
/// first; if that fails, no retry.
async fn before_retry(
    env: &CallEnv<'_>,
    attempt: u32,
    error: &ToolError,
    owner: Option<&Owner<'_>>,
) -> bool {
    let Some(pause) = retry_pause(env, attempt, error, owner).await else {
        return false;
    };
    tokio::time::sleep(pause).await;
    true
}

/// The pause before the attempt after `attempt`, if there is one.
async fn retry_pause(
    env: &CallEnv<'_>,
    attempt: u32,
    error: &ToolError,
    owner: Option<&Owner<'_>>,
) -> Option<Duration> {
    let retryable = attempt < env.policy.attempts()
        && !owner.is_some_and(Owner::lost)
        && may_retry(env.class, error.kind())
        && !env
            .policy
            .policy()
            .retry_after_too_long(error.retry_after());
    if !retryable {
        return None;
    }
    let pause = env.policy.policy().delay(attempt, error.retry_after());
    if let Some(owner) = owner {
        // Keep ownership through the pause and the next attempt.
        let extend = env
            .store()
            .checkpoint(
                &owner.key,
                owner.fence,
                ATTEMPT_STEP,
                &Value::from(attempt + 1),
                pause.saturating_add(env.lease()),
            )
            .await;
        if let Err(e) = extend {
            tracing::warn!(error = %e, "could not extend the lease; not retrying");
            return None;
        }
    }
    tracing::info!(attempt, kind = %error.kind(), pause_ms = pause.as_millis() as u64, error = %error.message(), "retrying");
    Metrics::bump(&env.metrics().retries);
    Some(pause)
}

/// Poll `future` once, in the task awaiting this, and say what it gave:
/// what a phase does before it pays for what only pending work needs (a
/// timer, a lease's renewal).
pub(super) async fn poll_once<F: Future>(mut future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}
