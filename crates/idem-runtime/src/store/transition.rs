//! The record state machine as pure functions, for stores that read a
//! record, decide, and write it back inside one transaction (memory, SQLite).
//! Stores that decide on the server (Redis scripts, PostgreSQL statements)
//! implement the same rules there and are held to them by the conformance
//! suite.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{
    ClaimOutcome, ClaimRequest, Expected, ExpectedState, FenceHolder, StoreError, Takeover,
};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::{Fence, Outcome, Record, RecordState, APPROVAL_STEP};

/// What a claim decided: the answer, and the record to write, if any.
#[derive(Debug)]
pub struct ClaimDecision {
    /// The answer for the caller.
    pub claim: ClaimOutcome,
    /// The record to store in place of the existing one (`None`: unchanged).
    pub write: Option<Record>,
}

/// Decide a claim against the `existing` record at `now`; `fresh` hands out a
/// fence never used before for this key.
pub fn claim(
    existing: Option<Arc<Record>>,
    req: &ClaimRequest<'_>,
    now: Timestamp,
    fresh: impl FnOnce() -> Fence,
) -> ClaimDecision {
    let existing = existing.filter(|r| !r.is_expired(now));
    let Some(record) = existing else {
        let fence = fresh();
        let lease_until = now.plus(req.lease);
        return ClaimDecision {
            claim: ClaimOutcome::Acquired {
                fence,
                lease_until,
                steps: Default::default(),
                takeover: None,
            },
            write: Some(Record {
                key: req.key.clone(),
                tool: req.tool.to_owned(),
                fingerprint: req.fingerprint.clone(),
                created_at: now,
                state: RecordState::InFlight { fence, lease_until },
                steps: Default::default(),
                info: req.info.to_owned(),
                worker: req.worker.map(str::to_owned),
                audit: Vec::new(),
            }),
        };
    };
    if let Some(claim) = answer(&record, req, now) {
        return ClaimDecision { claim, write: None };
    }
    match record.state {
        // Answered above; kept so the match stays exhaustive.
        RecordState::Completed { .. } => ClaimDecision {
            claim: ClaimOutcome::Completed(record),
            write: None,
        },
        // Approved: this claim owns the key and runs the call under the
        // recorded approval; nothing ran before, so no takeover. In flight
        // (its lease ran out): this claim takes the key over.
        RecordState::AwaitingApproval { .. } | RecordState::InFlight { .. } => {
            let takeover = match record.state {
                RecordState::InFlight {
                    fence: previous, ..
                } => Some(Takeover { previous }),
                _ => None,
            };
            let fence = fresh();
            let lease_until = now.plus(req.lease);
            let mut record = Arc::unwrap_or_clone(record);
            record.state = RecordState::InFlight { fence, lease_until };
            record.worker = req.worker.map(str::to_owned);
            ClaimDecision {
                claim: ClaimOutcome::Acquired {
                    fence,
                    lease_until,
                    steps: record.steps.clone(),
                    takeover,
                },
                write: Some(record),
            }
        }
    }
}

/// The claim's answer when `existing` (present and not expired) decides
/// it without a write: a key reuse, a completed call, a live owner, an
/// approval still to be decided. `None`: the claim writes (it takes the
/// key over, or runs an approved call). For a store's read-only fast path
/// ([`FastPath::claim_local`](super::FastPath::claim_local)).
pub fn answer(
    existing: &Arc<Record>,
    req: &ClaimRequest<'_>,
    now: Timestamp,
) -> Option<ClaimOutcome> {
    let record = existing;
    if record.tool != req.tool || (req.check_fingerprint && &record.fingerprint != req.fingerprint)
    {
        return Some(ClaimOutcome::KeyReused {
            tool: record.tool.clone(),
            fingerprint: record.fingerprint.clone(),
        });
    }
    match record.state {
        RecordState::Completed { .. } => Some(ClaimOutcome::Completed(record.clone())),
        RecordState::InFlight { fence, lease_until } if lease_until > now => {
            Some(ClaimOutcome::InFlight { fence, lease_until })
        }
        // Not yet approved, or approved for other arguments (a natural key
        // does not check them): only the arguments a person approved ever
        // run under an approval, so this claim changes nothing.
        RecordState::AwaitingApproval { .. }
            if !record.steps.contains_key(APPROVAL_STEP)
                || &record.fingerprint != req.fingerprint =>
        {
            Some(ClaimOutcome::AwaitingApproval(record.clone()))
        }
        _ => None,
    }
}

/// Check that `fence` owns the in-flight `existing` record.
pub fn check_owner(
    existing: Option<&Record>,
    key: &IdempotencyKey,
    fence: Fence,
) -> Result<(), StoreError> {
    match existing {
        Some(r) if matches!(r.state, RecordState::InFlight { fence: f, .. } if f == fence) => {
            Ok(())
        }
        other => Err(StoreError::StaleFence {
            key: key.clone(),
            given: fence,
            current: FenceHolder::of(other),
        }),
    }
}

