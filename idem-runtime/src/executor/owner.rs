//! Phases 3 and 6, and the order of everything an owner does: settle a
//! takeover (phase 3), get an approval (phase 4, `approval.rs`), run the
//! attempts (phase 5, `attempts.rs`), then record what happened (phase 6):
//!
//! * success → the output is recorded and returned;
//! * permanent error → recorded, every duplicate gets it;
//! * transient error, or ambiguous for a class that may re-run → the key
//!   is released, a later call may run;
//! * ambiguous for `non_idempotent_write` / `irreversible` → the reconcile
//!   hook decides; without an answer the outcome is recorded as unknown.

use serde_json::Value;

use crate::ctx::{StepLog, ToolCtx};
use crate::error::{ErrorKind, IdemError, ToolError};
use crate::record::{FailureCode, Fence, Outcome, OutputJson, StoredFailure};
use crate::store::Takeover;
use crate::tool::{Reconciled, Tool};

use super::claim::Owner;
use super::{Call, CallEnv, CallOutput, APPROVAL_STEP};

/// What the class decides about a failed owner's key without the tool.
enum Settled {
    /// Recorded or released; the call ends with this error.
    Done(IdemError),
    /// An ambiguous failure of a class that is never re-run: the reconcile
    /// hook must say whether the effect happened.
    Reconcile(ToolError),
}

impl<S: Send + Sync + 'static, T: Tool<S>> Call<'_, S, T> {
    /// We own the key: reconcile a takeover, get an approval, run, record.
    pub(super) async fn owned(
        self,
        args: T::Args,
        mut owner: Owner,
    ) -> Result<CallOutput<T::Output>, IdemError> {
        let env = &self.env;
        let approved = owner.steps.contains_key(APPROVAL_STEP);
        let log = StepLog::new(
            env.core.store.clone(),
            owner.key.clone(),
            owner.fence,
            env.lease(),
            std::mem::take(&mut owner.steps),
        );
        let ctx = env.owner_ctx(&owner).with_steps(log);

        // Phase 3: a previous owner vanished without an outcome.
        if let Some(Takeover { previous }) = owner.takeover {
            if !env.class.may_rerun_unknown_outcome() {
                tracing::warn!(
                    previous = previous.0,
                    "previous owner vanished; reconciling"
                );
                match self.tool.reconcile(&args, &ctx, self.state).await {
                    Ok(Reconciled::Applied(output)) => {
                        return env.succeed(&owner, output, 0, true).await
                    }
                    Ok(Reconciled::NotApplied) => {}
                    Ok(Reconciled::Unknown) => {
                        let reason = env.vanished(previous);
                        return Err(env.unknown(&owner, reason).await);
                    }
                    Err(e) => return Err(env.reconcile_failed(&owner, e)),
                }
            }
        }

        // Phase 4.
        if env.class.needs_approval() && !approved {
            env.approve(&owner, &|| {
                serde_json::to_value(&args).unwrap_or(Value::Null)
            })
            .await?;
        }

        // Phase 5.
        let (result, attempts) = self
            .attempts(&args, ctx.clone(), Some((&owner.key, owner.fence)))
            .await;

        // Phase 6.
        let error = match result {
            Ok(output) => return env.succeed(&owner, output, attempts, false).await,
            Err(error) => error,
        };
        let error = match env.settle_failure(&owner, error).await? {
            Settled::Done(e) => return Err(e),
            Settled::Reconcile(error) => error,
        };
        match self.tool.reconcile(&args, &ctx, self.state).await {
            Ok(Reconciled::Applied(output)) => env.succeed(&owner, output, attempts, false).await,
            Ok(Reconciled::NotApplied) => {
                env.release(&owner).await?;
                Err(env.tool_failed(error, false))
            }
            Ok(Reconciled::Unknown) | Err(_) => {
                let reason = format!("the call failed ambiguously: {}", error.message());
                Err(env.unknown(&owner, reason).await)
            }
        }
    }
}

