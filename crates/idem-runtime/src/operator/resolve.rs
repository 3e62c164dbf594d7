//! Settling what idem refused to guess (an unknown outcome, a dead
//! owner's call) and deleting records.

use std::time::Duration;

use serde_json::Value;

use super::{Actor, Operator, OperatorError};
use crate::approval::transition::Replace;
use crate::key::IdempotencyKey;
use crate::record::{
    AuditAction, FailureCode, Outcome, OutputJson, Record, RecordState, Status, StoredFailure,
};
use crate::store::StoreExt;
use crate::store::{Expected, ExpectedState};

/// How [`Operator::resolve`] settles a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// The effect happened; duplicates get this output.
    Succeeded(Value),
    /// The effect did not happen and must not be tried again; duplicates get
    /// this failure.
    Failed(String),
    /// The effect did not happen; the record is deleted so that a new call
    /// with the key runs.
    Release,
}

impl Operator {
    /// Settle a call idem cannot settle itself: an unknown outcome, a
    /// call whose owner vanished and was never taken over (its lease ran
    /// out), or one whose new owner waits out the vanished owner's
    /// attempt before reconciling it ([`Record::outlast`]; the wait ends,
    /// and the waiting call answers with the resolution). Returns the
    /// record as resolved (`None` when released).
    ///
    /// The resolution is kept for the tool's TTL (recorded with the
    /// call), like the outcome the tool would have recorded;
    /// [`Operator::resolve_kept_for`] says otherwise explicitly.
    ///
    /// Refused for a call in flight under a live lease (but for that
    /// wait), one with a definite outcome, and one awaiting approval.
    pub async fn resolve(
        &self,
        key: &IdempotencyKey,
        resolution: Resolution,
        actor: &Actor,
    ) -> Result<Option<Record>, OperatorError> {
        self.settle(key, resolution, actor, None).await
    }

    /// [`Operator::resolve`], keeping the resolution for `ttl` instead of
    /// the tool's TTL. A duplicate after `ttl` runs the call again, so a
    /// TTL shorter than the tool's is a decision to allow that.
    pub async fn resolve_kept_for(
        &self,
        key: &IdempotencyKey,
        resolution: Resolution,
        actor: &Actor,
        ttl: Duration,
    ) -> Result<Option<Record>, OperatorError> {
        self.settle(key, resolution, actor, Some(ttl)).await
    }

    /// [`Operator::resolve`] the record as `record` shows it, and only
    /// that version of it (see [`Operator::approve_record`]): what a person
    /// judged from the page or the transcript they read.
    pub async fn resolve_record(
        &self,
        record: &Record,
        resolution: Resolution,
        actor: &Actor,
    ) -> Result<Option<Record>, OperatorError> {
        self.settle_record(record, resolution, actor, None).await
    }

    /// [`Operator::resolve_record`], keeping the resolution for `ttl`
    /// instead of the tool's TTL (see [`Operator::resolve_kept_for`]).
    pub async fn resolve_record_kept_for(
        &self,
        record: &Record,
        resolution: Resolution,
        actor: &Actor,
        ttl: Duration,
    ) -> Result<Option<Record>, OperatorError> {
        self.settle_record(record, resolution, actor, Some(ttl))
            .await
    }

    async fn settle(
        &self,
        key: &IdempotencyKey,
        resolution: Resolution,
        actor: &Actor,
        ttl: Option<Duration>,
    ) -> Result<Option<Record>, OperatorError> {
        let record = self.show(key).await?;
        self.settle_record(&record, resolution, actor, ttl).await
    }

