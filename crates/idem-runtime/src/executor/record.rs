//! Phases 5 and 7: what an owner writes under its key. Before the tool of
//! a class that is never re-run starts, its attempt is marked as started
//! ([`mark_started`]); after the attempts, what happened is recorded
//! ([`outcome`]):
//!
//! * success → the output is recorded and returned;
//! * permanent error → recorded, every duplicate gets it;
//! * transient error, or ambiguous for a class that may re-run → the key
//!   is released, a later call may run;
//! * ambiguous for `non_idempotent_write` / `irreversible` → the reconcile
//!   hook decides; without an answer the outcome is recorded as unknown.

use std::borrow::Borrow;
use std::time::Duration;

use serde_json::Value;

use crate::error::{ErrorKind, IdemError, ToolError};
use crate::record::{FailureCode, Outcome, OutputJson, StoredFailure, ATTEMPT_STEP};
use crate::store::{FenceHolder, StoreError, StoreExt};
use crate::tool::{Reconciled, Tool};

use super::answer;
use super::env::{Call, CallEnv};
use super::errors;
use super::output::CallOutput;
use super::owner::{Approved, Owner, Started};
use super::telemetry::{self, Count};

/// Phase 5, intent before effect: a class that is never re-run marks the
/// attempt as started before its body runs (see [`ATTEMPT_STEP`]), so
/// that a takeover can tell "never started" from "outcome unknown".
pub(super) async fn mark_started<'o>(
    env: &CallEnv<'_>,
    Approved(owner): Approved<'o>,
) -> Result<Started<'o>, IdemError> {
    if env.class.may_rerun_unknown_outcome() {
        return Ok(Started(owner));
    }
    if owner.lost() {
        return Err(errors::superseded(env, owner, None));
    }
    env.store()
        .checkpoint(
            &owner.key,
            owner.fence,
            ATTEMPT_STEP,
            &Value::from(1),
            env.lease(),
        )
        .await
        .map_err(|e| errors::owner(env, owner, e))?;
    Ok(Started(owner))
}

/// What the attempts of phase 6 gave.
pub(super) struct Ran<'o, O> {
    pub(super) started: Started<'o>,
    /// The last attempt's result.
    pub(super) result: Result<O, ToolError>,
    /// How many attempts were made.
    pub(super) attempts: u32,
}

/// Phase 7: record what the attempts gave, and answer with it.
pub(super) async fn outcome<S, T, R>(
    call: &Call<'_, S, T, R>,
    args: &T::Args,
    ran: Ran<'_, T::Output>,
) -> Result<CallOutput<T::Output>, IdemError>
where
    T: Tool<S>,
    R: Borrow<T>,
{
    let Started(owner) = ran.started;
    match ran.result {
        Ok(output) => succeed(&call.env, owner, output, ran.attempts, false).await,
        // Boxed: most calls succeed, and inline the reconcile hook's state
        // would size every call's future.
        Err(error) => Box::pin(failed(call, args, owner, error, ran.attempts)).await,
    }
}

/// What the class decides about a failed owner's key without the tool.
enum Failed {
    /// Recorded or released; the call ends with this error.
    Done(IdemError),
    /// An ambiguous failure of a class that is never re-run: the reconcile
    /// hook must say whether the effect happened.
    Reconcile(ToolError),
}

/// Phase 7 for a call whose last attempt failed with `error`: record or
/// release as the class and the error's kind say, asking the reconcile
/// hook when the failure was ambiguous for a class that is never re-run.
async fn failed<S, T, R>(
    call: &Call<'_, S, T, R>,
    args: &T::Args,
    owner: &Owner<'_>,
    error: ToolError,
    attempts: u32,
) -> Result<CallOutput<T::Output>, IdemError>
where
    T: Tool<S>,
    R: Borrow<T>,
{
    let env = &call.env;
    let error = match settle_failure(env, owner, error).await? {
        Failed::Done(e) => return Err(e),
        Failed::Reconcile(error) => error,
    };
    match call.tool().reconcile(args, &owner.ctx, call.state).await {
        Ok(Reconciled::Applied(output)) => succeed(env, owner, output, attempts, false).await,
        Ok(Reconciled::NotApplied) => {
            release(env, owner).await?;
            Err(errors::tool_failed(env, error, false))
        }
        Ok(Reconciled::Unknown) | Err(_) => {
            let reason = format!("the call failed ambiguously: {}", error.message());
            Err(unknown(env, owner, reason).await)
        }
    }
}

/// Record `output` and return it.
pub(super) async fn succeed<O: serde::Serialize>(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    output: O,
    attempts: u32,
    deduplicated: bool,
) -> Result<CallOutput<O>, IdemError> {
    let text = OutputJson::new(&output).map_err(|e| IdemError::OutputNotSerializable {
        tool: env.name().to_owned(),
        detail: e.to_string(),
    })?;
    complete(env, owner, Outcome::Success { output: text }).await?;
    Ok(CallOutput {
        output,
        meta: answer::meta(env, Some(owner.key.clone()), deduplicated, attempts),
    })
}

/// Record or release the key after a failure, as the class and the
/// error's kind say; see the module docs.
async fn settle_failure(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    error: ToolError,
) -> Result<Failed, IdemError> {
    match error.kind() {
        ErrorKind::Permanent => {
            let failure = StoredFailure {
                code: FailureCode::Permanent,
                message: error.message().to_owned(),
                details: error.details().cloned(),
            };
            complete(env, owner, Outcome::Failure { failure }).await?;
            Ok(Failed::Done(errors::tool_failed(env, error, false)))
        }
        ErrorKind::Transient => {
            release(env, owner).await?;
            Ok(Failed::Done(errors::tool_failed(env, error, false)))
        }
        ErrorKind::Ambiguous if env.class.may_rerun_unknown_outcome() => {
            release(env, owner).await?;
            Ok(Failed::Done(errors::tool_failed(env, error, false)))
        }
        ErrorKind::Ambiguous => Ok(Failed::Reconcile(error)),
    }
}

