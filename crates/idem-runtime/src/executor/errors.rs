//! The errors a call's caller is told when a phase ends it, made in one
//! place: a store failure, a refusal (counted, and logged in the call's
//! span), a tool's failure, and an owner that lost its key.

use crate::error::{IdemError, ToolError};
use crate::store::StoreError;

use super::env::CallEnv;
use super::metrics::Metrics;
use super::owner::Owner;
use super::telemetry::{self, Count};

/// A store failure, as the caller sees it: a stale fence means another
/// owner took the key over, which is not the store being unavailable.
pub(super) fn store(env: &CallEnv<'_>, source: StoreError) -> IdemError {
    telemetry::count(env, Count::StoreError);
    match source {
        StoreError::StaleFence { ref key, .. } => IdemError::Superseded {
            tool: env.name().to_owned(),
            key: key.clone(),
            source: Some(source),
        },
        source => IdemError::Store {
            tool: env.name().to_owned(),
            source,
        },
    }
}

/// A store failure of an owner: once its lease is lost, any failure to
/// write means it was superseded (the new owner's outcome stands).
pub(super) fn owner(env: &CallEnv<'_>, owner: &Owner<'_>, e: StoreError) -> IdemError {
    if owner.lost() {
        superseded(env, owner, Some(e))
    } else {
        store(env, e)
    }
}

/// A store failure of an owner after its tool started: the effect may
/// have happened, and it is not recorded. A stale fence means another
/// owner took the key over, whose outcome stands; anything else — the
/// store unreachable until the lease ran out included — leaves the
/// record in doubt, and says so.
pub(super) fn unrecorded(env: &CallEnv<'_>, owner: &Owner<'_>, e: StoreError) -> IdemError {
    telemetry::count(env, Count::StoreError);
    if matches!(e, StoreError::StaleFence { .. }) {
        return superseded(env, owner, Some(e));
    }
    refuse(
        env,
        IdemError::OutcomeNotRecorded {
            tool: env.name().to_owned(),
            key: owner.key.clone(),
            source: e,
            repeatable: env.class.may_rerun_unknown_outcome(),
        },
    )
}

/// The caller's error when its owner lost the key.
pub(super) fn superseded(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    cause: Option<StoreError>,
) -> IdemError {
    IdemError::Superseded {
        tool: env.name().to_owned(),
        key: owner.key.clone(),
        source: cause,
    }
}

/// `e`, counted and logged as a refusal: idem ended the call.
pub(super) fn refuse(env: &CallEnv<'_>, e: IdemError) -> IdemError {
    Metrics::bump(&env.metrics().refusals);
    // In the call's span, which a refusal before the call awaits is
    // not yet in.
    let _in = env.span.enter();
    tracing::warn!(error = %e, "idem refused a call");
    e
}

/// The tool failed with `error` (`deduplicated`: a recorded failure).
pub(super) fn tool_failed(env: &CallEnv<'_>, error: ToolError, deduplicated: bool) -> IdemError {
    IdemError::Tool {
        tool: env.name().to_owned(),
        error,
        deduplicated,
    }
}