    async fn settle_record(
        &self,
        record: &Record,
        resolution: Resolution,
        actor: &Actor,
        ttl: Option<Duration>,
    ) -> Result<Option<Record>, OperatorError> {
        let key = &record.key;
        let record = record.clone();
        let now = self.store.now().await?;
        let expected = match (&record.state, record.status()) {
            (_, Status::Unknown) => ExpectedState::Completed,
            // An owner that took the key over waits out a vanished
            // owner's attempt: the person settling it ends the wait, and
            // the waiting call answers with the resolution.
            (RecordState::InFlight { .. }, _) if record.outlast().is_some() => {
                ExpectedState::InFlight
            }
            (RecordState::InFlight { lease_until, .. }, _) if *lease_until > now => {
                return Err(OperatorError::LiveLease {
                    key: key.clone(),
                    until: *lease_until,
                    worker: record.worker.clone().unwrap_or_else(|| "unknown".into()),
                })
            }
            (RecordState::InFlight { .. }, _) => ExpectedState::LeaseExpired,
            (_, status @ (Status::AwaitingApproval | Status::Approved)) => {
                return Err(OperatorError::AwaitsDecision {
                    key: key.clone(),
                    status,
                })
            }
            (_, status) => {
                return Err(OperatorError::AlreadySettled {
                    key: key.clone(),
                    status,
                })
            }
        };
        let (outcome, action) = match resolution {
            Resolution::Release => {
                let entry = actor.entry(now, AuditAction::Released);
                self.replace(&record, fenced(&record, expected), None, &entry)
                    .await?;
                tracing::info!(
                    key = key.as_str(),
                    by = actor.by,
                    reason = actor.reason.as_deref().unwrap_or(""),
                    "operator released a key"
                );
                return Ok(None);
            }
            Resolution::Succeeded(output) => (
                Outcome::Success {
                    output: OutputJson::from_value(&output),
                },
                AuditAction::ResolvedSucceeded,
            ),
            Resolution::Failed(message) => (
                Outcome::Failure {
                    failure: StoredFailure {
                        code: FailureCode::Permanent,
                        message,
                        details: None,
                    },
                },
                AuditAction::ResolvedFailed,
            ),
        };
        let mut new = record.clone();
        new.state = RecordState::Completed {
            fence: record.fence(),
            outcome,
            completed_at: now,
            expires_at: now.plus(self.kept_for(&record, ttl)),
        };
        let resolved = Replace {
            expected: fenced(&record, expected),
            record: new,
        };
        self.swap(&record, resolved, actor.entry(now, action))
            .await
            .map(Some)
    }

    /// Delete a record, so that the next call with its key runs as new.
    /// Refused for a call in flight under a live lease.
    pub async fn delete(&self, key: &IdempotencyKey, actor: &Actor) -> Result<(), OperatorError> {
        let record = self.show(key).await?;
        let now = self.store.now().await?;
        let expected = match &record.state {
            RecordState::InFlight { lease_until, .. } => {
                if *lease_until > now {
                    return Err(OperatorError::LiveLease {
                        key: key.clone(),
                        until: *lease_until,
                        worker: record.worker.clone().unwrap_or_else(|| "unknown".into()),
                    });
                }
                ExpectedState::LeaseExpired
            }
            RecordState::AwaitingApproval { .. } => ExpectedState::AwaitingApproval,
            RecordState::Completed { .. } => ExpectedState::Completed,
        };
        let entry = actor.entry(now, AuditAction::Deleted);
        self.replace(&record, fenced(&record, expected), None, &entry)
            .await?;
        tracing::info!(
            key = key.as_str(),
            by = actor.by,
            reason = actor.reason.as_deref().unwrap_or(""),
            "operator deleted a record"
        );
        Ok(())
    }

    /// Delete expired records (completed ones and lapsed approval
    /// requests); returns how many.
    pub async fn purge_expired(&self) -> Result<u64, OperatorError> {
        Ok(self.store.sweep().await?)
    }
}

/// What a change to `record` expects of the stored one: in `state`, under
/// the fence it was read with.
fn fenced(record: &Record, state: ExpectedState) -> Expected {
    Expected {
        fence: record.fence(),
        state,
    }
}
