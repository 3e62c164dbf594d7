//! Phase 4: an `irreversible` call's approval, obtained once per key and
//! recorded under it (as the step [`APPROVAL_STEP`]) before the tool runs,
//! so that a duplicate or a takeover neither asks again nor runs without
//! it. A denial is recorded as the call's outcome; a policy that cannot
//! decide releases the key, so a later call asks again.

use serde_json::Value;

use crate::approval::transition;
use crate::approval::{Approval, ApprovalDecision, ApprovalRequest};
use crate::audit::AuditEvent;
use crate::error::IdemError;
use crate::key::Fingerprint;
use crate::record::{AuditAction, Status};

use super::claim::Owner;
use super::metrics::Metrics;
use super::telemetry::Count;
use super::{ApprovalSource, CallEnv, APPROVAL_STEP};
use crate::store::StoreExt;

impl CallEnv<'_> {
    /// Obtain and record an approval, or record the denial. `args` is asked
    /// for only when a policy needs to see the arguments.
    pub(super) async fn approve(
        &self,
        owner: &Owner<'_>,
        fingerprint: &Fingerprint,
        args: &(dyn Fn() -> Value + Sync),
    ) -> Result<(), IdemError> {
        self.count(Count::ApprovalRequested);
        // Who decided, for the audit log: the caller that handed in an
        // approval, or the executor's policy.
        let given = matches!(self.approval, ApprovalSource::Given(_));
        let decision = match &self.approval {
            ApprovalSource::Given(approval) => {
                ApprovalDecision::Approved(Approval::clone(approval))
            }
            ApprovalSource::Policy => {
                let Some(policy) = &self.core.approvals else {
                    self.release(owner).await?;
                    return Err(self.refuse(IdemError::ApprovalRequired {
                        tool: self.name().to_owned(),
                    }));
                };
                let request = ApprovalRequest {
                    tool: self.name().to_owned(),
                    key: owner.key.clone(),
                    namespace: owner.namespace().clone(),
                    call_id: self.call_id.clone(),
                    args: args(),
                    reason: self.run.reason.clone(),
                };
                match policy.decide(&request).await {
                    Ok(decision) => decision,
                    Err(cause) => {
                        // Undecided is not a denial to remember.
                        self.release(owner).await?;
                        self.count(Count::ApprovalDenied);
                        return Err(self.refuse(IdemError::ApprovalDenied {
                            tool: self.name().to_owned(),
                            reason: format!("the approval policy could not decide: {cause}"),
                            deduplicated: false,
                        }));
                    }
                }
            }
        };
        match decision {
            ApprovalDecision::Approved(approval) => {
                // Bound to the arguments this call carries: only they ever
                // run under it.
                let approval = approval.for_arguments(fingerprint.clone());
                self.count(Count::ApprovalGranted);
                self.span
                    .record("idem.approver", approval.approver.as_str());
                let action = match given {
                    true => AuditAction::Approved,
                    false => AuditAction::ApprovedByPolicy,
                };
                self.log_decision(
                    owner,
                    fingerprint,
                    action,
                    &approval.approver,
                    approval.note.clone(),
                    Status::InFlight,
                )
                .await?;
                let value = transition::step(approval);
                self.store()
                    .checkpoint(&owner.key, owner.fence, APPROVAL_STEP, &value, self.lease())
                    .await
                    .map_err(|e| self.owner_err(owner, e))
            }
            ApprovalDecision::Pending { message } => {
                Metrics::bump(&self.metrics().approvals_pending);
                self.park(owner, &message).await?;
                Err(IdemError::ApprovalPending {
                    tool: self.name().to_owned(),
                    key: owner.key.clone(),
                    message,
                })
            }
            ApprovalDecision::Denied { reason } => {
                self.count(Count::ApprovalDenied);
                self.log_decision(
                    owner,
                    fingerprint,
                    AuditAction::DeniedByPolicy,
                    "approval policy",
                    Some(reason.clone()),
                    Status::Failed,
                )
                .await?;
                self.complete(owner, transition::denial(reason.clone()))
                    .await?;
                Err(self.refuse(IdemError::ApprovalDenied {
                    tool: self.name().to_owned(),
                    reason,
                    deduplicated: false,
                }))
            }
        }
    }

    /// Append a decision about the call to the store's audit log, before it
    /// is recorded on the record: a decision that cannot be logged is not
    /// acted on (the call fails closed, and a later call asks again).
    async fn log_decision(
        &self,
        owner: &Owner<'_>,
        fingerprint: &Fingerprint,
        action: AuditAction,
        by: &str,
        reason: Option<String>,
        after: Status,
    ) -> Result<(), IdemError> {
        let store = self.store();
        let err = |e| self.owner_err(owner, e);
        let event = AuditEvent {
            seq: None,
            at: store.now().await.map_err(err)?,
            by: by.to_owned(),
            action,
            reason,
            key: owner.key.clone(),
            tool: self.name().to_owned(),
            namespace: Some(owner.namespace().as_str().to_owned()),
            fingerprint: fingerprint.clone(),
            before: Some(Status::InFlight),
            after: Some(after),
        };
        store.append_audit(&event).await.map_err(err)?;
        Ok(())
    }

    /// Record the call as awaiting approval: the owner gives up its lease,
    /// since nothing runs until a person decides.
    async fn park(&self, owner: &Owner<'_>, message: &str) -> Result<(), IdemError> {
        let store = self.store();
        let err = |e| self.owner_err(owner, e);
        let now = store.now().await.map_err(err)?;
        let Some(record) = store.get(&owner.key).await.map_err(err)? else {
            return Err(IdemError::Superseded {
                tool: self.name().to_owned(),
                key: owner.key.clone(),
                source: None,
            });
        };
        let ttl = self.core.config.approval_ttl;
        let parked = transition::park(record, owner.fence, now, ttl, message);
        store
            .replace(&owner.key, parked.expected, Some(&parked.record), None)
            .await
            .map_err(err)?;
        tracing::info!(
            key = owner.key.as_str(),
            "approval pending; recorded for a person to decide"
        );
        Ok(())
    }
}
