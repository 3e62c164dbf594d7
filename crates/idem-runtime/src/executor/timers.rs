//! The approval rules' timers where a call would run, so that no surface
//! and no process runs one late: an approval older than its rule's
//! `valid_for` does not run the call, which is parked again as a new
//! request ([`ask_again_if_lapsed`], phase 4); a request nobody decided
//! within `expires_after` is denied when a call with its key comes back
//! ([`expire_if_due`], phase 2). Both read the rules in force on the store
//! as the executor last read them ([`RulesCache`](super::rules_cache::RulesCache)).

use crate::approval::rules::Rules;
use crate::audit::AuditEvent;
use crate::error::IdemError;
use crate::operator::{Operator, OperatorError};
use crate::record::{AuditAction, Record, Status, APPROVALS_STEP, APPROVAL_STEP, APPROVED_AT_STEP};
use crate::store::StoreExt;

use super::env::CallEnv;
use super::errors;
use super::metrics::Metrics;
use super::owner::Owner;
use super::parked::park_record;
use super::telemetry::{self, Count};

/// Phase 4 for an approved call not yet started: when the approval is
/// older than its rule's `valid_for`, it does not run the call; the
/// lapse is written in the audit log and the call is parked again for a
/// new decision (`Err(ApprovalPending)`).
pub(super) async fn ask_again_if_lapsed(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
) -> Result<(), IdemError> {
    let store = env.store();
    let err = |e| errors::owner(env, owner, e);
    let Some(rules) = env.core.rules.current(store).await.map_err(err)? else {
        return Ok(());
    };
    if !rules.times_approvals() {
        return Ok(());
    }
    let Some(mut record) = store.get(&owner.key).await.map_err(err)? else {
        return Err(IdemError::Superseded {
            tool: env.name().to_owned(),
            key: owner.key.clone(),
            source: None,
        });
    };
    let now = store.now().await.map_err(err)?;
    let Some(lapsed) = rules.lapsed(&record, now) else {
        return Ok(());
    };
    let message = crate::text::timers::lapsed(
        &lapsed.rule,
        lapsed.valid_for,
        lapsed.by.as_deref(),
        lapsed.approved_at,
    );
    // Logged before the record changes, as every decision is: the
    // approval is shown lapsed, never dropped unseen.
    let event = AuditEvent {
        seq: None,
        at: now,
        by: format!("rule “{}”", lapsed.rule),
        action: AuditAction::ApprovalLapsed,
        reason: Some(message.clone()),
        key: owner.key.clone(),
        tool: env.name().to_owned(),
        namespace: Some(owner.namespace().as_str().to_owned()),
        fingerprint: record.fingerprint.clone(),
        before: Some(Status::Approved),
        after: Some(Status::AwaitingApproval),
    };
    store.append_audit(&event).await.map_err(err)?;
    for step in [APPROVAL_STEP, APPROVALS_STEP, APPROVED_AT_STEP] {
        record.steps.remove(step);
    }
    Metrics::bump(&env.metrics().approvals_pending);
    park_record(env, owner, record, &message, Some(&lapsed.rule)).await?;
    Err(IdemError::ApprovalPending {
        tool: env.name().to_owned(),
        key: owner.key.clone(),
        message,
    })
}

/// Phase 2, a claim that found `record` awaiting a decision: when nobody
/// decided it within its rule's `expires_after`, deny it as the rule
/// (the error the caller gets: the model reads why). `Ok(None)`: it has
/// not expired, or changed meanwhile (claim again).
pub(super) async fn expire_if_due(
    env: &CallEnv<'_>,
    record: &Record,
    rules: Option<&Rules>,
) -> Result<Option<IdemError>, IdemError> {
    let store = env.store();
    let Some(rules) = rules else {
        return Ok(None);
    };
    let now = store.now().await.map_err(|e| errors::store(env, e))?;
    let Some(expired) = rules.expired(record, now) else {
        return Ok(None);
    };
    let operator = Operator::new(env.core.store.clone());
    match operator.expire(record, &expired).await {
        Ok(_) => {}
        Err(OperatorError::Changed { .. }) => return Ok(None),
        Err(OperatorError::Store(e)) => return Err(errors::store(env, e)),
        Err(other) => {
            return Err(errors::store(
                env,
                crate::store::StoreError::Unavailable {
                    store: store.describe(),
                    cause: other.to_string().into(),
                },
            ))
        }
    }
    telemetry::count(env, Count::ApprovalDenied);
    Ok(Some(errors::refuse(
        env,
        IdemError::ApprovalDenied {
            tool: env.name().to_owned(),
            reason: expired.reason(),
            deduplicated: false,
        },
    )))
}
