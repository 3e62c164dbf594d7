//! The outbox, in the store: a delivery of event N to endpoint E is itself
//! an idempotent operation under a key of its own, made of (E, N), and
//! claimed, renewed and completed as a tool call is. So whichever `idem
//! serve` claims it first delivers it, every other instance (and the same
//! one after a restart) finds it in flight or completed and leaves it,
//! and an instance that died mid-delivery is taken over when its lease
//! runs out. Each endpoint's cursor into the audit log is a record too,
//! changed by compare-and-swap, so a restart resumes where the last
//! instance stopped instead of rereading the log.
//!
//! The records are bookkeeping (tool `idem:notify`, `idem:notify:cursor`):
//! the inbox, `idem list` and the counts leave them out.

use std::time::Duration;

use idem_runtime::clock::Timestamp;
use idem_runtime::key::{CanonicalArgs, IdempotencyKey};
use idem_runtime::record::{
    CallInfoRef, FailureCode, Fence, Outcome, OutputJson, Record, RecordState, StoredFailure,
    RESERVED_STEP_PREFIX,
};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, ClaimRequest, Expected, ExpectedState, Store, StoreError};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// How long a delivery's record is kept: as long as the audit log keeps
/// the decision it tells of, so no reread of the log sends it twice.
pub(crate) const DELIVERY_TTL: Duration = idem_runtime::audit::DEFAULT_AUDIT_RETENTION;

/// How long a delivering instance is presumed alive; renewed before each
/// attempt.
pub(crate) const LEASE: Duration = Duration::from_secs(60);

/// The worker name deliveries are claimed under.
const WORKER: &str = "idem serve (notify)";

fn tool(what: &str) -> String {
    format!("{RESERVED_STEP_PREFIX}{what}")
}

/// The key made of `parts`.
fn key(parts: &[&str]) -> IdempotencyKey {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    IdempotencyKey::parse(&hex::encode(hash.finalize())).expect("64 hex digits are a key")
}

/// The key of delivering event `event` to endpoint `endpoint` (its id).
pub(crate) fn delivery_key(endpoint: &str, event: &str) -> IdempotencyKey {
    key(&["idem-notify-delivery/v1", endpoint, event])
}

fn cursor_key(endpoint: &str) -> IdempotencyKey {
    key(&["idem-notify-cursor/v1", endpoint])
}

/// What claiming a delivery found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// This instance delivers it, under `fence`; `again` when an instance
    /// that claimed it before died without recording the answer (the
    /// receiver may have had it: it dedups on the event id).
    Deliver {
        /// The fence to renew and complete with.
        fence: Fence,
        /// A takeover.
        again: bool,
    },
    /// Another instance is delivering it now.
    Elsewhere,
    /// It was delivered (or given up on) before.
    Done,
}

fn claim_request<'a>(
    key: &'a IdempotencyKey,
    tool: &'a str,
    fingerprint: &'a idem_runtime::key::Fingerprint,
    ttl: Duration,
) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        tool,
        fingerprint,
        check_fingerprint: true,
        lease: LEASE,
        info: CallInfoRef {
            ttl: Some(ttl),
            ..CallInfoRef::EMPTY
        },
        worker: Some(WORKER),
        // A claim forgotten in a crash would be a second delivery.
        durable: true,
    }
}

fn fingerprint(value: Value) -> idem_runtime::key::Fingerprint {
    CanonicalArgs::from_value(&value)
        .expect("an object")
        .fingerprint
}

/// Claim the delivery of `event` to `endpoint`.
pub(crate) async fn claim(
    store: &dyn Store,
    endpoint: &str,
    event: &str,
) -> Result<Claimed, StoreError> {
    let key = delivery_key(endpoint, event);
    let tool = tool("notify");
    let fingerprint = fingerprint(json!({ "endpoint": endpoint, "event": event }));
    let request = claim_request(&key, &tool, &fingerprint, DELIVERY_TTL);
    Ok(match store.claim(&request).await? {
        ClaimOutcome::Acquired {
            fence, takeover, ..
        } => Claimed::Deliver {
            fence,
            again: takeover.is_some(),
        },
        ClaimOutcome::InFlight { .. } => Claimed::Elsewhere,
        ClaimOutcome::Completed(_) => Claimed::Done,
        ClaimOutcome::AwaitingApproval(_) | ClaimOutcome::KeyReused { .. } => {
            return Err(corrupt(&key, "its key holds another record"))
        }
    })
}

