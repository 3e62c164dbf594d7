//! What a waiter waits for, in one place for every way of waiting: the
//! polling defaults ([`super::poll`]), the notified waiters of SQLite,
//! Redis and PostgreSQL (`super::waiters`) and the in-memory store.

use crate::clock::Timestamp;
use crate::record::{Record, RecordState, Status};

/// The state a waiter waits for a record to leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    /// In flight under a live lease: a duplicate waits for the owner.
    Completion,
    /// Awaiting a person's decision, not yet approved:
    /// a call made to wait for approval, or an operator, waits for it.
    Decision,
}

impl WaitFor {
    /// While `record` at `now` is still in the state waited on: the instant
    /// it leaves that state with nobody writing — the owner's lease runs
    /// out, the request lapses unanswered — when a waiter must look again
    /// although no notification will come. `None` once the wait is over.
    pub fn pending_until(self, record: &Record, now: Timestamp) -> Option<Timestamp> {
        let until = match (self, &record.state) {
            (WaitFor::Completion, RecordState::InFlight { lease_until, .. }) => *lease_until,
            // An approved request keeps this state until a call claims it,
            // but the decision is made: `status` tells it by the approval
            // step the record carries.
            (WaitFor::Decision, RecordState::AwaitingApproval { expires_at, .. })
                if record.status() == Status::AwaitingApproval =>
            {
                *expires_at
            }
            _ => return None,
        };
        (until > now).then_some(until)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::approval::{Approval, ApprovalDecision};
    use crate::key::{Fingerprint, IdempotencyKey};
    use crate::record::{FailureCode, Fence, Outcome, StoredFailure, APPROVAL_STEP};

    /// A record of `key` in `state`, as the executor writes one.
    pub(crate) fn record(key: &IdempotencyKey, state: RecordState) -> Record {
        Record {
            key: key.clone(),
            tool: "refund".into(),
            fingerprint: Fingerprint::new("ab".repeat(32)),
            created_at: Timestamp(1_000),
            state,
            steps: Default::default(),
            info: Default::default(),
            worker: None,
            audit: Vec::new(),
        }
    }

    /// A request asked at 1 s that lapses unanswered at 60 s.
    pub(crate) fn awaiting() -> RecordState {
        RecordState::AwaitingApproval {
            fence: Fence(2),
            requested_at: Timestamp(1_000),
            expires_at: Timestamp(60_000),
            message: "ask #payments-oncall".into(),
        }
    }

    /// In flight under a lease that runs out at 10 s.
    fn in_flight() -> RecordState {
        RecordState::InFlight {
            fence: Fence(4),
            lease_until: Timestamp(10_000),
        }
    }

    /// `r` approved by ana, as `Operator::approve` records it.
    pub(crate) fn approved(mut r: Record) -> Record {
        let decision = ApprovalDecision::Approved(Approval::granted_by("ana"));
        r.steps.insert(
            APPROVAL_STEP.to_owned(),
            serde_json::to_value(decision).unwrap(),
        );
        r
    }

    fn key() -> IdempotencyKey {
        IdempotencyKey::parse(&"cd".repeat(32)).unwrap()
    }

    #[test]
    fn a_decision_waiter_waits_only_while_a_request_is_unanswered() {
        let now = Timestamp(2_000);
        let asked = record(&key(), awaiting());
        assert_eq!(
            WaitFor::Decision.pending_until(&asked, now),
            Some(Timestamp(60_000)),
            "unanswered: wait, and look again when the request lapses"
        );
        assert_eq!(WaitFor::Decision.pending_until(&approved(asked), now), None);
        let denied = record(
            &key(),
            RecordState::Completed {
                fence: Fence(3),
                outcome: Outcome::Failure {
                    failure: StoredFailure {
                        code: FailureCode::ApprovalDenied,
                        message: "not this quarter".into(),
                        details: None,
                    },
                },
                completed_at: now,
                expires_at: Timestamp(90_000),
            },
        );
        assert_eq!(WaitFor::Decision.pending_until(&denied, now), None);
        let in_flight = record(&key(), in_flight());
        assert_eq!(
            WaitFor::Decision.pending_until(&in_flight, now),
            None,
            "an approved call being run is decided"
        );
        let lapsed = record(&key(), awaiting());
        assert_eq!(
            WaitFor::Decision.pending_until(&lapsed, Timestamp(60_000)),
            None
        );
    }

    #[test]
    fn a_completion_waiter_waits_only_while_a_lease_is_live() {
        let in_flight = record(&key(), in_flight());
        assert_eq!(
            WaitFor::Completion.pending_until(&in_flight, Timestamp(2_000)),
            Some(Timestamp(10_000)),
            "live: wait, and look again when the lease runs out"
        );
        assert_eq!(
            WaitFor::Completion.pending_until(&in_flight, Timestamp(10_000)),
            None,
            "a lease run out ends the wait: the waiter may take over"
        );
        assert_eq!(
            WaitFor::Completion.pending_until(&record(&key(), awaiting()), Timestamp(2_000)),
            None,
            "a parked call is not in flight"
        );
    }
}