/// Check that `fence` owns the in-flight `existing` record and return it.
pub fn owned(
    existing: Option<Record>,
    key: &IdempotencyKey,
    fence: Fence,
) -> Result<Record, StoreError> {
    check_owner(existing.as_ref(), key, fence)?;
    Ok(existing.expect("checked"))
}

/// Record in place that step `step` completed with `value`, or (`None`)
/// only extend the lease.
pub fn checkpoint_in_place(
    existing: Option<&mut Record>,
    key: &IdempotencyKey,
    fence: Fence,
    step: Option<(&str, &Value)>,
    lease: Duration,
    now: Timestamp,
) -> Result<(), StoreError> {
    check_owner(existing.as_deref(), key, fence)?;
    let record = existing.expect("checked");
    if let Some((step, value)) = step {
        record.steps.insert(step.to_owned(), value.clone());
    }
    record.state = RecordState::InFlight {
        fence,
        lease_until: now.plus(lease),
    };
    Ok(())
}

/// The record after step `step` completed with `value`, or (`None`) with
/// only its lease extended.
pub fn checkpoint(
    mut existing: Option<Record>,
    key: &IdempotencyKey,
    fence: Fence,
    step: Option<(&str, &Value)>,
    lease: Duration,
    now: Timestamp,
) -> Result<Record, StoreError> {
    checkpoint_in_place(existing.as_mut(), key, fence, step, lease, now)?;
    Ok(existing.expect("checked"))
}

/// Complete the record in place with `outcome`.
pub fn complete_in_place(
    existing: Option<&mut Record>,
    key: &IdempotencyKey,
    fence: Fence,
    outcome: &Outcome,
    ttl: Duration,
    now: Timestamp,
) -> Result<(), StoreError> {
    check_owner(existing.as_deref(), key, fence)?;
    complete_owned(existing.expect("checked"), fence, outcome.clone(), ttl, now);
    Ok(())
}

/// Complete the record in place with `outcome`, moved into it (the record
/// of a store that keeps records in memory).
pub fn complete_in_place_owned(
    existing: Option<&mut Record>,
    key: &IdempotencyKey,
    fence: Fence,
    outcome: Outcome,
    ttl: Duration,
    now: Timestamp,
) -> Result<(), StoreError> {
    check_owner(existing.as_deref(), key, fence)?;
    complete_owned(existing.expect("checked"), fence, outcome, ttl, now);
    Ok(())
}

fn complete_owned(
    record: &mut Record,
    fence: Fence,
    outcome: Outcome,
    ttl: Duration,
    now: Timestamp,
) {
    record.state = RecordState::Completed {
        fence,
        outcome,
        completed_at: now,
        expires_at: now.plus(ttl),
    };
}

/// The record after completion with `outcome`.
pub fn complete(
    mut existing: Option<Record>,
    key: &IdempotencyKey,
    fence: Fence,
    outcome: &Outcome,
    ttl: Duration,
    now: Timestamp,
) -> Result<Record, StoreError> {
    complete_in_place(existing.as_mut(), key, fence, outcome, ttl, now)?;
    Ok(existing.expect("checked"))
}

/// Check that `existing` is as `expected` says at `now` (see
/// [`StoreExt::replace`](super::StoreExt::replace)); an expired record counts as
/// absent.
pub fn check_expected(
    existing: Option<&Record>,
    key: &IdempotencyKey,
    expected: Expected,
    now: Timestamp,
) -> Result<(), StoreError> {
    let existing = existing.filter(|r| !r.is_expired(now));
    let matches = existing.is_some_and(|r| {
        r.fence() == expected.fence
            && match (expected.state, &r.state) {
                (ExpectedState::InFlight, RecordState::InFlight { .. }) => true,
                (ExpectedState::LeaseExpired, RecordState::InFlight { lease_until, .. }) => {
                    *lease_until <= now
                }
                (ExpectedState::AwaitingApproval, RecordState::AwaitingApproval { .. }) => true,
                (ExpectedState::Completed, RecordState::Completed { .. }) => true,
                _ => false,
            }
    });
    if matches {
        Ok(())
    } else {
        Err(StoreError::StaleFence {
            key: key.clone(),
            given: expected.fence,
            current: FenceHolder::of(existing),
        })
    }
}

/// `new` as a replace writes it: under `key`, holding `fence`.
pub fn replacement(key: &IdempotencyKey, new: &Record, fence: Fence) -> Record {
    let mut record = new.clone();
    record.key = key.clone();
    match &mut record.state {
        RecordState::InFlight { fence: f, .. }
        | RecordState::AwaitingApproval { fence: f, .. }
        | RecordState::Completed { fence: f, .. } => *f = fence,
    }
    record
}
