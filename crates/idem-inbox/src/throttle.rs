//! Bounded work before anyone is signed in: how many password checks run
//! at once, and how fast a name can be guessed.
//!
//! A password check is Argon2id with 19 MiB of memory, so the work a
//! stranger can cause is counted in checks:
//!
//! * **At most [`CHECKS`] checks run at once for names in the approvers
//!   file, and [`CHECKS`] more for every other name.** A listed name's
//!   sign-in waits at most [`CHECK_WAIT`] for its turn, then gets 503 with
//!   `Retry-After`. The two lanes keep a flood of made-up names from
//!   delaying the people who are listed.
//! * **A made-up name is checked against a decoy hash**, so that it costs
//!   what a wrong password costs, while its lane has a free check and the
//!   made-up names' budget (a token bucket of [`UNLISTED_BURST`], refilled
//!   at [`UNLISTED_PER_SECOND`]) lasts. Beyond that it is answered like a
//!   wrong password after the time a check typically takes, without one:
//!   it could never succeed, and answering it otherwise (429, 503) would
//!   tell a guesser which names are listed.
//! * **A name's failures slow that name down, whoever made them**: after
//!   `n` failures its next check waits [`FIRST_DELAY`] × 2ⁿ⁻¹ (at most
//!   [`MAX_DELAY`]) and its checks run one at a time. An attempt *waits*
//!   its turn rather than being refused, so the right password still gets
//!   in however many wrong ones came before it; only when [`MAX_WAITING`]
//!   attempts for the name are already waiting is one more refused (429),
//!   which bounds what a waiting name holds. The address a sign-in comes
//!   from plays no part: behind a reverse proxy every sign-in has the same
//!   one. Made-up names get the same treatment, so that it tells nothing.
//!
//! The table of names holds every listed name and at most [`MAX_NAMES`]
//! in all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
// Tokio's clock, so that tests can pause it.
use tokio::time::Instant;

/// Password checks that may run at once in each lane (listed names, other
/// names).
pub(super) const CHECKS: usize = 2;

/// The longest a sign-in waits for a check to be free before it gets 503.
pub(super) const CHECK_WAIT: Duration = Duration::from_secs(2);

/// Failed sign-ins of names not in the approvers file, at once…
pub(super) const UNLISTED_BURST: f64 = 32.0;

/// …and per second after that.
pub(super) const UNLISTED_PER_SECOND: f64 = 4.0;

/// How long a listed name's next check waits after its first failure;
/// each further failure doubles it, up to [`MAX_DELAY`].
pub(super) const FIRST_DELAY: Duration = Duration::from_millis(100);

/// The longest a listed name's check waits after failures.
pub(super) const MAX_DELAY: Duration = Duration::from_secs(10);

/// Sign-ins of one listed name that may wait for their turn at once.
pub(super) const MAX_WAITING: u32 = 4;

/// A listed name's failures are forgotten this long after the last one.
pub(super) const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);

/// The most names the throttle keeps (listed names are always kept).
pub(super) const MAX_NAMES: usize = 4096;

/// Why a sign-in was not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NotNow {
    /// Too many failures or waiting attempts (HTTP 429); try again after
    /// this long.
    TooMany(Duration),
    /// Every check is busy (HTTP 503); try again after this long.
    Busy(Duration),
}

impl NotNow {
    /// When to try again, in whole seconds (for `Retry-After`).
    pub(super) fn retry_after(self) -> u64 {
        let (NotNow::TooMany(d) | NotNow::Busy(d)) = self;
        d.as_secs_f64().ceil().max(1.0) as u64
    }
}

