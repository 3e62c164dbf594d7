//! Phase 3: what a new owner inherits from an earlier one, settled before
//! anything runs.
//!
//! * An approval recorded for other arguments (a natural key took over an
//!   approved call): the key is handed back at once, so that the approved
//!   call, called again, takes it over and runs as approved.
//! * A previous owner that vanished without an outcome: if it never
//!   started the tool, nothing happened and the call simply runs; a class
//!   that may re-run runs again; otherwise its attempt is waited out and
//!   the reconcile hook says whether the effect happened.

use std::borrow::Borrow;
use std::time::Duration;

use crate::error::{IdemError, ToolError};
use crate::record::Fence;
use crate::store::{StoreExt, Takeover};
use crate::tool::{Reconciled, Tool};

use super::env::{Call, CallEnv};
use super::errors;
use super::output::CallOutput;
use super::owner::{Owned, Owner};
use super::record;
use super::telemetry::{self, Count};

/// How phase 3 ended.
pub(super) enum Settled<'o, O> {
    /// Nothing inherited stops the owner: go on.
    Run(Owned<'o>),
    /// The call ends here: handed back, reconciled, or refused.
    Done(Result<CallOutput<O>, IdemError>),
}

/// Settle what `owner` inherited. Boxed where it is taken: most calls
/// inherit nothing, and inline its states would size every call's future.
pub(super) async fn settle<'o, S, T, R>(
    call: &Call<'_, S, T, R>,
    args: &T::Args,
    owner: &'o Owner<'o>,
) -> Settled<'o, T::Output>
where
    T: Tool<S>,
    R: Borrow<T>,
{
    if owner.foreign_approval {
        return Settled::Done(Err(Box::pin(hand_back_approved(&call.env, owner)).await));
    }
    if let Some(Takeover { previous }) = owner.takeover {
        if let Some(done) = Box::pin(vanished_owner(call, args, owner, previous)).await {
            return Settled::Done(done);
        }
    }
    Settled::Run(Owned(owner))
}

/// A previous owner vanished without an outcome: a class that is never
/// re-run whose previous owner started the tool is reconciled once that
/// attempt must be over. `Some`: the call ends here; `None`: it runs.
async fn vanished_owner<S, T, R>(
    call: &Call<'_, S, T, R>,
    args: &T::Args,
    owner: &Owner<'_>,
    previous: Fence,
) -> Option<Result<CallOutput<T::Output>, IdemError>>
where
    T: Tool<S>,
    R: Borrow<T>,
{
    let env = &call.env;
    if env.class.may_rerun_unknown_outcome() || !owner.started {
        if !owner.started {
            tracing::info!(
                previous = previous.0,
                "previous owner vanished before starting the tool; running it"
            );
        }
        return None;
    }
    tracing::warn!(
        previous = previous.0,
        "previous owner vanished mid-call; reconciling once its attempt must be over"
    );
    if let Err(e) = outlast_previous_attempt(env, owner).await {
        return Some(Err(e));
    }
    match call.tool().reconcile(args, &owner.ctx, call.state).await {
        Ok(Reconciled::Applied(output)) => Some(record::succeed(env, owner, output, 0, true).await),
        Ok(Reconciled::NotApplied) => None,
        Ok(Reconciled::Unknown) => {
            let reason = vanished(env, previous);
            Some(Err(record::unknown(env, owner, reason).await))
        }
        Err(e) => Some(Err(reconcile_failed(env, owner, e))),
    }
}

/// Wait, holding the key (its lease is renewed meanwhile), until the
/// previous owner's attempt must be over: its lease lapsed, but it may
/// only have been unable to renew — a process paused, a store too busy
/// to answer in time — while already inside its provider call, past its
/// last `ctx.is_superseded()` check. A reconcile hook asked before that
/// call lands would find nothing and let the call run a second time.
/// The attempt started before the lease lapsed and runs at most the
/// tool's timeout, so that is the wait. A tool without a timeout
/// (`Duration::MAX`) gives no bound, and is reconciled at once.
async fn outlast_previous_attempt(env: &CallEnv<'_>, owner: &Owner<'_>) -> Result<(), IdemError> {
    let timeout = env.timeout();
    if timeout == Duration::MAX {
        return Ok(());
    }
    tokio::time::sleep(timeout).await;
    if owner.lost() {
        return Err(errors::superseded(env, owner, None));
    }
    Ok(())
}

/// Give up a key whose recorded approval was given for other arguments:
/// cut the lease to nothing (the approved call takes it over at once)
/// and refuse.
async fn hand_back_approved(env: &CallEnv<'_>, owner: &Owner<'_>) -> IdemError {
    if let Err(e) = env
        .store()
        .renew(&owner.key, owner.fence, Duration::ZERO)
        .await
    {
        return errors::owner(env, owner, e);
    }
    errors::refuse(
        env,
        IdemError::KeyAwaitsOtherArguments {
            tool: env.name().to_owned(),
            key: owner.key.clone(),
            approved: true,
            recorded_args: None,
        },
    )
}

/// Why the outcome of a call whose owner `previous` vanished is unknown.
fn vanished(env: &CallEnv<'_>, previous: Fence) -> String {
    format!(
        "its owner ({previous}) vanished before recording an outcome{}",
        if env.spec.has_reconcile {
            " and the reconcile hook could not tell"
        } else {
            " and the tool has no reconcile hook"
        }
    )
}

/// The reconcile hook of a takeover failed: the record stays in flight,
/// and when this lease runs out the next caller reconciles again.
fn reconcile_failed(env: &CallEnv<'_>, owner: &Owner<'_>, e: ToolError) -> IdemError {
    telemetry::count(env, Count::UnknownOutcome);
    errors::refuse(
        env,
        IdemError::OutcomeUnknown {
            tool: env.name().to_owned(),
            key: owner.key.clone(),
            reason: format!(
                "the reconcile hook failed ({e}); it will be tried again after the lease expires"
            ),
        },
    )
}
