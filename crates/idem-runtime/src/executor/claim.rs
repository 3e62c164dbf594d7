//! Phase 2: claim the key. The claim either makes this call the key's
//! owner, or finds the call already recorded (answered from its record),
//! reused for other arguments (refused), or in flight under another owner
//! (wait for its outcome, or refuse at once:
//! [`InFlightPolicy`](super::InFlightPolicy)).
//!
//! In replay mode the claim is a read: a recorded outcome answers, anything
//! else is refused as not recorded.

use std::sync::Arc;

use crate::approval::transition;
use crate::ctx::{StepLog, ToolCtx};
use crate::error::IdemError;
use crate::key::IdempotencyKey;
use crate::record::{
    CallInfoRef, Outcome, Reason, Record, RecordState, APPROVAL_STEP, ATTEMPT_STEP,
};
use crate::store::{ClaimOutcome, ClaimRequest, LocalClaim, StoreExt, WaitFor};

use super::answer::Recorded;
use super::env::{CallEnv, Mode};
use super::errors;
use super::flight::Flight;
use super::key::CallKey;
use super::owner::Owner;
use super::telemetry::{self, Count};

/// What a claim found that the call goes on with.
pub(super) enum Claimed<'f> {
    /// This call owns the key and runs.
    Owner(Owner<'f>),
    /// The call is recorded; answer from the record.
    Recorded {
        /// The record, or its outcome.
        record: Recorded,
        /// Whether the claim waited for another owner in flight to find it.
        joined: bool,
    },
}

impl Claimed<'_> {
    /// This claim, made again after waiting (`waited`) for another owner
    /// in flight: a record it finds is that owner's outcome.
    fn found_after_waiting(self, waited: bool) -> Self {
        match self {
            Claimed::Recorded { record, joined } => Claimed::Recorded {
                record,
                joined: joined || waited,
            },
            owner => owner,
        }
    }
}

/// The claim of `call` as the store receives it.
fn request<'c>(env: &'c CallEnv<'_>, call: &'c CallKey) -> ClaimRequest<'c> {
    ClaimRequest {
        key: &call.key,
        tool: env.name(),
        fingerprint: &call.args.fingerprint,
        check_fingerprint: call.check_fingerprint,
        lease: env.lease(),
        info: CallInfoRef {
            namespace: Some(call.namespace.as_str()),
            call_id: env.call_id.as_deref(),
            run_id: env.run.run_id.as_deref(),
            step: env.run.run_id.is_some().then_some(env.run.step),
            args: env.spec.store_args.then_some(call.args.text.as_str()),
            ttl: Some(env.ttl()),
            reason: env.run.reason.as_ref().map(Reason::as_str),
        },
        worker: Some(env.worker()),
        // A lost claim of an `idempotent_write` re-runs with the same
        // key; every other class's claim must outlive a crash.
        durable: env.class.needs_durable_claim(),
    }
}

/// The claim answered on this thread, when the store can
/// ([`FastPath::claim_local`](crate::store::FastPath::claim_local)): the
/// in-memory store always, SQLite for a completed call. `None`: claim
/// the usual way, which also waits for an owner in flight.
pub(super) fn claim_local(
    env: &CallEnv<'_>,
    call: &CallKey,
) -> Option<Result<Claimed<'static>, IdemError>> {
    let sent = tokio::time::Instant::now();
    match env.store().fast_path()?.claim_local(&request(env, call))? {
        Err(e) => Some(Err(errors::store(env, e))),
        // In flight: wait for it. Awaiting approval: maybe expired,
        // which the async claim reads the rules for.
        Ok(LocalClaim::Claim(
            ClaimOutcome::InFlight { .. } | ClaimOutcome::AwaitingApproval(_),
        )) => None,
        Ok(LocalClaim::Claim(outcome)) => settle(env, call, outcome, sent).transpose(),
        Ok(LocalClaim::Completed(outcome)) => Some(Ok(Claimed::Recorded {
            record: Recorded::Outcome(outcome),
            joined: false,
        })),
    }
}

/// Own the key, or find its record, waiting for an owner in flight as
/// [`InFlightPolicy`](super::InFlightPolicy) says.
pub(super) async fn claim(
    env: &CallEnv<'_>,
    call: &CallKey,
) -> Result<Claimed<'static>, IdemError> {
    let key = &call.key;
    if env.mode == Mode::Replay {
        return replay(env, key).await;
    }
    let request = request(env, call);
    // Set when the first in-flight answer arrives.
    let mut wait_until = None;
    loop {
        let sent = tokio::time::Instant::now();
        let outcome = env
            .store()
            .claim(&request)
            .await
            .map_err(|e| errors::store(env, e))?;
        if let ClaimOutcome::AwaitingApproval(record) = &outcome {
            // Nobody decided it within its rule's `expires_after`: denied.
            let rules = env
                .core
                .rules
                .current(env.store())
                .await
                .map_err(|e| errors::store(env, e))?;
            let due = super::timers::expire_if_due(env, record, rules.as_deref());
            if let Some(denied) = Box::pin(due).await? {
                return Err(denied);
            }
        }
        if let Some(claimed) = settle(env, call, outcome, sent)? {
            return Ok(claimed.found_after_waiting(wait_until.is_some()));
        }
        let max = env.in_flight_wait();
        let until = *wait_until.get_or_insert_with(|| tokio::time::Instant::now() + max);
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(errors::refuse(
                env,
                IdemError::InFlight {
                    tool: env.name().to_owned(),
                    key: key.clone(),
                },
            ));
        }
        tracing::debug!("duplicate of a call in flight; waiting for its outcome");
        env.store()
            .wait(key, WaitFor::Completion, left)
            .await
            .map_err(|e| errors::store(env, e))?;
    }
}

