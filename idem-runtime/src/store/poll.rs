//! Waiting by polling: the default [`Store::wait`] for stores without
//! notifications.

use std::time::Duration;

use super::{Store, StoreError};
use crate::key::IdempotencyKey;
use crate::record::Record;

/// The polling implementation of [`Store::wait`], for stores without
/// notifications.
pub async fn poll_wait<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    timeout: Duration,
) -> Result<Option<Record>, StoreError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut pause = Duration::from_millis(5);
    loop {
        let record = store.get(key).await?;
        let now = store.now().await?;
        match &record {
            Some(r) if r.outcome().is_none() && !r.lease_expired(now) => {}
            _ => return Ok(record),
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(record);
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}
