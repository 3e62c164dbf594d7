//! A background task that deletes expired records.

use std::sync::Arc;
use std::time::Duration;

use super::{Store, StoreError};
use crate::store::StoreExt;

/// Run [`StoreExt::sweep`] every `every` until the returned handle is dropped
/// or aborted, or the store is closed. Sweep errors are logged and retried
/// at the next tick.
pub fn spawn_sweeper<S: Store + ?Sized>(store: Arc<S>, every: Duration) -> SweeperHandle {
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match store.sweep().await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(deleted = n, "idem sweeper deleted expired records"),
                Err(StoreError::Closed { .. }) => {
                    tracing::debug!("idem sweeper stopped: the store was closed");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "idem sweeper failed; will retry"),
            }
        }
    });
    SweeperHandle(task)
}

/// Stops the sweeper when dropped.
#[derive(Debug)]
pub struct SweeperHandle(tokio::task::JoinHandle<()>);

impl Drop for SweeperHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
}