/// Keep the delivery's lease while it is attempted again; `Err(StaleFence)`:
/// another instance took it over, so this one stops.
pub(crate) async fn renew(
    store: &dyn Store,
    endpoint: &str,
    event: &str,
    fence: Fence,
) -> Result<(), StoreError> {
    store
        .renew(&delivery_key(endpoint, event), fence, LEASE)
        .await
}

/// How a delivery ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The endpoint answered 2xx on attempt `attempts` with `status`.
    Delivered {
        /// The status.
        status: u16,
        /// Attempts made.
        attempts: u32,
    },
    /// Given up on after `attempts`; `error` is the last answer or error.
    Failed {
        /// The last error.
        error: String,
        /// Attempts made.
        attempts: u32,
    },
}

/// Record how the delivery ended: it is not attempted again.
pub(crate) async fn finish(
    store: &dyn Store,
    endpoint: &str,
    event: &str,
    fence: Fence,
    ended: &Ended,
) -> Result<(), StoreError> {
    let outcome = match ended {
        Ended::Delivered { status, attempts } => Outcome::Success {
            output: OutputJson::new(&json!({ "status": status, "attempts": attempts }))
                .expect("JSON"),
        },
        Ended::Failed { error, attempts } => Outcome::Failure {
            failure: StoredFailure {
                code: FailureCode::Permanent,
                message: error.clone(),
                details: Some(json!({ "attempts": attempts })),
            },
        },
    };
    store
        .complete(
            &delivery_key(endpoint, event),
            fence,
            &outcome,
            DELIVERY_TTL,
        )
        .await
}

/// An endpoint's cursor into the audit log: decided events before `at`
/// are all delivered or given up on.
#[derive(Debug, Clone)]
pub(crate) struct Cursor {
    /// Where the endpoint stands.
    pub at: Timestamp,
    record: Record,
}

/// The cursor's record is kept this long after its last change.
const CURSOR_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

