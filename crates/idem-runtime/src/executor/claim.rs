//! Phase 2: claim the key. The claim either makes this call the key's
//! owner, or finds the call already recorded (answered from its record),
//! reused for other arguments (refused), or in flight under another owner
//! (wait for its outcome, or refuse at once: [`InFlightPolicy`]).
//!
//! In replay mode the claim is a read: a recorded outcome answers, anything
//! else is refused as not recorded.

use std::sync::Arc;
use std::time::Duration;

use crate::approval::transition;
use crate::ctx::{LeaseWatch, StepLog, ToolCtx};
use crate::error::{IdemError, ToolError};
use crate::key::{IdempotencyKey, Namespace};
use crate::record::{
    CallInfoRef, FailureCode, Fence, Outcome, OutputJson, Reason, Record, RecordState,
    APPROVAL_STEP, ATTEMPT_STEP,
};
use crate::store::{ClaimOutcome, ClaimRequest, LocalClaim, Takeover, WaitFor};

use super::flight::{Flight, FlightGuard};
use super::key::CallKey;
use super::metrics::Metrics;
use super::telemetry::Count;
use super::{CallEnv, CallOutput, InFlightPolicy, Mode};
use crate::store::StoreExt;

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

/// A completed call as its claim found it.
pub(super) enum Recorded {
    /// The whole record.
    Record(Arc<Record>),
    /// The outcome alone: a store that answered on the caller's thread
    /// ([`LocalClaim::Completed`]).
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

/// What an owner of a key carries through the later phases.
pub(super) struct Owner<'f> {
    pub(super) key: IdempotencyKey,
    pub(super) fence: Fence,
    /// Set when a previous owner vanished without an outcome.
    pub(super) takeover: Option<Takeover>,
    /// Set when the steps hold an approval given for other arguments (a
    /// natural key took over an approved call): this owner must not run
    /// under it.
    pub(super) foreign_approval: bool,
    /// The recorded steps hold an approval ([`APPROVAL_STEP`]).
    pub(super) approved: bool,
    /// The recorded steps hold an attempt mark ([`ATTEMPT_STEP`]): a
    /// previous owner started the tool.
    pub(super) started: bool,
    /// The context the tool sees — its key, namespace, the steps a
    /// previous owner completed — and the lease it is told about, whose
    /// deadline starts from just before the winning claim was sent, so it
    /// is never later than the store's.
    pub(super) ctx: ToolCtx,
    /// The in-process flight this owner leads, if any: its outcome is
    /// published there for the calls of its key that follow it.
    pub(super) flight: Option<&'f FlightGuard<'f>>,
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

impl<'f> Owner<'f> {
    /// The lease this owner holds and its tool is told about.
    pub(super) fn lease(&self) -> &LeaseWatch {
        self.ctx
            .lease()
            .expect("an owner's context watches its lease")
    }

    /// Whether the lease was lost (a renewal found a newer fence, or could
    /// not reach the store before the lease ran out).
    pub(super) fn lost(&self) -> bool {
        self.lease().is_lost()
    }

    /// The namespace the key belongs to.
    pub(super) fn namespace(&self) -> &Namespace {
        self.ctx.namespace()
    }
}

impl CallEnv<'_> {
    /// The claim of `call` as the store receives it.
    fn request<'c>(&'c self, call: &'c CallKey) -> ClaimRequest<'c> {
        ClaimRequest {
            key: &call.key,
            tool: self.name(),
            fingerprint: &call.args.fingerprint,
            check_fingerprint: call.check_fingerprint,
            lease: self.lease(),
            info: CallInfoRef {
                namespace: Some(call.namespace.as_str()),
                call_id: self.call_id.as_deref(),
                run_id: self.run.run_id.as_deref(),
                step: self.run.run_id.is_some().then_some(self.run.step),
                args: self.spec.store_args.then_some(call.args.text.as_str()),
                ttl: Some(self.ttl()),
                reason: self.run.reason.as_ref().map(Reason::as_str),
            },
            worker: Some(&self.core.config.worker),
            // A lost claim of an `idempotent_write` re-runs with the same
            // key; every other class's claim must outlive a crash.
            durable: self.class.needs_durable_claim(),
        }
    }

