//! Phase 3: what a new owner inherits from an earlier one, settled before
//! anything runs.
//!
//! * An approval recorded for other arguments (a natural key took over an
//!   approved call): the key is handed back at once, so that the approved
//!   call, called again, takes it over and runs as approved.
//! * A previous owner that vanished without an outcome: if it never
//!   started the tool, nothing happened and the call simply runs; a class
//!   that may re-run runs again; otherwise the reconcile hook says
//!   whether the effect happened, once that owner's attempt is waited
//!   out (a wait written into the record, which an operator may end by
//!   settling the key), and a tool without a hook is unknown at once.

use std::borrow::Borrow;
use std::time::Duration;

use crate::error::{IdemError, ToolError};
use crate::record::{Fence, Outlast, OUTLAST_STEP};
use crate::store::{StoreExt, Takeover};
use crate::tool::{Reconciled, Tool};

use super::answer;
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
/// re-run whose previous owner started the tool is reconciled — once
/// that attempt must be over when the tool has a hook, at once (as
/// unknown) when it has none. `Some`: the call ends here; `None`: it
/// runs.
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
    if env.spec.has_reconcile {
        tracing::warn!(
            previous = previous.0,
            "previous owner vanished mid-call; reconciling once its attempt must be over"
        );
        if let Outlasted::Settled(done) = outlast_previous_attempt(env, owner, previous).await {
            return Some(done);
        }
    } else {
        // Without a hook nothing can tell whether the effect happened,
        // however long the wait: asked at once (the default answers
        // `Unknown`), the outcome is unknown now.
        tracing::warn!(
            previous = previous.0,
            "previous owner vanished mid-call, and the tool has no reconcile hook"
        );
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

/// How the wait for a vanished owner's attempt ended.
enum Outlasted<O> {
    /// The attempt must be over: reconcile.
    Over,
    /// The call ends here: an operator settled the key meanwhile (its
    /// resolution is the answer), or this owner lost it.
    Settled(Result<CallOutput<O>, IdemError>),
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
///
/// The wait is written into the record first ([`OUTLAST_STEP`]: until
/// when, after which owner), so that `idem ls`, `idem show` and the
/// inbox show it, and an operator may settle the key meanwhile
/// ([`Operator::resolve`](crate::operator::Operator::resolve)): this
/// owner's next renewal then finds the key settled, and the call
/// answers with the resolution.
async fn outlast_previous_attempt<O: serde::de::DeserializeOwned>(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    previous: Fence,
) -> Outlasted<O> {
    let timeout = env.timeout();
    if timeout == Duration::MAX {
        return Outlasted::Over;
    }
    let marked = async {
        let until = env.store().now().await?.plus(timeout);
        let value = Outlast {
            until,
            previous,
            by: owner.fence,
        }
        .to_value();
        let lease = timeout.saturating_add(env.lease());
        env.store()
            .checkpoint(&owner.key, owner.fence, OUTLAST_STEP, &value, lease)
            .await
    };
    if let Err(e) = marked.await {
        return Outlasted::Settled(Err(errors::owner(env, owner, e)));
    }
    tokio::select! {
        () = tokio::time::sleep(timeout) => {}
        () = owner.ctx.superseded() => {}
    }
    if !owner.lost() {
        return Outlasted::Over;
    }
    // The key was settled (an operator's resolution is written under a
    // fence of its own) or taken from this owner while it waited: an
    // outcome recorded meanwhile is the answer, as for a duplicate.
    match env.store().get(&owner.key).await {
        Ok(Some(record)) if record.outcome().is_some() => {
            Outlasted::Settled(answer::from_outcome(env, &owner.key, record.outcome()))
        }
        Ok(_) => Outlasted::Settled(Err(errors::superseded(env, owner, None))),
        Err(e) => Outlasted::Settled(Err(errors::owner(env, owner, e))),
    }
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