/// `endpoint`'s cursor, made at `now` when it has none (an endpoint is
/// told of decisions from when it was first configured on).
pub(crate) async fn cursor(
    store: &dyn Store,
    endpoint: &str,
    now: Timestamp,
) -> Result<Cursor, StoreError> {
    let key = cursor_key(endpoint);
    for _ in 0..ROUNDS {
        if let Some(record) = store.get(&key).await? {
            return read_cursor(record);
        }
        let tool = tool("notify:cursor");
        let fingerprint = fingerprint(json!({ "cursor": endpoint }));
        let request = claim_request(&key, &tool, &fingerprint, CURSOR_TTL);
        if let ClaimOutcome::Acquired { fence, .. } = store.claim(&request).await? {
            let outcome = cursor_outcome(now);
            store.complete(&key, fence, &outcome, CURSOR_TTL).await?;
        } else {
            // Another instance makes it: read it once it is made.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Err(corrupt(&key, "the cursor could not be made"))
}

/// How many times a cursor is read again after another instance changed
/// it first.
const ROUNDS: usize = 16;

fn cursor_outcome(at: Timestamp) -> Outcome {
    Outcome::Success {
        output: OutputJson::new(&json!({ "at": at.as_millis() })).expect("JSON"),
    }
}

fn read_cursor(record: Record) -> Result<Cursor, StoreError> {
    let at = match &record.state {
        RecordState::Completed {
            outcome: Outcome::Success { output },
            ..
        } => output.parse::<Value>().ok().and_then(|v| v["at"].as_u64()),
        _ => None,
    };
    match at {
        Some(at) => Ok(Cursor {
            at: Timestamp(at),
            record,
        }),
        None => Err(corrupt(&record.key, "it is not a completed cursor")),
    }
}

/// Move `cursor` to `at` (never back); when another instance moved it
/// first, the cursor as it now is, which is as good: deliveries are
/// claimed one by one, so reading an event again sends nothing twice.
pub(crate) async fn advance(
    store: &dyn Store,
    cursor: Cursor,
    at: Timestamp,
    now: Timestamp,
) -> Result<Cursor, StoreError> {
    if at <= cursor.at {
        return Ok(cursor);
    }
    let key = cursor.record.key.clone();
    let fence = cursor.record.fence();
    let mut record = cursor.record;
    record.state = RecordState::Completed {
        fence,
        outcome: cursor_outcome(at),
        completed_at: now,
        expires_at: now.plus(CURSOR_TTL),
    };
    let expected = Expected {
        fence,
        state: ExpectedState::Completed,
    };
    match store.replace(&key, expected, Some(&record), None).await {
        // Read back for its new fence, or for the other instance's change.
        Ok(_) | Err(StoreError::StaleFence { .. }) => match store.get(&key).await? {
            Some(record) => read_cursor(record),
            None => Err(corrupt(&key, "the cursor vanished")),
        },
        Err(e) => Err(e),
    }
}

fn corrupt(key: &IdempotencyKey, why: &str) -> StoreError {
    StoreError::Corrupt(idem_runtime::record::CorruptRecord {
        key: key.to_string(),
        detail: format!("a notification record is unreadable: {why}"),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use idem_runtime::clock::ManualClock;
    use idem_runtime::store::MemoryStore;

    use super::*;

    #[tokio::test]
    async fn a_delivery_is_claimed_once_and_taken_over_only_after_its_lease() {
        let clock = Arc::new(ManualClock::new(1_700_000_000_000));
        let store = MemoryStore::with_clock(clock.clone());
        let Claimed::Deliver { fence, again } = claim(&store, "E", "evt_1").await.unwrap() else {
            panic!("the first claim delivers");
        };
        assert!(!again);
        // A second instance, while the first delivers: leaves it.
        assert_eq!(
            claim(&store, "E", "evt_1").await.unwrap(),
            Claimed::Elsewhere
        );
        // Another endpoint's delivery of the same event is its own.
        assert!(matches!(
            claim(&store, "F", "evt_1").await.unwrap(),
            Claimed::Deliver { .. }
        ));
        // The first instance dies; once its lease ran out, the delivery is
        // taken over, and the dead one cannot record anything.
        clock.advance(LEASE + Duration::from_secs(1));
        let Claimed::Deliver {
            fence: newer,
            again,
        } = claim(&store, "E", "evt_1").await.unwrap()
        else {
            panic!("taken over");
        };
        assert!(again);
        let ended = Ended::Delivered {
            status: 200,
            attempts: 1,
        };
        assert!(finish(&store, "E", "evt_1", fence, &ended).await.is_err());
        finish(&store, "E", "evt_1", newer, &ended).await.unwrap();
        assert_eq!(claim(&store, "E", "evt_1").await.unwrap(), Claimed::Done);
    }

    #[tokio::test]
    async fn a_cursor_is_made_once_and_only_moves_forward() {
        let store = MemoryStore::with_clock(Arc::new(ManualClock::new(T)));
        let made = cursor(&store, "E", at(1)).await.unwrap();
        assert_eq!(made.at, at(1));
        // Read again later: the one made first.
        assert_eq!(cursor(&store, "E", at(9)).await.unwrap().at, at(1));
        let stale = made.clone();
        let moved = advance(&store, made, at(5), at(6)).await.unwrap();
        assert_eq!(moved.at, at(5));
        assert_eq!(
            advance(&store, moved.clone(), at(4), at(6))
                .await
                .unwrap()
                .at,
            at(5),
            "never back"
        );
        // Another instance's older copy: its write is refused, and it gets
        // the cursor as it now is.
        let reread = advance(&store, stale, at(3), at(6)).await.unwrap();
        assert_eq!(reread.at, at(5));
        assert_eq!(cursor(&store, "E", at(9)).await.unwrap().at, at(5));
    }

    /// The store's clock, and `seconds` after it.
    const T: u64 = 1_700_000_000_000;
    fn at(seconds: u64) -> Timestamp {
        Timestamp(T + seconds * 1_000)
    }
}