/// Record `outcome` under the owner's key: the last word of an owner
/// whose tool started, written as [`last_word`] says.
pub(super) async fn complete(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    outcome: Outcome,
) -> Result<(), IdemError> {
    write_outcome(env, owner, outcome, true).await
}

/// Record `outcome` (a denial) before the tool started: a store failure
/// then means nothing ran.
pub(super) async fn complete_unstarted(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    outcome: Outcome,
) -> Result<(), IdemError> {
    write_outcome(env, owner, outcome, false).await
}

async fn write_outcome(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    outcome: Outcome,
    started: bool,
) -> Result<(), IdemError> {
    // An unknown outcome is kept until a person settles it: "never
    // re-run" must not lapse into a second effect with the TTL.
    let ttl = match outcome {
        Outcome::Unknown { .. } => Duration::MAX,
        _ => env.ttl(),
    };
    // Without a flight to publish to, the outcome is not needed after
    // this: a store that completes on this thread takes it.
    let outcome = match owner.flight {
        None => match env.store().fast_path() {
            None => outcome,
            Some(fast) => match fast.complete_local(&owner.key, owner.fence, outcome, ttl) {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) if started => return Err(errors::unrecorded(env, owner, e)),
                Ok(Err(e)) => return Err(errors::owner(env, owner, e)),
                Err(outcome) => outcome,
            },
        },
        Some(_) => outcome,
    };
    let write = || env.store().complete(&owner.key, owner.fence, &outcome, ttl);
    match started {
        true => last_word(env, owner, write, Some(&outcome)).await?,
        false => write().await.map_err(|e| errors::owner(env, owner, e))?,
    }
    if let Some(flight) = owner.flight {
        flight.publish(&outcome);
    }
    Ok(())
}

/// Give the owner's key back (the tool did not take effect, or may run
/// again), written as [`last_word`] says.
pub(super) async fn release(env: &CallEnv<'_>, owner: &Owner<'_>) -> Result<(), IdemError> {
    let write = || env.store().release(&owner.key, owner.fence);
    last_word(env, owner, write, None).await
}

/// Give the owner's key back before its tool started: a store failure
/// then means nothing ran.
pub(super) async fn release_unstarted(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
) -> Result<(), IdemError> {
    env.store()
        .release(&owner.key, owner.fence)
        .await
        .map_err(|e| errors::owner(env, owner, e))
}

/// The longest pause between two tries of an owner's last word.
const LAST_WORD_PAUSE: Duration = Duration::from_secs(1);

/// Write an owner's last word after its tool started — `completed` its
/// outcome, or `None` the key given back — and try again while the store
/// is unreachable and the lease is held (the lease is being renewed
/// meanwhile), then once more: the fence makes a repeat harmless, and an
/// outcome recorded late is worth more than one left in doubt. A try
/// whose answer was lost may have been applied; the next one then finds
/// the key completed under this owner's fence (or given back), which is
/// what was asked. What cannot be written is
/// [`IdemError::OutcomeNotRecorded`]: the effect may have happened.
async fn last_word<W, F>(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    write: W,
    completed: Option<&Outcome>,
) -> Result<(), IdemError>
where
    W: Fn() -> F,
    F: std::future::Future<Output = Result<(), StoreError>>,
{
    let mut pause = Duration::from_millis(50);
    let mut tried = false;
    loop {
        let e = match write().await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        match &e {
            StoreError::StaleFence { current, .. } if tried => {
                return match earlier_try_applied(env, owner, *current, completed).await {
                    true => Ok(()),
                    false => Err(errors::unrecorded(env, owner, e)),
                };
            }
            StoreError::Unavailable { .. } if !owner.lost() => {
                tracing::warn!(error = %e, "could not record the outcome; trying again");
            }
            // The lease ran out while the store was unreachable: a last
            // try, which the fence refuses if another owner took over.
            StoreError::Unavailable { .. } if !tried => {}
            _ => return Err(errors::unrecorded(env, owner, e)),
        }
        tried = true;
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LAST_WORD_PAUSE);
    }
}

/// Whether a refused try of an owner's last word only found an earlier
/// try applied: the key given back, or completed under the owner's
/// fence (which only this owner writes: a resolution is written under a
/// fence of its own) with this outcome, read back to be sure.
async fn earlier_try_applied(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    current: FenceHolder,
    completed: Option<&Outcome>,
) -> bool {
    match (current, completed) {
        (FenceHolder::Nobody, None) => true,
        (FenceHolder::Completed(fence), Some(outcome)) if fence == owner.fence => {
            matches!(
                env.store().get(&owner.key).await,
                Ok(Some(record)) if record.outcome() == Some(outcome)
            )
        }
        _ => false,
    }
}

/// Record the outcome as unknown (every later duplicate is refused)
/// and return the refusal.
pub(super) async fn unknown(env: &CallEnv<'_>, owner: &Owner<'_>, reason: String) -> IdemError {
    telemetry::count(env, Count::UnknownOutcome);
    if let Err(e) = complete(
        env,
        owner,
        Outcome::Unknown {
            reason: reason.clone(),
        },
    )
    .await
    {
        return e;
    }
    errors::refuse(
        env,
        IdemError::OutcomeUnknown {
            tool: env.name().to_owned(),
            key: owner.key.clone(),
            reason,
        },
    )
}
