//! Phase 4's first question for an `irreversible` call that needs an
//! approval: what the approval rules in force on the store decide of it
//! ([`Rules::decide`]), before the executor's approval policy is asked.
//! The rules are read from the store at most once a second per executor
//! ([`RulesCache`](super::rules_cache::RulesCache)), so a rule published
//! there applies within a second and a call pays for no read in between.

use serde_json::Value;

use crate::approval::rules::{Call, Decided};
use crate::approval::{Approval, ApprovalDecision};
use crate::audit::AuditEvent;
use crate::error::IdemError;
use crate::key::Fingerprint;
use crate::record::{AuditAction, Status};
use crate::store::StoreExt;

use super::env::CallEnv;
use super::errors;
use super::owner::Owner;

/// What the rules decided of a call: the decision as a policy's, and
/// the rule that made it.
pub(super) struct ByRule {
    pub(super) decision: ApprovalDecision,
    pub(super) rule: String,
}

/// What the rules in force decide of the call `owner` holds (`None`: no
/// rule decides it; the policy does), after writing in the audit log what
/// each shadow rule that matched would have decided.
pub(super) async fn decide(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    fingerprint: &crate::key::Fingerprint,
    args: &(dyn Fn() -> Value + Sync),
) -> Result<Option<ByRule>, IdemError> {
    let store = env.store();
    let err = |e| errors::owner(env, owner, e);
    let Some(rules) = env.core.rules.current(store).await.map_err(err)? else {
        return Ok(None);
    };
    if rules.is_empty() {
        return Ok(None);
    }
    let args = args();
    let asker = asker(env, owner);
    let now = store.now().await.map_err(err)?;
    let call = Call {
        tool: env.name(),
        namespace: Some(owner.namespace().as_str()),
        principal: Some(&asker),
        args: Some(&args),
        now,
    };
    let verdict = rules.decide(&call);
    for (rule, would) in &verdict.shadows {
        tracing::info!(rule = %rule, would = %would.words(), "a shadow approval rule matched");
        log_decision(
            env,
            owner,
            fingerprint,
            crate::record::AuditAction::ShadowRule,
            &format!("rule “{rule}” (shadow)"),
            Some(format!("would have decided: {}", would.words())),
            crate::record::Status::InFlight,
        )
        .await?;
    }
    let Some((rule, decided)) = verdict.decided else {
        return Ok(None);
    };
    let decision = match decided {
        Decided::Run => ApprovalDecision::Approved(
            Approval::granted_by(format!("rule “{rule}”"))
                .with_note("run with no person: the approval rules decided it"),
        ),
        Decided::Deny { reason } => ApprovalDecision::Denied {
            reason: format!("{reason} (approval rule “{rule}”)"),
        },
        Decided::Ask {
            required,
            approvers,
        } => ApprovalDecision::Pending {
            message: match required {
                1 => format!("Approval rule “{rule}”: one approval of {approvers} is needed before it runs."),
                n => format!("Approval rule “{rule}”: {n} approvals from distinct people ({approvers}) are needed before it runs."),
            },
        },
    };
    Ok(Some(ByRule { decision, rule }))
}

/// Who asked for the call `owner` holds, as recorded for the approval
/// rules: the principal as authenticated, else the namespace whole.
pub(super) fn asker(env: &CallEnv<'_>, owner: &Owner<'_>) -> String {
    match &env.run.principal {
        Some(principal) => principal.clone(),
        None => owner.namespace().as_str().to_owned(),
    }
}

/// Append a decision about the call to the store's audit log, before it
/// is recorded on the record: a decision that cannot be logged is not
/// acted on (the call fails closed, and a later call asks again).
pub(super) async fn log_decision(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    fingerprint: &Fingerprint,
    action: AuditAction,
    by: &str,
    reason: Option<String>,
    after: Status,
) -> Result<(), IdemError> {
    let store = env.store();
    let err = |e| errors::owner(env, owner, e);
    let event = AuditEvent {
        seq: None,
        at: store.now().await.map_err(err)?,
        by: by.to_owned(),
        action,
        reason,
        key: owner.key.clone(),
        tool: env.name().to_owned(),
        namespace: Some(owner.namespace().as_str().to_owned()),
        fingerprint: fingerprint.clone(),
        before: Some(Status::InFlight),
        after: Some(after),
    };
    store.append_audit(&event).await.map_err(err)?;
    Ok(())
}
