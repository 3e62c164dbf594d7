//! Waking the callers of [`StoreExt::wait`](super::StoreExt::wait) when a record
//! leaves the in-flight state or a person decides on it, for stores that learn of changes through a
//! notification (this process's own writes, Redis pub/sub, PostgreSQL
//! LISTEN/NOTIFY) and poll only as a safety net. Every write that ends
//! either wait — a completion, a release, a replace (an approval or a
//! denial is one) — notifies the key.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use tokio::sync::Notify;

use super::wait_for::WaitFor;
use super::StoreError;
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::Record;
use crate::retry::RetryPolicy;

/// The pause before a store's notification listener (Redis's
/// subscription, PostgreSQL's `LISTEN`) connects again, after `failures`
/// lost or failed connections in a row (from 1): 100 ms doubling to 2 s,
/// the [retry policy](crate::retry::RetryPolicy)'s exponential backoff
/// without jitter. Waiters poll meanwhile, so a short pause only spares
/// the server.
///
/// ```
/// use idem_runtime::store::backend::reconnect_pause;
/// use std::time::Duration;
/// assert_eq!(reconnect_pause(1), Duration::from_millis(100));
/// assert_eq!(reconnect_pause(2), Duration::from_millis(200));
/// assert_eq!(reconnect_pause(30), Duration::from_secs(2));
/// ```
pub fn reconnect_pause(failures: u32) -> Duration {
    RetryPolicy::exponential()
        .initial_delay(Duration::from_millis(100))
        .max_delay(Duration::from_secs(2))
        .without_jitter()
        .delay(failures, None)
}

/// One [`Notify`] per key somebody is waiting on.
#[derive(Debug)]
pub struct Waiters {
    keys: DashMap<String, Arc<Notify>>,
    /// The safety net: waiters re-read at least this often, for a lost
    /// notification or a writer in another process that cannot notify
    /// this one.
    poll: Duration,
}

impl Waiters {
    /// Nobody waiting yet; waiters will re-read at least every `poll`.
    pub fn new(poll: Duration) -> Self {
        Waiters {
            keys: DashMap::new(),
            poll,
        }
    }

    /// Wake everybody waiting on `key` (its record completed, was released
    /// or replaced).
    pub fn wake(&self, key: &str) {
        if let Some((_, notify)) = self.keys.remove(key) {
            notify.notify_waiters();
        }
    }

    /// Wake every waiter, e.g. after the notification channel reconnected
    /// and messages may have been lost: each re-reads its record.
    pub fn wake_all(&self) {
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

    /// Wait for `key` to leave the state `what` waits out, re-reading it
    /// with `read` (which returns the record and the store's time) on every
    /// notification, when the state ends by itself (the owner's lease runs
    /// out, an approval request lapses), and at least every `poll` the
    /// waiters were made with ([`Waiters::new`]).
    pub async fn wait<F, Fut>(
        &self,
        key: &IdempotencyKey,
        what: WaitFor,
        timeout: Duration,
        mut read: F,
    ) -> Result<Option<Record>, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(Option<Record>, Timestamp), StoreError>>,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(5).min(self.poll);
        loop {
            let notify = self.register(key.as_str());
            let step = Self::wait_once(&notify, what, &mut read, deadline, pause).await;
            self.forget(key.as_str(), notify);
            match step? {
                Some(done) => return Ok(done),
                None => pause = (pause * 2).min(self.poll),
            }
        }
    }

    /// One read and, if the record is still in the state waited out, one
    /// nap; `Some` when the wait is over.
    async fn wait_once<F, Fut>(
        notify: &Notify,
        what: WaitFor,
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
        let Some(until) = record.as_ref().and_then(|r| what.pending_until(r, now)) else {
            return Ok(Some(record));
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(Some(record));
        }
        let nap = left.min(now.until(until)).min(pause);
        let _ = tokio::time::timeout(nap, notified).await;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use super::*;
    use crate::store::wait_for::tests::{approved, awaiting, record};

    /// On tokio's paused clock no time passes unless every task sleeps, so
    /// a waiter that returns while the clock still reads its start was
    /// woken by the notification: neither its poll nor its timeout fired.
    #[tokio::test(start_paused = true)]
    async fn an_approval_wakes_a_decision_waiter_without_a_poll() {
        let hour = Duration::from_secs(3600);
        let waiters = Arc::new(Waiters::new(hour));
        let key = IdempotencyKey::parse(&"ef".repeat(32)).unwrap();
        let stored = Arc::new(Mutex::new(Some(record(&key, awaiting()))));
        let reads = Arc::new(AtomicUsize::new(0));
        let started = tokio::time::Instant::now();
        let waiter = {
            let (waiters, key) = (waiters.clone(), key.clone());
            let (stored, reads) = (stored.clone(), reads.clone());
            tokio::spawn(async move {
                waiters
                    .wait(&key, WaitFor::Decision, hour, || {
                        reads.fetch_add(1, Ordering::SeqCst);
                        let record = stored.lock().unwrap().clone();
                        async move { Ok((record, Timestamp(2_000))) }
                    })
                    .await
            })
        };
        // Until the waiter has read the unanswered request and naps.
        while reads.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }

        let decided = approved(record(&key, awaiting()));
        *stored.lock().unwrap() = Some(decided.clone());
        waiters.wake(key.as_str());

        let seen = waiter.await.unwrap().unwrap();
        assert_eq!(seen, Some(decided), "the waiter sees the approval");
        assert_eq!(
            reads.load(Ordering::SeqCst),
            2,
            "one read before, one after"
        );
        assert_eq!(
            tokio::time::Instant::now(),
            started,
            "woken by the notification, not by a timer"
        );
    }
}
