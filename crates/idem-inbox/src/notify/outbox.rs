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
use idem_runtime::key::IdempotencyKey;
use idem_runtime::ledger::{self, names, Claim, Entry, Ledger};
use idem_runtime::record::{FailureCode, Fence, Outcome, StoredFailure};
use idem_runtime::store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// How long a delivery's record is kept: as long as the audit log keeps
/// the decision it tells of, so no reread of the log sends it twice.
pub(crate) const DELIVERY_TTL: Duration = idem_runtime::audit::DEFAULT_AUDIT_RETENTION;

/// How long a delivering instance is presumed alive; renewed before each
/// attempt.
pub(crate) const LEASE: Duration = Duration::from_secs(60);

/// The worker name deliveries are claimed under.
const WORKER: &str = "idem serve (notify)";

/// The book of deliveries on `store`.
fn deliveries(store: &dyn Store) -> Ledger<'_> {
    Ledger::new(store, names::NOTIFY)
        .worker(WORKER)
        .lease(LEASE)
}

/// The book of cursors on `store`.
fn cursors(store: &dyn Store) -> Ledger<'_> {
    Ledger::new(store, names::NOTIFY_CURSOR)
        .worker(WORKER)
        .lease(LEASE)
}

/// The key of delivering event `event` to endpoint `endpoint` (its id).
pub(crate) fn delivery_key(endpoint: &str, event: &str) -> IdempotencyKey {
    ledger::key(&["idem-notify-delivery/v1", endpoint, event])
}

fn cursor_key(endpoint: &str) -> IdempotencyKey {
    ledger::key(&["idem-notify-cursor/v1", endpoint])
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

/// Claim the delivery of `event` to `endpoint`.
pub(crate) async fn claim(
    store: &dyn Store,
    endpoint: &str,
    event: &str,
) -> Result<Claimed, StoreError> {
    let key = delivery_key(endpoint, event);
    let made_of = json!({ "endpoint": endpoint, "event": event });
    Ok(
        match deliveries(store)
            .claim(&key, &made_of, DELIVERY_TTL)
            .await?
        {
            Claim::Owned { fence, takeover } => Claimed::Deliver {
                fence,
                again: takeover,
            },
            Claim::Elsewhere => Claimed::Elsewhere,
            Claim::Done => Claimed::Done,
        },
    )
}

/// Keep the delivery's lease while it is attempted again; `Err(StaleFence)`:
/// another instance took it over, so this one stops.
pub(crate) async fn renew(
    store: &dyn Store,
    endpoint: &str,
    event: &str,
    fence: Fence,
) -> Result<(), StoreError> {
    deliveries(store)
        .renew(&delivery_key(endpoint, event), fence)
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
        Ended::Delivered { status, attempts } => {
            ledger::success(&json!({ "status": status, "attempts": attempts }))
        }
        Ended::Failed { error, attempts } => Outcome::Failure {
            failure: StoredFailure {
                code: FailureCode::Permanent,
                message: error.clone(),
                details: Some(json!({ "attempts": attempts })),
            },
        },
    };
    deliveries(store)
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
    entry: Entry<At>,
}

/// What a cursor's record holds.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct At {
    /// The instant, in ms.
    at: u64,
}

impl From<Entry<At>> for Cursor {
    fn from(entry: Entry<At>) -> Cursor {
        Cursor {
            at: Timestamp(entry.value.at),
            entry,
        }
    }
}

/// The cursor's record is kept this long after its last change.
const CURSOR_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

/// How many times a cursor is read again after another instance changed
/// it first.
const ROUNDS: usize = 16;

/// `endpoint`'s cursor, made at `now` when it has none (an endpoint is
/// told of decisions from when it was first configured on).
pub(crate) async fn cursor(
    store: &dyn Store,
    endpoint: &str,
    now: Timestamp,
) -> Result<Cursor, StoreError> {
    let key = cursor_key(endpoint);
    let book = cursors(store);
    for _ in 0..ROUNDS {
        if let Some(entry) = book.get::<At>(&key).await? {
            return Ok(entry.into());
        }
        let made_of = json!({ "cursor": endpoint });
        let at = At {
            at: now.as_millis(),
        };
        if !book.create(&key, &made_of, &at, CURSOR_TTL).await? {
            // Another instance makes it: read it once it is made.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Err(book.corrupt(&key, "the cursor could not be made"))
}

/// Move `cursor` to `at` (never back); when another instance moved it
/// first, the cursor as it now is, which is as good: deliveries are
/// claimed one by one, so reading an event again sends nothing twice.
pub(crate) async fn advance(
    store: &dyn Store,
    cursor: Cursor,
    at: Timestamp,
) -> Result<Cursor, StoreError> {
    if at <= cursor.at {
        return Ok(cursor);
    }
    let book = cursors(store);
    let key = cursor.entry.record().key.clone();
    let at = At { at: at.as_millis() };
    // `false`: another instance moved it first. Either way it is read
    // back, for its new fence or for the other instance's change.
    book.swap(&cursor.entry, &at, CURSOR_TTL).await?;
    match book.get::<At>(&key).await? {
        Some(entry) => Ok(entry.into()),
        None => Err(book.corrupt(&key, "the cursor vanished")),
    }
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
        let moved = advance(&store, made, at(5)).await.unwrap();
        assert_eq!(moved.at, at(5));
        assert_eq!(
            advance(&store, moved.clone(), at(4)).await.unwrap().at,
            at(5),
            "never back"
        );
        // Another instance's older copy: its write is refused, and it gets
        // the cursor as it now is.
        let reread = advance(&store, stale, at(3)).await.unwrap();
        assert_eq!(reread.at, at(5));
        assert_eq!(cursor(&store, "E", at(9)).await.unwrap().at, at(5));
    }

    /// The store's clock, and `seconds` after it.
    const T: u64 = 1_700_000_000_000;
    fn at(seconds: u64) -> Timestamp {
        Timestamp(T + seconds * 1_000)
    }
}
