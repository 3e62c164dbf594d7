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

use std::convert::Infallible;
use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use serde_json::Value;

use crate::ctx::ToolCtx;
use crate::error::{ErrorKind, IdemError, ToolError};
use crate::key::Fingerprint;
use crate::record::{FailureCode, Fence, Outcome, OutputJson, StoredFailure};
use crate::store::{StoreError, Takeover};
use crate::tool::{Reconciled, Tool};

use super::claim::Owner;
use super::telemetry::Count;
use super::{Call, CallEnv, CallOutput, ATTEMPT_STEP};
use crate::store::StoreExt;

/// What the class decides about a failed owner's key without the tool.
enum Settled {
    /// Recorded or released; the call ends with this error.
    Done(IdemError),
    /// An ambiguous failure of a class that is never re-run: the reconcile
    /// hook must say whether the effect happened.
    Reconcile(ToolError),
}

impl<S, T, R> Call<'_, S, T, R>
where
    S: Send + Sync + 'static,
    T: Tool<S>,
    R: std::borrow::Borrow<T> + Send + Sync,
{
    /// We own the key: keep the lease alive while phases 3 to 6 run.
    ///
    /// A call that is over by the end of its first poll (a tool that
    /// answers at once, on a store that answers on this thread) has no
    /// lease to renew: the renewals start, boxed, only when it is not.
    /// Inline, their state would size every call's future.
    // Not an `async fn` (nor are the phases below it): an `async fn`'s
    // future keeps its parameters twice, and the copies, laid out apart,
    // keep the phases' states from sharing space.
    #[allow(clippy::manual_async_fn)]
    pub(super) fn owned<'s>(
        &'s self,
        args: &'s T::Args,
        fingerprint: &'s Fingerprint,
        owner: &'s Owner<'_>,
    ) -> impl Future<Output = Result<CallOutput<T::Output>, IdemError>> + Send + 's {
        async move {
            let mut work = std::pin::pin!(self.own(args, fingerprint, owner));
            if let Poll::Ready(result) = super::attempts::poll_once(work.as_mut()).await {
                return result;
            }
            let keep = Box::pin(self.env.keep_lease(owner));
            tokio::select! {
                biased;
                result = work => result,
                never = keep => match never {},
            }
        }
    }

    /// Reconcile a takeover, get an approval, run, record.
    #[allow(clippy::manual_async_fn)]
    fn own<'s>(
        &'s self,
        args: &'s T::Args,
        fingerprint: &'s Fingerprint,
        owner: &'s Owner<'_>,
    ) -> impl Future<Output = Result<CallOutput<T::Output>, IdemError>> + Send + 's {
        async move {
            let env = &self.env;
            // A natural key took over an approved call made with other
            // arguments: neither run nor reconcile these arguments under it.
            // The key is handed back at once, so that the approved call,
            // called again, takes it over and runs as approved.
            if owner.foreign_approval {
                return Err(Box::pin(env.hand_back_approved(owner)).await);
            }

            // Phase 3: a previous owner vanished without an outcome. If it never
            // started the tool, nothing happened: the call simply runs. Boxed,
            // as every phase below that most calls never take: inline, each
            // would size every call's future.
            if let Some(Takeover { previous }) = owner.takeover {
                if let Some(done) = Box::pin(self.settle_takeover(args, owner, previous)).await {
                    return done;
                }
            }

            // Phase 4.
            if env.class.needs_approval() && !owner.approved {
                Box::pin(env.approve(owner, fingerprint, &|| {
                    serde_json::to_value(args).unwrap_or(Value::Null)
                }))
                .await?;
            }

            // Intent before effect: a class that is never re-run marks the
            // attempt as started before its body runs, so that a takeover can
            // tell "never started" from "outcome unknown".
            if !env.class.may_rerun_unknown_outcome() {
                env.mark_started(owner).await?;
            }

            // Phase 5.
            let (result, attempts) = self.attempts(args, owner.ctx.clone(), Some(owner)).await;

            // Phase 6.
            match result {
                Ok(output) => env.succeed(owner, output, attempts, false).await,
                Err(error) => Box::pin(self.failed(args, owner, error, attempts)).await,
            }
        }
    }

    /// Phase 3 for a takeover: a class that is never re-run whose previous
    /// owner started the tool is reconciled once that attempt must be
    /// over. `Some`: the call ends here; `None`: it runs.
    async fn settle_takeover(
        &self,
        args: &T::Args,
        owner: &Owner<'_>,
        previous: Fence,
    ) -> Option<Result<CallOutput<T::Output>, IdemError>> {
        let env = &self.env;
        if env.class.may_rerun_unknown_outcome() || !owner.started {
            if !owner.started {
                tracing::info!(
                    previous = previous.0,
                    "previous owner vanished before starting the tool; running it"
                );
            }
            return None;
        }
        tracing::warn!(
            previous = previous.0,
            "previous owner vanished mid-call; reconciling once its attempt must be over"
        );
        if let Err(e) = env.outlast_previous_attempt(owner).await {
            return Some(Err(e));
        }
        match self.tool().reconcile(args, &owner.ctx, self.state).await {
            Ok(Reconciled::Applied(output)) => Some(env.succeed(owner, output, 0, true).await),
            Ok(Reconciled::NotApplied) => None,
            Ok(Reconciled::Unknown) => {
                let reason = env.vanished(previous);
                Some(Err(env.unknown(owner, reason).await))
            }
            Err(e) => Some(Err(env.reconcile_failed(owner, e))),
        }
    }

    /// Phase 6 for a call whose last attempt failed with `error`: record or
    /// release as the class and the error's kind say, asking the reconcile
    /// hook when the failure was ambiguous for a class that is never
    /// re-run.
    async fn failed(
        &self,
        args: &T::Args,
        owner: &Owner<'_>,
        error: ToolError,
        attempts: u32,
    ) -> Result<CallOutput<T::Output>, IdemError> {
        let env = &self.env;
        let error = match env.settle_failure(owner, error).await? {
            Settled::Done(e) => return Err(e),
            Settled::Reconcile(error) => error,
        };
        match self.tool().reconcile(args, &owner.ctx, self.state).await {
            Ok(Reconciled::Applied(output)) => env.succeed(owner, output, attempts, false).await,
            Ok(Reconciled::NotApplied) => {
                env.release(owner).await?;
                Err(env.tool_failed(error, false))
            }
            Ok(Reconciled::Unknown) | Err(_) => {
                let reason = format!("the call failed ambiguously: {}", error.message());
                Err(env.unknown(owner, reason).await)
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

    /// Record `output` and return it.
    async fn succeed<O: serde::Serialize>(
        &self,
        owner: &Owner<'_>,
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
    async fn settle_failure(
        &self,
        owner: &Owner<'_>,
        error: ToolError,
    ) -> Result<Settled, IdemError> {
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

    pub(super) async fn complete(
        &self,
        owner: &Owner<'_>,
        outcome: Outcome,
    ) -> Result<(), IdemError> {
        // An unknown outcome is kept until a person settles it: "never
        // re-run" must not lapse into a second effect with the TTL.
        let ttl = match outcome {
            Outcome::Unknown { .. } => Duration::MAX,
            _ => self.ttl(),
        };
        // Without a flight to publish to, the outcome is not needed after
        // this: a store that completes on this thread takes it.
        let outcome = match owner.flight {
            None => match self.store().fast_path() {
                None => outcome,
                Some(fast) => match fast.complete_local(&owner.key, owner.fence, outcome, ttl) {
                    Ok(done) => return done.map_err(|e| self.owner_err(owner, e)),
                    Err(outcome) => outcome,
                },
            },
            Some(_) => outcome,
        };
        self.store()
            .complete(&owner.key, owner.fence, &outcome, ttl)
            .await
            .map_err(|e| self.owner_err(owner, e))?;
        if let Some(flight) = owner.flight {
            flight.publish(&outcome);
        }
        Ok(())
    }

    pub(super) async fn release(&self, owner: &Owner<'_>) -> Result<(), IdemError> {
        self.store()
            .release(&owner.key, owner.fence)
            .await
            .map_err(|e| self.owner_err(owner, e))
    }

    /// Record that attempt 1 is starting (see [`ATTEMPT_STEP`]).
    async fn mark_started(&self, owner: &Owner<'_>) -> Result<(), IdemError> {
        if owner.lost() {
            return Err(self.superseded(owner, None));
        }
        self.store()
            .checkpoint(
                &owner.key,
                owner.fence,
                ATTEMPT_STEP,
                &Value::from(1),
                self.lease(),
            )
            .await
            .map_err(|e| self.owner_err(owner, e))
    }

    /// A store failure of an owner: once its lease is lost, any failure to
    /// write means it was superseded (the new owner's outcome stands).
    pub(super) fn owner_err(&self, owner: &Owner<'_>, e: StoreError) -> IdemError {
        if owner.lost() {
            self.superseded(owner, Some(e))
        } else {
            self.store_err(e)
        }
    }

    /// The caller's error when its owner lost the key.
    fn superseded(&self, owner: &Owner<'_>, cause: Option<StoreError>) -> IdemError {
        IdemError::Superseded {
            tool: self.name().to_owned(),
            key: owner.key.clone(),
            source: cause,
        }
    }

    /// Renew the owner's lease every third of it, for as long as the owner
    /// works (the caller drops this future when the work ends, so a call
    /// that finishes within a third of the lease pays no renewal). When a
    /// renewal finds a newer fence, or the store stays unreachable until
    /// the lease would have run out, the lease is marked lost: the tool
    /// sees it (`ctx.superseded()`), no retry starts, and nothing this
    /// owner writes is accepted as its outcome.
    async fn keep_lease(&self, owner: &Owner<'_>) -> Infallible {
        let lost = owner.lease();
        let lease = self.lease();
        let every = lease / 3;
        let mut next = every;
        loop {
            tokio::time::sleep(next).await;
            // The deadline is measured from before each request (and from
            // before the claim), so it is never later than the store's.
            let sent = tokio::time::Instant::now();
            let left = lost.held_until().saturating_duration_since(sent);
            let renewal = self.store().renew(&owner.key, owner.fence, lease);
            match tokio::time::timeout(left, renewal).await {
                Ok(Ok(())) => {
                    lost.extend(sent + lease);
                    next = every;
                }
                Ok(Err(e @ StoreError::StaleFence { .. })) => {
                    tracing::warn!(error = %e, "lease taken over by another owner; stopping");
                    break;
                }
                Ok(Err(e)) => {
                    let left = lost
                        .held_until()
                        .saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        tracing::warn!(error = %e, "could not renew the lease before it ran out; stopping");
                        break;
                    }
                    tracing::warn!(error = %e, "could not renew the lease; trying again");
                    // Again soon, and at the latest when the lease runs out.
                    next = left.min(every);
                }
                Err(_) => {
                    tracing::warn!("the lease ran out while a renewal was unanswered; stopping");
                    break;
                }
            }
        }
        lost.lose();
        std::future::pending().await
    }

    /// Wait, holding the key (its lease is renewed meanwhile), until the
    /// previous owner's attempt must be over: its lease lapsed, but it may
    /// only have been unable to renew — a process paused, a store too busy
    /// to answer in time — while already inside its provider call, past its
    /// last `ctx.is_superseded()` check. A reconcile hook asked before that
    /// call lands would find nothing and let the call run a second time.
    /// The attempt started before the lease lapsed and runs at most the
    /// tool's timeout, so that is the wait. A tool without a timeout
    /// (`Duration::MAX`) gives no bound, and is reconciled at once.
    async fn outlast_previous_attempt(&self, owner: &Owner<'_>) -> Result<(), IdemError> {
        let timeout = self.timeout();
        if timeout == Duration::MAX {
            return Ok(());
        }
        tokio::time::sleep(timeout).await;
        if owner.lost() {
            return Err(self.superseded(owner, None));
        }
        Ok(())
    }

    /// Give up a key whose recorded approval was given for other arguments:
    /// cut the lease to nothing (the approved call takes it over at once)
    /// and refuse.
    async fn hand_back_approved(&self, owner: &Owner<'_>) -> IdemError {
        if let Err(e) = self
            .store()
            .renew(&owner.key, owner.fence, Duration::ZERO)
            .await
        {
            return self.owner_err(owner, e);
        }
        self.refuse(IdemError::KeyAwaitsOtherArguments {
            tool: self.name().to_owned(),
            key: owner.key.clone(),
            approved: true,
            recorded_args: None,
        })
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
    async fn unknown(&self, owner: &Owner<'_>, reason: String) -> IdemError {
        self.count(Count::UnknownOutcome);
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
    fn reconcile_failed(&self, owner: &Owner<'_>, e: ToolError) -> IdemError {
        self.count(Count::UnknownOutcome);
        self.refuse(IdemError::OutcomeUnknown {
            tool: self.name().to_owned(),
            key: owner.key.clone(),
            reason: format!(
                "the reconcile hook failed ({e}); it will be tried again after the lease expires"
            ),
        })
    }
}
