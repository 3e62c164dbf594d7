//! What a call answers: its output and how it was obtained ([`meta`]),
//! and a duplicate's answer from the outcome its key recorded
//! ([`Recorded`]).

use std::sync::Arc;

use crate::error::{IdemError, ToolError};
use crate::key::IdempotencyKey;
use crate::record::{FailureCode, Outcome, OutputJson, Record};

use super::env::CallEnv;
use super::errors;
use super::metrics::Metrics;
use super::output::{CallMeta, CallOutput};

/// A completed call as its claim found it.
pub(super) enum Recorded {
    /// The whole record.
    Record(Arc<Record>),
    /// The outcome alone: a store that answered on the caller's thread
    /// ([`LocalClaim::Completed`](crate::store::LocalClaim::Completed)).
    Outcome(Outcome),
}

impl Recorded {
    /// What the call produced (`None`: it is not completed).
    pub(super) fn outcome(&self) -> Option<&Outcome> {
        match self {
            Recorded::Record(record) => record.outcome(),
            Recorded::Outcome(outcome) => Some(outcome),
        }
    }
}

/// How the call was carried out.
pub(super) fn meta(
    env: &CallEnv<'_>,
    key: Option<IdempotencyKey>,
    deduplicated: bool,
    attempts: u32,
) -> CallMeta {
    CallMeta {
        tool: env.name(),
        class: env.class,
        key,
        deduplicated,
        attempts,
        edited: None,
    }
}

/// Answer a duplicate of `key` from what its claim found.
pub(super) fn from_record<O: serde::de::DeserializeOwned>(
    env: &CallEnv<'_>,
    key: &IdempotencyKey,
    recorded: &Recorded,
) -> Result<CallOutput<O>, IdemError> {
    from_outcome(env, key, recorded.outcome())
}

/// Answer a duplicate from the outcome recorded under `key` (`None`:
/// still in flight).
pub(super) fn from_outcome<O: serde::de::DeserializeOwned>(
    env: &CallEnv<'_>,
    key: &IdempotencyKey,
    outcome: Option<&Outcome>,
) -> Result<CallOutput<O>, IdemError> {
    let output = recorded_output(env, key, outcome)?;
    let output = output
        .parse::<O>()
        .map_err(|e| IdemError::RecordedOutputMismatch {
            tool: env.name().to_owned(),
            detail: e.to_string(),
        })?;
    Ok(CallOutput {
        output,
        meta: meta(env, Some(key.clone()), true, 0),
    })
}

/// The recorded output of a successful call, or the error every
/// duplicate of a failed, denied or unknown call gets.
fn recorded_output<'r>(
    env: &CallEnv<'_>,
    key: &IdempotencyKey,
    outcome: Option<&'r Outcome>,
) -> Result<&'r OutputJson, IdemError> {
    Metrics::bump(&env.metrics().dedup_hits);
    match outcome {
        Some(Outcome::Success { output }) => Ok(output),
        Some(Outcome::Failure { failure }) if failure.code == FailureCode::ApprovalDenied => {
            Err(IdemError::ApprovalDenied {
                tool: env.name().to_owned(),
                reason: failure.message.clone(),
                deduplicated: true,
            })
        }
        Some(Outcome::Failure { failure }) => {
            let mut error = ToolError::permanent(&failure.message);
            if let Some(details) = &failure.details {
                error = error.with_details(details.clone());
            }
            Err(errors::tool_failed(env, error, true))
        }
        Some(Outcome::Unknown { reason }) => Err(errors::refuse(
            env,
            IdemError::OutcomeUnknown {
                tool: env.name().to_owned(),
                key: key.clone(),
                reason: reason.clone(),
            },
        )),
        None => Err(IdemError::InFlight {
            tool: env.name().to_owned(),
            key: key.clone(),
        }),
    }
}
