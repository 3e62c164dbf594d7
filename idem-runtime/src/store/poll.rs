//! Waiting by polling: the default [`Store::wait`] and
//! [`Store::wait_for_decision`] for stores without notifications.

use std::time::Duration;

use super::wait_for::WaitFor;
use super::{Store, StoreError};
use crate::key::IdempotencyKey;
use crate::record::Record;

/// The polling implementation of [`Store::wait`], for stores without
/// notifications: [`Store::get`] with a back-off from 5 ms to 100 ms.
pub async fn poll_wait<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    timeout: Duration,
) -> Result<Option<Record>, StoreError> {
    poll(
        store,
        key,
        WaitFor::Completion,
        timeout,
        Duration::from_millis(100),
    )
    .await
}

/// The polling implementation of [`Store::wait_for_decision`], for stores
/// without notifications: [`Store::get`] with a back-off from 5 ms to
/// 250 ms (a person's decision may be hours away; a quarter of a second
/// more is not felt, four reads a second per waiter are).
pub async fn poll_decision<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    timeout: Duration,
) -> Result<Option<Record>, StoreError> {
    poll(
        store,
        key,
        WaitFor::Decision,
        timeout,
        Duration::from_millis(250),
    )
    .await
}

/// Read `key` until its record leaves the state `what` waits out, or
/// `timeout` passes, napping 5 ms doubling to `most` between reads.
async fn poll<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    what: WaitFor,
    timeout: Duration,
    most: Duration,
) -> Result<Option<Record>, StoreError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    loop {
        let record = store.get(key).await?;
        let now = store.now().await?;
        if record
            .as_ref()
            .and_then(|r| what.pending_until(r, now))
            .is_none()
        {
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
