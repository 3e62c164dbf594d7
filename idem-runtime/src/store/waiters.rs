//! Waking the callers of [`Store::wait`](super::Store::wait) when a record
//! leaves the in-flight state, for stores that learn of completions through
//! a notification (this process's own writes, Redis pub/sub, PostgreSQL
//! LISTEN/NOTIFY) and poll only as a safety net.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::Notify;

use super::StoreError;
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::{Record, RecordState};

/// One [`Notify`] per key somebody is waiting on.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    keys: DashMap<String, Arc<Notify>>,
}

impl Waiters {
    /// Wake everybody waiting on `key` (its record completed or was
    /// released).
    pub(crate) fn wake(&self, key: &str) {
        if let Some((_, notify)) = self.keys.remove(key) {
            notify.notify_waiters();
        }
    }

    /// Wake every waiter, e.g. after the notification channel reconnected
    /// and messages may have been lost: each re-reads its record.
    pub(crate) fn wake_all(&self) {
        self.keys.retain(|_, notify| {
            notify.notify_waiters();
            false
        });
    }

    fn register(&self, key: &str) -> Arc<Notify> {
        self.keys.entry(key.to_owned()).or_default().clone()
    }

    fn forget(&self, key: &str, notify: Arc<Notify>) {
        drop(notify);
        // Only the map's own reference left: nobody waits any more.
        self.keys.remove_if(key, |_, n| Arc::strong_count(n) == 1);
    }

    /// Wait for `key` to leave the in-flight state, re-reading it with
    /// `read` (which returns the record and the store's time) on every
    /// notification, when the owner's lease runs out, and at least every
    /// `poll` (the safety net for a lost notification or a writer in
    /// another process that cannot notify this one).
    pub(crate) async fn wait<F, Fut>(
        &self,
        key: &IdempotencyKey,
        timeout: Duration,
        poll: Duration,
        mut read: F,
    ) -> Result<Option<Record>, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(Option<Record>, Timestamp), StoreError>>,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(5).min(poll);
        loop {
            let notify = self.register(key.as_str());
            let step = Self::wait_once(&notify, &mut read, deadline, pause).await;
            self.forget(key.as_str(), notify);
            match step? {
                Some(done) => return Ok(done),
                None => pause = (pause * 2).min(poll),
            }
        }
    }

    /// One read and, if the record is still in flight, one nap; `Some` when
    /// the wait is over.
    async fn wait_once<F, Fut>(
        notify: &Notify,
        read: &mut F,
        deadline: tokio::time::Instant,
        pause: Duration,
    ) -> Result<Option<Option<Record>>, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(Option<Record>, Timestamp), StoreError>>,
    {
        // Register interest before reading, so a completion between the read
        // and the await is not missed.
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let (record, now) = read().await?;
        let lease_until = match &record {
            Some(Record {
                state: RecordState::InFlight { lease_until, .. },
                ..
            }) if *lease_until > now => *lease_until,
            _ => return Ok(Some(record)),
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(Some(record));
        }
        let nap = left.min(now.until(lease_until)).min(pause);
        let _ = tokio::time::timeout(nap, notified).await;
        Ok(None)
    }
}