/// One listed name's failures.
#[derive(Debug)]
struct Account {
    listed: bool,
    failures: u32,
    last_failure: Instant,
    waiting: u32,
    /// Its checks, one at a time, in the order they came.
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Account {
    fn new(listed: bool) -> Account {
        Account {
            listed,
            failures: 0,
            last_failure: Instant::now(),
            waiting: 0,
            turn: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    /// When its next check may start.
    fn next_check(&self) -> Instant {
        match self.failures {
            0 => Instant::now(),
            n => self.last_failure + delay(n),
        }
    }
}

/// The delay after `n` failures.
fn delay(n: u32) -> Duration {
    FIRST_DELAY
        .saturating_mul(1 << n.saturating_sub(1).min(16))
        .min(MAX_DELAY)
}

/// A token bucket.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// The turn of one sign-in: hold it while its password is checked, then
/// say how the check went.
pub(super) struct Turn {
    throttle: Arc<Throttle>,
    name: Option<String>,
    // Held until the check is done; the name's turn with it.
    permit: Option<OwnedSemaphorePermit>,
    _account_turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Turn {
    /// `Some(how long a check typically takes)` when this sign-in is to be
    /// answered as a wrong password without a check (a made-up name past
    /// its lane's bound): wait that long first.
    pub(super) fn unchecked(&self) -> Option<Duration> {
        match self.permit {
            Some(_) => None,
            None => Some(*self.throttle.typical.lock().unwrap()),
        }
    }

    /// A check took `took`: what unchecked answers wait.
    pub(super) fn took(&self, took: Duration) {
        let mut typical = self.throttle.typical.lock().unwrap();
        *typical = (*typical * 7 + took) / 8;
    }

    /// The permit to run the check with, and the check's memory: move it
    /// into the blocking task, so that a client that goes away does not
    /// free the permit while the check still runs.
    pub(super) fn permit(&mut self) -> Check {
        Check {
            _permit: self.permit.take(),
            scratch: self
                .throttle
                .scratch
                .lock()
                .unwrap()
                .pop()
                .unwrap_or_default(),
            throttle: self.throttle.clone(),
        }
    }

    /// The check refused the password.
    pub(super) fn failed(self) {
        let mut accounts = self.throttle.accounts.lock().unwrap();
        match self.name.as_ref().and_then(|n| accounts.get_mut(n)) {
            Some(account) => {
                account.failures = account.failures.saturating_add(1);
                account.last_failure = Instant::now();
            }
            None => drop(accounts),
        }
    }

    /// The check accepted the password: the name's failures are forgotten.
    pub(super) fn succeeded(self) {
        let mut accounts = self.throttle.accounts.lock().unwrap();
        if let Some(account) = self.name.as_ref().and_then(|n| accounts.get_mut(n)) {
            account.failures = 0;
        }
    }
}

/// A running check's permit and memory; the memory goes back to the
/// throttle for the next check (so at most one buffer per permit is ever
/// allocated).
pub(super) struct Check {
    _permit: Option<OwnedSemaphorePermit>,
    /// The Argon2 memory to check with.
    pub(super) scratch: Vec<argon2::Block>,
    throttle: Arc<Throttle>,
}

impl Drop for Check {
    fn drop(&mut self) {
        let scratch = std::mem::take(&mut self.scratch);
        self.throttle.scratch.lock().unwrap().push(scratch);
    }
}

/// One attempt waiting for its name's turn; counted off when it stops
/// waiting, also when its client goes away.
struct Waiting<'a> {
    throttle: &'a Throttle,
    name: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(account) = self.throttle.accounts.lock().unwrap().get_mut(self.name) {
            account.waiting = account.waiting.saturating_sub(1);
        }
    }
}

/// The sign-in throttle of one server.
#[derive(Debug)]
pub(super) struct Throttle {
    listed: Arc<Semaphore>,
    unlisted: Arc<Semaphore>,
    accounts: Mutex<HashMap<String, Account>>,
    bucket: Mutex<Bucket>,
    /// The memory of checks not running now.
    scratch: Mutex<Vec<Vec<argon2::Block>>>,
    /// How long a check takes, on average lately.
    typical: Mutex<Duration>,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            listed: Arc::new(Semaphore::new(CHECKS)),
            unlisted: Arc::new(Semaphore::new(CHECKS)),
            accounts: Mutex::new(HashMap::new()),
            bucket: Mutex::new(Bucket {
                tokens: UNLISTED_BURST,
                at: Instant::now(),
            }),
            scratch: Mutex::new(Vec::new()),
            typical: Mutex::new(Duration::from_millis(50)),
        }
    }
}

impl Throttle {
    /// Wait for the turn to check a password for `name`, which is
    /// `listed` in the approvers file (with a password) or not.
    pub(super) async fn turn(self: &Arc<Self>, name: &str, listed: bool) -> Result<Turn, NotNow> {
        let account_turn = match self.enter(name, listed)? {
            Some(turn) => {
                let waiting = Waiting {
                    throttle: self,
                    name,
                };
                let guard = self.wait_for_account(name, turn).await;
                drop(waiting);
                Some(guard)
            }
            None => None,
        };
        let permit = match listed {
            true => Some(self.permit(&self.listed).await?),
            false => self.unlisted_permit(),
        };
        Ok(Turn {
            throttle: self.clone(),
            name: account_turn.as_ref().map(|_| name.to_owned()),
            permit,
            _account_turn: account_turn,
        })
    }

    /// Count one more sign-in waiting for `name`: its turn to wait for,
    /// or `None` when the table is full of other names.
    fn enter(
        &self,
        name: &str,
        listed: bool,
    ) -> Result<Option<Arc<tokio::sync::Mutex<()>>>, NotNow> {
        let mut accounts = self.accounts.lock().unwrap();
        if !accounts.contains_key(name) && accounts.len() >= MAX_NAMES {
            accounts.retain(|_, a| {
                a.listed || a.waiting > 0 || a.last_failure.elapsed() < FORGET_AFTER
            });
            if accounts.len() >= MAX_NAMES && !listed {
                return Ok(None);
            }
        }
        let account = accounts
            .entry(name.to_owned())
            .or_insert_with(|| Account::new(listed));
        if account.failures > 0 && account.last_failure.elapsed() > FORGET_AFTER {
            account.failures = 0;
        }
        if account.waiting >= MAX_WAITING {
            let wait = account
                .next_check()
                .saturating_duration_since(Instant::now());
            return Err(NotNow::TooMany(wait.max(FIRST_DELAY)));
        }
        account.waiting += 1;
        Ok(Some(account.turn.clone()))
    }

