//! Phase 4: an `irreversible` call's approval, obtained once per key and
//! recorded under it (as the step [`APPROVAL_STEP`]) before the tool runs,
//! so that a duplicate or a takeover neither asks again nor runs without
//! it. A denial is recorded as the call's outcome; a policy that cannot
//! decide releases the key, so a later call asks again.

use serde_json::Value;

use crate::approval::transition;
use crate::approval::{Approval, ApprovalDecision, ApprovalRequest};
use crate::error::IdemError;
use crate::key::Fingerprint;
use crate::record::{AuditAction, Status};

use crate::record::{APPROVAL_STEP, ASKER_STEP};
use crate::store::StoreExt;

use super::env::{ApprovalSource, CallEnv};
use super::errors;
use super::metrics::Metrics;
use super::owner::{Approved, Owned, Owner};
use super::parked;
use super::record;
use super::rules::log_decision;
use super::telemetry::{self, Count};

/// Phase 4: an owner whose class needs an approval and holds none
/// obtains one and records it under the key, or records the denial, or
/// parks the call awaiting a person's decision. `args` is asked for only
/// when a policy needs to see the arguments.
pub(super) async fn obtain<'o>(
    env: &CallEnv<'_>,
    Owned(owner): Owned<'o>,
    fingerprint: &Fingerprint,
    args: &(dyn Fn() -> Value + Sync),
) -> Result<Approved<'o>, IdemError> {
    if env.class.needs_approval() && !owner.approved {
        // Boxed: only irreversible calls ask, and inline the policy's
        // future would size every call's.
        Box::pin(decide(env, owner, fingerprint, args)).await?;
    } else if env.class.needs_approval() && !owner.started {
        // Approved, not yet run: not if the approval is older than its
        // rule lets it be.
        Box::pin(super::timers::ask_again_if_lapsed(env, owner)).await?;
    }
    Ok(Approved(owner))
}

/// Obtain and record an approval, or record the denial. `args` is asked
/// for only when a policy needs to see the arguments.
async fn decide(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    fingerprint: &Fingerprint,
    args: &(dyn Fn() -> Value + Sync),
) -> Result<(), IdemError> {
    telemetry::count(env, Count::ApprovalRequested);
    // Who decided, for the audit log: the caller that handed in an
    // approval, or the executor's policy.
    let given = matches!(env.approval, ApprovalSource::Given(_));
    // The rule that decided, if the approval rules did.
    let mut by_rule: Option<String> = None;
    let decision = match &env.approval {
        ApprovalSource::Given(approval) => ApprovalDecision::Approved(Approval::clone(approval)),
        ApprovalSource::Policy => {
            match super::rules::decide(env, owner, fingerprint, args).await? {
                Some(decided) => {
                    by_rule = Some(decided.rule);
                    decided.decision
                }
                None => ask_policy(env, owner, args).await?,
            }
        }
    };
    match decision {
        ApprovalDecision::Approved(approval) => {
            // Bound to the arguments this call carries: only they ever
            // run under it.
            let approval = approval.for_arguments(fingerprint.clone());
            telemetry::count(env, Count::ApprovalGranted);
            env.span.record("idem.approver", approval.approver.as_str());
            let action = match given {
                true => AuditAction::Approved,
                false => AuditAction::ApprovedByPolicy,
            };
            log_decision(
                env,
                owner,
                fingerprint,
                action,
                &approval.approver,
                approval.note.clone(),
                Status::InFlight,
            )
            .await?;
            let value = transition::step(approval);
            env.store()
                .checkpoint(&owner.key, owner.fence, APPROVAL_STEP, &value, env.lease())
                .await
                .map_err(|e| errors::owner(env, owner, e))
        }
        ApprovalDecision::Pending { message } => {
            Metrics::bump(&env.metrics().approvals_pending);
            park(env, owner, &message, by_rule.as_deref()).await?;
            Err(IdemError::ApprovalPending {
                tool: env.name().to_owned(),
                key: owner.key.clone(),
                message,
            })
        }
        ApprovalDecision::Denied { reason } => {
            telemetry::count(env, Count::ApprovalDenied);
            log_decision(
                env,
                owner,
                fingerprint,
                AuditAction::DeniedByPolicy,
                &by_rule.map_or("approval policy".to_owned(), |r| format!("rule “{r}”")),
                Some(reason.clone()),
                Status::Failed,
            )
            .await?;
            record::complete_unstarted(env, owner, transition::denial(reason.clone())).await?;
            Err(errors::refuse(
                env,
                IdemError::ApprovalDenied {
                    tool: env.name().to_owned(),
                    reason,
                    deduplicated: false,
                },
            ))
        }
    }
}

/// The executor's approval policy's decision (refused when it has none,
/// or cannot decide: the key is released, and a later call asks again).
async fn ask_policy(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    args: &(dyn Fn() -> Value + Sync),
) -> Result<ApprovalDecision, IdemError> {
    let Some(policy) = &env.core.approvals else {
        record::release_unstarted(env, owner).await?;
        return Err(errors::refuse(
            env,
            IdemError::ApprovalRequired {
                tool: env.name().to_owned(),
            },
        ));
    };
    let request = ApprovalRequest {
        tool: env.name().to_owned(),
        key: owner.key.clone(),
        namespace: owner.namespace().clone(),
        call_id: env.call_id.clone(),
        args: args(),
        reason: env.run.reason.clone(),
    };
    match policy.decide(&request).await {
        Ok(decision) => Ok(decision),
        Err(cause) => {
            // Undecided is not a denial to remember.
            record::release_unstarted(env, owner).await?;
            telemetry::count(env, Count::ApprovalDenied);
            Err(errors::refuse(
                env,
                IdemError::ApprovalDenied {
                    tool: env.name().to_owned(),
                    reason: format!("the approval policy could not decide: {cause}"),
                    deduplicated: false,
                },
            ))
        }
    }
}

/// Record the call as awaiting approval: the owner gives up its lease,
/// since nothing runs until a person decides ([`parked::park_record`]
/// with the record read, asked by this caller).
async fn park(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    message: &str,
    rule: Option<&str>,
) -> Result<(), IdemError> {
    let store = env.store();
    let err = |e| errors::owner(env, owner, e);
    let Some(mut record) = store.get(&owner.key).await.map_err(err)? else {
        return Err(IdemError::Superseded {
            tool: env.name().to_owned(),
            key: owner.key.clone(),
            source: None,
        });
    };
    // This caller asks.
    record.steps.remove(ASKER_STEP);
    parked::park_record(env, owner, record, message, rule).await
}
