//! Phase 4's first question for an `irreversible` call that needs an
//! approval: what the approval rules in force on the store decide of it
//! ([`Rules::decide`]), before the executor's approval policy is asked.
//! The rules are read from the store at most once a second per executor
//! ([`RulesCache`]), so a rule published there applies within a second
//! and a call pays for no read in between.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::approval::rules::{Call, Decided, Rules};
use crate::approval::{Approval, ApprovalDecision};
use crate::error::IdemError;
use crate::store::{Store, StoreExt};

use super::env::CallEnv;
use super::errors;
use super::owner::Owner;

/// How long the rules read from the store are used before they are read
/// again.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The rules in force on the store, as last read.
#[derive(Debug, Default)]
pub(super) struct RulesCache {
    read: Mutex<Option<(Instant, Option<Arc<Rules>>)>>,
}

impl RulesCache {
    /// The rules in force (`None`: none published), read again when the
    /// last read is older than [`FRESH_FOR`].
    async fn current(
        &self,
        store: &dyn Store,
    ) -> Result<Option<Arc<Rules>>, crate::store::StoreError> {
        if let Some((at, rules)) = &*self.read.lock().unwrap_or_else(|p| p.into_inner()) {
            if at.elapsed() < FRESH_FOR {
                return Ok(rules.clone());
            }
        }
        let rules = Rules::in_force(store).await?.map(Arc::new);
        *self.read.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), rules.clone()));
        Ok(rules)
    }
}

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
    let asker = super::approval::asker(env, owner);
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
        super::approval::log_decision(
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