    /// A check of the made-up names' lane, if one is free and their
    /// budget lasts; never waited for.
    fn unlisted_permit(&self) -> Option<OwnedSemaphorePermit> {
        let permit = self.unlisted.clone().try_acquire_owned().ok()?;
        self.take_unlisted().then_some(permit)
    }

    /// The name's turn (after the checks before it), then its delay.
    async fn wait_for_account(
        &self,
        name: &str,
        turn: Arc<tokio::sync::Mutex<()>>,
    ) -> tokio::sync::OwnedMutexGuard<()> {
        let guard = turn.lock_owned().await;
        let next = self
            .accounts
            .lock()
            .unwrap()
            .get(name)
            .map_or_else(Instant::now, Account::next_check);
        tokio::time::sleep_until(next).await;
        guard
    }

    /// A permit of `lane`, waited for at most [`CHECK_WAIT`].
    async fn permit(&self, lane: &Arc<Semaphore>) -> Result<OwnedSemaphorePermit, NotNow> {
        match tokio::time::timeout(CHECK_WAIT, lane.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(NotNow::Busy(Duration::from_secs(1))),
        }
    }

    /// One token of the made-up names' bucket, if there is one.
    fn take_unlisted(&self) -> bool {
        let mut bucket = self.bucket.lock().unwrap();
        let now = Instant::now();
        let refill = now.duration_since(bucket.at).as_secs_f64() * UNLISTED_PER_SECOND;
        bucket.tokens = (bucket.tokens + refill).min(UNLISTED_BURST);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_listed_names_failures_delay_its_next_check_and_success_forgets_them() {
        let throttle = Arc::new(Throttle::default());
        let start = tokio::time::Instant::now();
        throttle.turn("dana", true).await.unwrap().failed();
        throttle.turn("dana", true).await.unwrap().failed();
        // The third waits 2 × FIRST_DELAY after the second failure.
        throttle.turn("dana", true).await.unwrap().succeeded();
        assert!(start.elapsed() >= FIRST_DELAY * 3, "{:?}", start.elapsed());
        // Forgotten: the next one does not wait.
        let before = tokio::time::Instant::now();
        throttle.turn("dana", true).await.unwrap().succeeded();
        assert_eq!(before.elapsed(), Duration::ZERO);
        // Another name is not slowed by dana's failures.
        throttle.turn("dana", true).await.unwrap().failed();
        let before = tokio::time::Instant::now();
        throttle.turn("vic", true).await.unwrap().succeeded();
        assert_eq!(before.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn made_up_names_past_their_budget_are_answered_without_a_check() {
        let throttle = Arc::new(Throttle::default());
        for i in 0..UNLISTED_BURST as usize {
            let turn = throttle.turn(&format!("n{i}"), false).await.unwrap();
            assert_eq!(turn.unchecked(), None, "checked against the decoy");
            turn.failed();
        }
        let past = throttle.turn("one-more", false).await.unwrap();
        assert!(past.unchecked().is_some(), "answered without a check");
        tokio::time::advance(Duration::from_secs(1)).await;
        let later = throttle.turn("later", false).await.unwrap();
        assert_eq!(later.unchecked(), None, "the budget refills");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_lane_answers_busy_for_a_listed_name_and_unchecked_for_another() {
        let throttle = Arc::new(Throttle::default());
        let mut held = Vec::new();
        for name in ["dana", "vic", "n0", "n1"] {
            let listed = !name.starts_with('n');
            held.push(throttle.turn(name, listed).await.unwrap());
        }
        assert!(held.iter().all(|t| t.unchecked().is_none()));
        let refused = throttle.turn("eve", true).await.err().unwrap();
        assert_eq!(refused, NotNow::Busy(Duration::from_secs(1)));
        let made_up = throttle.turn("n2", false).await.unwrap();
        assert!(made_up.unchecked().is_some());
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn one_name_may_have_only_a_few_sign_ins_waiting() {
        let throttle = Arc::new(Throttle::default());
        throttle.turn("dana", true).await.unwrap().failed();
        let waiting: Vec<_> = (0..MAX_WAITING)
            .map(|_| {
                let throttle = throttle.clone();
                tokio::spawn(async move { throttle.turn("dana", true).await.map(drop) })
            })
            .collect();
        tokio::task::yield_now().await;
        let refused = throttle.turn("dana", true).await.err().unwrap();
        assert!(matches!(refused, NotNow::TooMany(_)), "{refused:?}");
        // A made-up name is treated the same.
        throttle.turn("mallory", false).await.unwrap().failed();
        for handle in waiting {
            handle.await.unwrap().unwrap();
        }
    }
}