impl CallEnv<'_> {
    /// The context a tool sees: no key for reads.
    pub(super) fn base_ctx(&self) -> ToolCtx {
        ToolCtx::new(self.name(), self.class)
            .with_namespace(self.namespace())
            .with_call_id(self.call_id.clone())
    }

    /// The context an owner's tool sees: its key and namespace.
    fn owner_ctx(&self, owner: &Owner) -> ToolCtx {
        ToolCtx::new(self.name(), self.class)
            .with_namespace(owner.namespace.clone())
            .with_call_id(self.call_id.clone())
            .with_key(owner.key.clone())
    }

    /// Record `output` and return it.
    async fn succeed<O: serde::Serialize>(
        &self,
        owner: &Owner,
        output: O,
        attempts: u32,
        deduplicated: bool,
    ) -> Result<CallOutput<O>, IdemError> {
        let text = OutputJson::new(&output).map_err(|e| IdemError::OutputNotSerializable {
            tool: self.name().to_owned(),
            detail: e.to_string(),
        })?;
        self.complete(owner, Outcome::Success { output: text })
            .await?;
        Ok(CallOutput {
            output,
            meta: self.meta(Some(owner.key.clone()), deduplicated, attempts),
        })
    }

    /// Record or release the key after a failure, as the class and the
    /// error's kind say; see the module docs.
    async fn settle_failure(&self, owner: &Owner, error: ToolError) -> Result<Settled, IdemError> {
        match error.kind() {
            ErrorKind::Permanent => {
                let failure = StoredFailure {
                    code: FailureCode::Permanent,
                    message: error.message().to_owned(),
                    details: error.details().cloned(),
                };
                self.complete(owner, Outcome::Failure { failure }).await?;
                Ok(Settled::Done(self.tool_failed(error, false)))
            }
            ErrorKind::Transient => {
                self.release(owner).await?;
                Ok(Settled::Done(self.tool_failed(error, false)))
            }
            ErrorKind::Ambiguous if self.class.may_rerun_unknown_outcome() => {
                self.release(owner).await?;
                Ok(Settled::Done(self.tool_failed(error, false)))
            }
            ErrorKind::Ambiguous => Ok(Settled::Reconcile(error)),
        }
    }

    pub(super) async fn complete(&self, owner: &Owner, outcome: Outcome) -> Result<(), IdemError> {
        self.store()
            .complete(&owner.key, owner.fence, &outcome, self.ttl())
            .await
            .map_err(|e| self.store_err(e))
    }

    pub(super) async fn release(&self, owner: &Owner) -> Result<(), IdemError> {
        self.store()
            .release(&owner.key, owner.fence)
            .await
            .map_err(|e| self.store_err(e))
    }

    /// Why the outcome of a call whose owner `previous` vanished is unknown.
    fn vanished(&self, previous: Fence) -> String {
        format!(
            "its owner ({previous}) vanished before recording an outcome{}",
            if self.spec.has_reconcile {
                " and the reconcile hook could not tell"
            } else {
                " and the tool has no reconcile hook"
            }
        )
    }

    /// Record the outcome as unknown (every later duplicate is refused)
    /// and return the refusal.
    async fn unknown(&self, owner: &Owner, reason: String) -> IdemError {
        if let Err(e) = self
            .complete(
                owner,
                Outcome::Unknown {
                    reason: reason.clone(),
                },
            )
            .await
        {
            return e;
        }
        self.refuse(IdemError::OutcomeUnknown {
            tool: self.name().to_owned(),
            key: owner.key.clone(),
            reason,
        })
    }

    /// The reconcile hook of a takeover failed: the record stays in flight,
    /// and when this lease runs out the next caller reconciles again.
    fn reconcile_failed(&self, owner: &Owner, e: ToolError) -> IdemError {
        self.refuse(IdemError::OutcomeUnknown {
            tool: self.name().to_owned(),
            key: owner.key.clone(),
            reason: format!(
                "the reconcile hook failed ({e}); it will be tried again after the lease expires"
            ),
        })
    }
}