    /// The claim answered on this thread, when the store can
    /// ([`FastPath::claim_local`](crate::store::FastPath::claim_local)): the
    /// in-memory store always, SQLite for a completed call. `None`: claim
    /// the usual way, which also waits for an owner in flight.
    pub(super) fn claim_local(
        &self,
        call: &CallKey,
    ) -> Option<Result<Claimed<'static>, IdemError>> {
        let sent = tokio::time::Instant::now();
        match self.store().fast_path()?.claim_local(&self.request(call))? {
            Err(e) => Some(Err(self.store_err(e))),
            Ok(LocalClaim::Claim(ClaimOutcome::InFlight { .. })) => None,
            Ok(LocalClaim::Claim(outcome)) => self.settle(call, outcome, sent).transpose(),
            Ok(LocalClaim::Completed(outcome)) => Some(Ok(Claimed::Recorded {
                record: Recorded::Outcome(outcome),
                joined: false,
            })),
        }
    }

    /// Own the key, or find its record, waiting for an owner in flight as
    /// [`InFlightPolicy`] says.
    pub(super) async fn claim(&self, call: &CallKey) -> Result<Claimed<'static>, IdemError> {
        let key = &call.key;
        if self.mode == Mode::Replay {
            return self.replay(key).await;
        }
        let request = self.request(call);
        // Set when the first in-flight answer arrives.
        let mut wait_until = None;
        loop {
            let sent = tokio::time::Instant::now();
            let outcome = self
                .store()
                .claim(&request)
                .await
                .map_err(|e| self.store_err(e))?;
            if let Some(claimed) = self.settle(call, outcome, sent)? {
                return Ok(claimed.found_after_waiting(wait_until.is_some()));
            }
            let max = match self.core.config.in_flight {
                InFlightPolicy::Wait(max) => max,
                InFlightPolicy::Reject => Duration::ZERO,
            };
            let until = *wait_until.get_or_insert_with(|| tokio::time::Instant::now() + max);
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(self.refuse(IdemError::InFlight {
                    tool: self.name().to_owned(),
                    key: key.clone(),
                }));
            }
            tracing::debug!("duplicate of a call in flight; waiting for its outcome");
            self.store()
                .wait(key, WaitFor::Completion, left)
                .await
                .map_err(|e| self.store_err(e))?;
        }
    }

    /// The record of `key`, if any.
    pub(super) async fn lookup(&self, key: &IdempotencyKey) -> Result<Option<Record>, IdemError> {
        self.store().get(key).await.map_err(|e| self.store_err(e))
    }

    /// What the store's answer to a claim sent at `sent` means for the
    /// call; `None` when another owner holds a live lease.
    fn settle(
        &self,
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
                    self.count(Count::Takeover);
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
                    self.core.store.clone(),
                    key.clone(),
                    fence,
                    self.lease(),
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
                        self.name(),
                        self.class,
                        call.namespace.clone(),
                        self.call_id.clone(),
                        log,
                        sent + self.lease(),
                        sent,
                    ),
                    flight: None,
                }
            }))),
            ClaimOutcome::Completed(record) => Ok(Some(Claimed::Recorded {
                record: Recorded::Record(record),
                joined: false,
            })),
            ClaimOutcome::AwaitingApproval(record) => Err(self.pending(&record, call)),
            ClaimOutcome::KeyReused { tool, fingerprint } => {
                Err(self.refuse(IdemError::KeyReused {
                    key: key.clone(),
                    stored_tool: tool,
                    stored_fingerprint: fingerprint.to_string(),
                }))
            }
            ClaimOutcome::InFlight { .. } => Ok(None),
        }
    }

    /// Wait, as [`InFlightPolicy`] says, for the leader of this key's flight
    /// in this process: its recorded outcome, or `None` when it recorded
    /// none.
    pub(super) async fn follow<'f>(
        &self,
        key: &IdempotencyKey,
        flight: &'f Flight,
    ) -> Result<Option<&'f Outcome>, IdemError> {
        if let Some(landed) = flight.try_landed() {
            return Ok(landed);
        }
        let max = match self.core.config.in_flight {
            InFlightPolicy::Wait(max) => max,
            InFlightPolicy::Reject => Duration::ZERO,
        };
        let in_flight = || {
            self.refuse(IdemError::InFlight {
                tool: self.name().to_owned(),
                key: key.clone(),
            })
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
    pub(super) fn pending(&self, record: &Record, call: &CallKey) -> IdemError {
        if record.fingerprint != call.args.fingerprint {
            return self.refuse(IdemError::KeyAwaitsOtherArguments {
                tool: self.name().to_owned(),
                key: record.key.clone(),
                approved: record.approval().is_some(),
                recorded_args: record.info.args.clone(),
            });
        }
        let message = match &record.state {
            RecordState::AwaitingApproval { message, .. } => message.clone(),
            _ => String::new(),
        };
        IdemError::ApprovalPending {
            tool: self.name().to_owned(),
            key: record.key.clone(),
            message,
        }
    }

    /// Replay mode: the recorded outcome, or refused; never a claim.
    async fn replay(&self, key: &IdempotencyKey) -> Result<Claimed<'static>, IdemError> {
        match self.store().get(key).await.map_err(|e| self.store_err(e))? {
            Some(record) if record.outcome().is_some() => Ok(Claimed::Recorded {
                record: Recorded::Record(Arc::new(record)),
                joined: false,
            }),
            _ => Err(self.refuse(IdemError::NotRecorded {
                tool: self.name().to_owned(),
                key: key.clone(),
            })),
        }
    }

    /// Answer a duplicate of `key` from what its claim found.
    pub(super) fn answer<O: serde::de::DeserializeOwned>(
        &self,
        key: &IdempotencyKey,
        recorded: &Recorded,
    ) -> Result<CallOutput<O>, IdemError> {
        self.answer_outcome(key, recorded.outcome())
    }

    /// Answer a duplicate from the outcome recorded under `key` (`None`:
    /// still in flight).
    pub(super) fn answer_outcome<O: serde::de::DeserializeOwned>(
        &self,
        key: &IdempotencyKey,
        outcome: Option<&Outcome>,
    ) -> Result<CallOutput<O>, IdemError> {
        let output = self.recorded_output(key, outcome)?;
        let output = output
            .parse::<O>()
            .map_err(|e| IdemError::RecordedOutputMismatch {
                tool: self.name().to_owned(),
                detail: e.to_string(),
            })?;
        Ok(CallOutput {
            output,
            meta: self.meta(Some(key.clone()), true, 0),
        })
    }

    /// The recorded output of a successful call, or the error every
    /// duplicate of a failed, denied or unknown call gets.
    fn recorded_output<'r>(
        &self,
        key: &IdempotencyKey,
        outcome: Option<&'r Outcome>,
    ) -> Result<&'r OutputJson, IdemError> {
        Metrics::bump(&self.metrics().dedup_hits);
        match outcome {
            Some(Outcome::Success { output }) => Ok(output),
            Some(Outcome::Failure { failure }) if failure.code == FailureCode::ApprovalDenied => {
                Err(IdemError::ApprovalDenied {
                    tool: self.name().to_owned(),
                    reason: failure.message.clone(),
                    deduplicated: true,
                })
            }
            Some(Outcome::Failure { failure }) => {
                let mut error = ToolError::permanent(&failure.message);
                if let Some(details) = &failure.details {
                    error = error.with_details(details.clone());
                }
                Err(self.tool_failed(error, true))
            }
            Some(Outcome::Unknown { reason }) => Err(self.refuse(IdemError::OutcomeUnknown {
                tool: self.name().to_owned(),
                key: key.clone(),
                reason: reason.clone(),
            })),
            None => Err(IdemError::InFlight {
                tool: self.name().to_owned(),
                key: key.clone(),
            }),
        }
    }
}
