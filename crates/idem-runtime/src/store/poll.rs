//! Waiting by polling: the default [`StoreExt::wait`] for stores without
//! notifications, one wait-until ([`poll_until`]) whose predicate and
//! back-off depend on what is waited for.

use std::time::Duration;

use super::wait_for::WaitFor;
use super::{Store, StoreError};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::Record;
use crate::store::StoreExt;

/// The polling implementation of [`StoreExt::wait`], for stores without
/// notifications: [`StoreExt::get`] with a back-off from 5 ms to 100 ms for a
/// completion, to 250 ms for a decision (a person's decision may be hours
/// away; a quarter of a second more is not felt, four reads a second per
/// waiter are).
pub async fn poll_wait<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    until: WaitFor,
    timeout: Duration,
) -> Result<Option<Record>, StoreError> {
    let most = match until {
        WaitFor::Completion => Duration::from_millis(100),
        WaitFor::Decision => Duration::from_millis(250),
    };
    poll_until(store, key, timeout, most, |record, now| {
        has_left(until, record, now)
    })
    .await
}

/// Whether `record` (`None`: there is none) has left the state `what`
/// waits out, at `now`.
fn has_left(what: WaitFor, record: Option<&Record>, now: Timestamp) -> bool {
    record.and_then(|r| what.pending_until(r, now)).is_none()
}

/// Read `key` until `done` says its record (`None`: there is none) is what
/// the caller waits for at the store's clock, or `timeout` passes, napping
/// 5 ms doubling to `most` between reads; the record as last read.
async fn poll_until<S, F>(
    store: &S,
    key: &IdempotencyKey,
    timeout: Duration,
    most: Duration,
    done: F,
) -> Result<Option<Record>, StoreError>
where
    S: Store + ?Sized,
    F: Fn(Option<&Record>, Timestamp) -> bool,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    loop {
        let record = store.get(key).await?;
        let now = store.now().await?;
        if done(record.as_ref(), now) {
            return Ok(record);
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(record);
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(most);
    }
}