/// The record of `key`, if any.
pub(super) async fn lookup(
    env: &CallEnv<'_>,
    key: &IdempotencyKey,
) -> Result<Option<Record>, IdemError> {
    env.store()
        .get(key)
        .await
        .map_err(|e| errors::store(env, e))
}

/// What the store's answer to a claim sent at `sent` means for the
/// call; `None` when another owner holds a live lease.
fn settle(
    env: &CallEnv<'_>,
    call: &CallKey,
    outcome: ClaimOutcome,
    sent: tokio::time::Instant,
) -> Result<Option<Claimed<'static>>, IdemError> {
    let key = &call.key;
    match outcome {
        ClaimOutcome::Acquired {
            fence,
            steps,
            takeover,
            lease_until: _,
        } => Ok(Some(Claimed::Owner({
            // The fence and a takeover are told on the span with the
            // call's end (`Progress::owned`).
            if takeover.is_some() {
                telemetry::count(env, Count::Takeover);
            }
            // Acquiring an approved request, the store checked the
            // arguments against the record's; a takeover did not.
            let foreign_approval = steps.contains_key(APPROVAL_STEP)
                && !transition::covers(
                    &steps,
                    &call.args.fingerprint,
                    takeover.is_none() || call.check_fingerprint,
                );
            let approved = steps.contains_key(APPROVAL_STEP);
            let started = steps.contains_key(ATTEMPT_STEP);
            let log = StepLog::new(
                env.core.store.clone(),
                key.clone(),
                fence,
                env.lease(),
                steps,
            );
            Owner {
                key: key.clone(),
                fence,
                foreign_approval,
                approved,
                started,
                takeover,
                ctx: ToolCtx::owner(
                    env.name(),
                    env.class,
                    call.namespace.clone(),
                    env.call_id.clone(),
                    log,
                    sent + env.lease(),
                    sent,
                ),
                flight: None,
            }
        }))),
        ClaimOutcome::Completed(record) => Ok(Some(Claimed::Recorded {
            record: Recorded::Record(record),
            joined: false,
        })),
        ClaimOutcome::AwaitingApproval(record) => Err(pending(env, &record, call)),
        ClaimOutcome::KeyReused { tool, fingerprint } => Err(errors::refuse(
            env,
            IdemError::KeyReused {
                key: key.clone(),
                stored_tool: tool,
                stored_fingerprint: fingerprint.to_string(),
            },
        )),
        ClaimOutcome::InFlight { .. } => Ok(None),
    }
}

/// Wait, as [`InFlightPolicy`](super::InFlightPolicy) says, for the leader of this key's flight
/// in this process: its recorded outcome, or `None` when it recorded
/// none.
pub(super) async fn follow<'f>(
    env: &CallEnv<'_>,
    key: &IdempotencyKey,
    flight: &'f Flight,
) -> Result<Option<&'f Outcome>, IdemError> {
    if let Some(landed) = flight.try_landed() {
        return Ok(landed);
    }
    let max = env.in_flight_wait();
    let in_flight = || {
        errors::refuse(
            env,
            IdemError::InFlight {
                tool: env.name().to_owned(),
                key: key.clone(),
            },
        )
    };
    if max.is_zero() {
        return Err(in_flight());
    }
    tokio::time::timeout(max, flight.landed())
        .await
        .map_err(|_| in_flight())
}

/// The error of a call whose key awaits a decision: its own approval
/// is pending, or (a natural key) another request for the key, with
/// other arguments, is pending or approved.
pub(super) fn pending(env: &CallEnv<'_>, record: &Record, call: &CallKey) -> IdemError {
    if record.fingerprint != call.args.fingerprint {
        return errors::refuse(
            env,
            IdemError::KeyAwaitsOtherArguments {
                tool: env.name().to_owned(),
                key: record.key.clone(),
                approved: record.approval().is_some(),
                recorded_args: record.info.args.clone(),
            },
        );
    }
    let message = match &record.state {
        RecordState::AwaitingApproval { message, .. } => message.clone(),
        _ => String::new(),
    };
    IdemError::ApprovalPending {
        tool: env.name().to_owned(),
        key: record.key.clone(),
        message,
    }
}

/// Replay mode: the recorded outcome, or refused; never a claim.
async fn replay(env: &CallEnv<'_>, key: &IdempotencyKey) -> Result<Claimed<'static>, IdemError> {
    match env
        .store()
        .get(key)
        .await
        .map_err(|e| errors::store(env, e))?
    {
        Some(record) if record.outcome().is_some() => Ok(Claimed::Recorded {
            record: Recorded::Record(Arc::new(record)),
            joined: false,
        }),
        _ => Err(errors::refuse(
            env,
            IdemError::NotRecorded {
                tool: env.name().to_owned(),
                key: key.clone(),
            },
        )),
    }
}
