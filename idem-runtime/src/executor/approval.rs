//! Phase 4: an `irreversible` call's approval, obtained once per key and
//! recorded under it (as the step [`APPROVAL_STEP`]) before the tool runs,
//! so that a duplicate or a takeover neither asks again nor runs without
//! it. A denial is recorded as the call's outcome; a policy that cannot
//! decide releases the key, so a later call asks again.

use serde_json::Value;

use crate::approval::{ApprovalDecision, ApprovalRequest};
use crate::error::IdemError;
use crate::record::{FailureCode, Outcome, StoredFailure};

use super::claim::Owner;
use super::metrics::Metrics;
use super::{ApprovalSource, CallEnv, APPROVAL_STEP};

impl CallEnv<'_> {
    /// Obtain and record an approval, or record the denial. `args` is asked
    /// for only when a policy needs to see the arguments.
    pub(super) async fn approve(
        &self,
        owner: &Owner,
        args: &(dyn Fn() -> Value + Sync),
    ) -> Result<(), IdemError> {
        Metrics::bump(&self.metrics().approvals_requested);
        let decision = match &self.approval {
            ApprovalSource::Given(approval) => ApprovalDecision::Approved(approval.clone()),
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
                    namespace: owner.namespace.clone(),
                    call_id: self.call_id.clone(),
                    args: args(),
                };
                match policy.decide(&request).await {
                    Ok(decision) => decision,
                    Err(cause) => {
                        // Undecided is not a denial to remember.
                        self.release(owner).await?;
                        Metrics::bump(&self.metrics().approvals_denied);
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
                let value = serde_json::to_value(ApprovalDecision::Approved(approval))
                    .expect("an approval serializes");
                self.store()
                    .checkpoint(&owner.key, owner.fence, APPROVAL_STEP, &value, self.lease())
                    .await
                    .map_err(|e| self.owner_err(owner, e))
            }
            ApprovalDecision::Denied { reason } => {
                Metrics::bump(&self.metrics().approvals_denied);
                let failure = StoredFailure {
                    code: FailureCode::ApprovalDenied,
                    message: reason.clone(),
                    details: None,
                };
                self.complete(owner, Outcome::Failure { failure }).await?;
                Err(self.refuse(IdemError::ApprovalDenied {
                    tool: self.name().to_owned(),
                    reason,
                    deduplicated: false,
                }))
            }
        }
    }
}
