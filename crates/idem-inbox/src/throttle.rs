//! Bounded work before anyone is signed in: how many password checks run
//! at once, how many one source may ask for, and how fast a name can be
//! guessed from one source.
//!
//! A password check is Argon2id with 19 MiB of memory, so the work a
//! stranger can cause is counted in checks:
//!
//! * **At most [`CHECKS`] checks run at once for names in the approvers
//!   file from sources that have not failed for them lately, [`CHECKS`]
//!   more for listed names from sources that have, and [`CHECKS`] more
//!   for every other name.** A listed name's sign-in waits at most
//!   [`CHECK_WAIT`] for its turn, then gets 503 with `Retry-After`. The
//!   three lanes keep a flood of made-up names, and guesses that already
//!   failed, from delaying the people who are listed.
//! * **Each source (an address; an IPv6 address's /64) has a budget of
//!   sign-ins**, a token bucket of [`SOURCE_BURST`] refilled at
//!   [`SOURCE_PER_MINUTE`] a minute; past it, its sign-ins get 429 with
//!   `Retry-After`, whatever the name, so the answer tells nothing about
//!   names. At most [`MAX_SOURCES`] sources are kept; a new one past that
//!   shares one budget with the others past it.
//! * **A made-up name is checked against a decoy hash**, so that it costs
//!   what a wrong password costs, while its lane has a free check and the
//!   made-up names' budget (a token bucket of [`UNLISTED_BURST`], refilled
//!   at [`UNLISTED_PER_SECOND`]) lasts. Beyond that it is answered like a
//!   wrong password after the time a check typically takes, without one:
//!   it could never succeed, and answering it otherwise (429, 503) would
//!   tell a guesser which names are listed.
//! * **A name's failures slow that name down from the source that made
//!   them, and from no other**: after `n` failures from one source, the
//!   next check of the name from there waits [`FIRST_DELAY`] × 2ⁿ⁻¹ (at
//!   most [`MAX_DELAY`]), and its checks from there run one at a time. An
//!   attempt *waits* its turn rather than being refused; only when
//!   [`MAX_WAITING`] attempts for the name from that source are already
//!   waiting is one more refused (429). Strangers who guess a name
//!   therefore fill their own lanes, never its owner's: the right password
//!   from another address is checked at once (given a free check). Made-up
//!   names get the same treatment, so that it tells nothing.
//!
//! The table of lanes holds at most [`MAX_NAMES`] (name, source) pairs;
//! when it is full of recent failures, a new pair shares the lane of its
//! name with every other pair past the bound.

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

/// The most (name, source) lanes the throttle keeps apart.
pub(super) const MAX_NAMES: usize = 4096;

/// Sign-ins one source may make at once…
pub(super) const SOURCE_BURST: f64 = 20.0;

/// …and per minute after that.
pub(super) const SOURCE_PER_MINUTE: f64 = 20.0;

/// The most sources whose budgets are kept apart.
pub(super) const MAX_SOURCES: usize = 4096;

/// The source of the sign-ins past [`MAX_SOURCES`] and of the lanes past
/// [`MAX_NAMES`]: they share.
const OVERFLOW: &str = "*";

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

/// One name's failures from one source.
#[derive(Debug)]
struct Account {
    failures: u32,
    last_failure: Instant,
    waiting: u32,
    /// Its checks, one at a time, in the order they came.
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Account {
    fn new() -> Account {
        Account {
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

impl Bucket {
    fn full(tokens: f64) -> Bucket {
        Bucket {
            tokens,
            at: Instant::now(),
        }
    }

    /// Refill at `per_second` up to `burst`, then take one token if there
    /// is one; `Err(how long until there is)` if not.
    fn take(&mut self, burst: f64, per_second: f64) -> Result<(), Duration> {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * per_second;
        self.tokens = (self.tokens + refill).min(burst);
        self.at = now;
        if self.tokens < 1.0 {
            return Err(Duration::from_secs_f64((1.0 - self.tokens) / per_second));
        }
        self.tokens -= 1.0;
        Ok(())
    }
}

/// A (name, source) lane's key.
type Lane = (String, String);

/// The turn of one sign-in: hold it while its password is checked, then
/// say how the check went.
pub(super) struct Turn {
    throttle: Arc<Throttle>,
    lane: Lane,
    // Held until the check is done; the name's turn with it.
    permit: Option<OwnedSemaphorePermit>,
    _account_turn: tokio::sync::OwnedMutexGuard<()>,
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
        match accounts.get_mut(&self.lane) {
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
        if let Some(account) = accounts.get_mut(&self.lane) {
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

/// One attempt waiting for its lane's turn; counted off when it stops
/// waiting, also when its client goes away.
struct Waiting<'a> {
    throttle: &'a Throttle,
    lane: &'a Lane,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(account) = self.throttle.accounts.lock().unwrap().get_mut(self.lane) {
            account.waiting = account.waiting.saturating_sub(1);
        }
    }
}

/// The sign-in throttle of one server.
#[derive(Debug)]
pub(super) struct Throttle {
    listed: Arc<Semaphore>,
    /// Listed names from sources that failed for them.
    failing: Arc<Semaphore>,
    unlisted: Arc<Semaphore>,
    accounts: Mutex<HashMap<Lane, Account>>,
    bucket: Mutex<Bucket>,
    sources: Mutex<HashMap<String, Bucket>>,
    /// The memory of checks not running now.
    scratch: Mutex<Vec<Vec<argon2::Block>>>,
    /// How long a check takes, on average lately.
    typical: Mutex<Duration>,
}

impl Default for Throttle {
    fn default() -> Self {
        Throttle {
            listed: Arc::new(Semaphore::new(CHECKS)),
            failing: Arc::new(Semaphore::new(CHECKS)),
            unlisted: Arc::new(Semaphore::new(CHECKS)),
            accounts: Mutex::new(HashMap::new()),
            bucket: Mutex::new(Bucket::full(UNLISTED_BURST)),
            sources: Mutex::new(HashMap::new()),
            scratch: Mutex::new(Vec::new()),
            typical: Mutex::new(Duration::from_millis(50)),
        }
    }
}

impl Throttle {
    /// Wait for the turn to check a password for `name`, which is
    /// `listed` in the approvers file (with a password) or not, from
    /// `source` ([`source`]).
    pub(super) async fn turn(
        self: &Arc<Self>,
        name: &str,
        listed: bool,
        source: &str,
    ) -> Result<Turn, NotNow> {
        self.take_source(source)?;
        let (lane, turn) = self.enter(name, source)?;
        let waiting = Waiting {
            throttle: self,
            lane: &lane,
        };
        let guard = self.wait_for_account(&lane, turn).await;
        drop(waiting);
        let failed = self
            .accounts
            .lock()
            .unwrap()
            .get(&lane)
            .is_some_and(|a| a.failures > 0);
        let permit = match (listed, failed) {
            (true, false) => Some(self.permit(&self.listed).await?),
            (true, true) => Some(self.permit(&self.failing).await?),
            (false, _) => self.unlisted_permit(),
        };
        Ok(Turn {
            throttle: self.clone(),
            lane,
            permit,
            _account_turn: guard,
        })
    }

    /// One sign-in of `source`'s budget, or 429 until there is one.
    fn take_source(&self, source: &str) -> Result<(), NotNow> {
        let mut sources = self.sources.lock().unwrap();
        if !sources.contains_key(source) && sources.len() >= MAX_SOURCES {
            // Those whose budget is whole again need not be kept.
            sources.retain(|_, b| {
                b.tokens + b.at.elapsed().as_secs_f64() * SOURCE_PER_MINUTE / 60.0 < SOURCE_BURST
            });
        }
        let key = match sources.contains_key(source) || sources.len() < MAX_SOURCES {
            true => source,
            false => OVERFLOW,
        };
        let bucket = sources
            .entry(key.to_owned())
            .or_insert_with(|| Bucket::full(SOURCE_BURST));
        bucket
            .take(SOURCE_BURST, SOURCE_PER_MINUTE / 60.0)
            .map_err(NotNow::TooMany)
    }

    /// Count one more sign-in waiting in the lane of `name` from
    /// `source`: the lane and its turn to wait for.
    fn enter(
        &self,
        name: &str,
        source: &str,
    ) -> Result<(Lane, Arc<tokio::sync::Mutex<()>>), NotNow> {
        let mut accounts = self.accounts.lock().unwrap();
        let mut lane = (name.to_owned(), source.to_owned());
        if !accounts.contains_key(&lane) && accounts.len() >= MAX_NAMES {
            accounts.retain(|_, a| a.waiting > 0 || a.last_failure.elapsed() < FORGET_AFTER);
            if accounts.len() >= MAX_NAMES {
                lane.1 = OVERFLOW.to_owned();
            }
        }
        let account = accounts.entry(lane.clone()).or_insert_with(Account::new);
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
        let turn = account.turn.clone();
        Ok((lane, turn))
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
        lane: &Lane,
        turn: Arc<tokio::sync::Mutex<()>>,
    ) -> tokio::sync::OwnedMutexGuard<()> {
        let guard = turn.lock_owned().await;
        let next = self
            .accounts
            .lock()
            .unwrap()
            .get(lane)
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
        bucket.take(UNLISTED_BURST, UNLISTED_PER_SECOND).is_ok()
    }
}

/// The source a sign-in's budget and lanes are kept by: the client's
/// address as a trusted proxy names it (`--client-address-header`), else
/// the peer's address; an IPv6 address by its /64, which one machine
/// commonly holds whole.
pub(super) fn source(peer: std::net::IpAddr, forwarded: Option<&str>) -> String {
    if let Some(client) = forwarded.map(str::trim).filter(|f| !f.is_empty()) {
        // A list (`X-Forwarded-For`): the client is the first.
        let first = client.split(',').next().unwrap_or(client).trim();
        if let Ok(ip) = first.parse() {
            return source(ip, None);
        }
        return first.chars().take(100).collect();
    }
    match peer {
        std::net::IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
        v4 => v4.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_listed_names_failures_delay_its_next_check_and_success_forgets_them() {
        let throttle = Arc::new(Throttle::default());
        let start = tokio::time::Instant::now();
        throttle.turn("dana", true, "a").await.unwrap().failed();
        throttle.turn("dana", true, "a").await.unwrap().failed();
        // The third waits 2 × FIRST_DELAY after the second failure.
        throttle.turn("dana", true, "a").await.unwrap().succeeded();
        assert!(start.elapsed() >= FIRST_DELAY * 3, "{:?}", start.elapsed());
        // Forgotten: the next one does not wait.
        let before = tokio::time::Instant::now();
        throttle.turn("dana", true, "a").await.unwrap().succeeded();
        assert_eq!(before.elapsed(), Duration::ZERO);
        // Another name is not slowed by dana's failures.
        throttle.turn("dana", true, "a").await.unwrap().failed();
        let before = tokio::time::Instant::now();
        throttle.turn("vic", true, "a").await.unwrap().succeeded();
        assert_eq!(before.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn made_up_names_past_their_budget_are_answered_without_a_check() {
        let throttle = Arc::new(Throttle::default());
        for i in 0..UNLISTED_BURST as usize {
            let turn = throttle
                .turn(&format!("n{i}"), false, &format!("s{i}"))
                .await
                .unwrap();
            assert_eq!(turn.unchecked(), None, "checked against the decoy");
            turn.failed();
        }
        let past = throttle.turn("one-more", false, "b").await.unwrap();
        assert!(past.unchecked().is_some(), "answered without a check");
        tokio::time::advance(Duration::from_secs(1)).await;
        let later = throttle.turn("later", false, "b").await.unwrap();
        assert_eq!(later.unchecked(), None, "the budget refills");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_lane_answers_busy_for_a_listed_name_and_unchecked_for_another() {
        let throttle = Arc::new(Throttle::default());
        let mut held = Vec::new();
        for name in ["dana", "vic", "n0", "n1"] {
            let listed = !name.starts_with('n');
            held.push(throttle.turn(name, listed, name).await.unwrap());
        }
        assert!(held.iter().all(|t| t.unchecked().is_none()));
        let refused = throttle.turn("eve", true, "b").await.err().unwrap();
        assert_eq!(refused, NotNow::Busy(Duration::from_secs(1)));
        let made_up = throttle.turn("n2", false, "b").await.unwrap();
        assert!(made_up.unchecked().is_some());
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn checks_of_sources_that_failed_do_not_take_the_checks_of_others() {
        let throttle = Arc::new(Throttle::default());
        let mut held = Vec::new();
        for source in ["x", "y", "z"] {
            throttle.turn("dana", true, source).await.unwrap().failed();
        }
        for source in ["x", "y"] {
            held.push(throttle.turn("dana", true, source).await.unwrap());
        }
        let busy = throttle.turn("dana", true, "z").await.err().unwrap();
        assert_eq!(busy, NotNow::Busy(Duration::from_secs(1)), "their lane");
        let before = tokio::time::Instant::now();
        throttle.turn("dana", true, "d").await.unwrap().succeeded();
        assert_eq!(before.elapsed(), Duration::ZERO, "dana's is free");
        drop(held);
    }

    #[tokio::test(start_paused = true)]
    async fn one_name_may_have_only_a_few_sign_ins_waiting() {
        let throttle = Arc::new(Throttle::default());
        throttle.turn("dana", true, "a").await.unwrap().failed();
        let waiting: Vec<_> = (0..MAX_WAITING)
            .map(|_| {
                let throttle = throttle.clone();
                tokio::spawn(async move { throttle.turn("dana", true, "a").await.map(drop) })
            })
            .collect();
        tokio::task::yield_now().await;
        let refused = throttle.turn("dana", true, "a").await.err().unwrap();
        assert!(matches!(refused, NotNow::TooMany(_)), "{refused:?}");
        // A made-up name is treated the same.
        throttle.turn("mallory", false, "a").await.unwrap().failed();
        for handle in waiting {
            handle.await.unwrap().unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn strangers_guessing_a_name_fill_their_own_lane_not_its_owners() {
        let throttle = Arc::new(Throttle::default());
        throttle.turn("dana", true, "x").await.unwrap().failed();
        throttle.turn("dana", true, "x").await.unwrap().failed();
        // The stranger's lane is full of waiting guesses.
        let guesses: Vec<_> = (0..MAX_WAITING)
            .map(|_| {
                let throttle = throttle.clone();
                tokio::spawn(async move { throttle.turn("dana", true, "x").await.map(drop) })
            })
            .collect();
        tokio::task::yield_now().await;
        let refused = throttle.turn("dana", true, "x").await.err().unwrap();
        assert!(matches!(refused, NotNow::TooMany(_)), "{refused:?}");
        // Dana, from her own address, is checked at once.
        let before = tokio::time::Instant::now();
        throttle.turn("dana", true, "d").await.unwrap().succeeded();
        assert_eq!(before.elapsed(), Duration::ZERO);
        for guess in guesses {
            guess.await.unwrap().unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_past_its_budget_is_refused_and_others_are_not() {
        let throttle = Arc::new(Throttle::default());
        for i in 0..SOURCE_BURST as usize {
            let turn = throttle.turn(&format!("n{i}"), false, "x").await.unwrap();
            turn.failed();
        }
        let refused = throttle.turn("dana", true, "x").await.err().unwrap();
        assert!(matches!(refused, NotNow::TooMany(_)), "{refused:?}");
        assert!(refused.retry_after() <= 3, "{refused:?}");
        throttle.turn("dana", true, "d").await.unwrap().succeeded();
        tokio::time::advance(Duration::from_secs(3)).await;
        throttle.turn("dana", true, "x").await.unwrap().succeeded();
    }

    #[test]
    fn a_source_is_the_client_an_ipv6_64_or_the_first_forwarded_address() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(source(ip("203.0.113.7"), None), "203.0.113.7");
        assert_eq!(
            source(ip("2001:db8:1:2:aaaa::1"), None),
            source(ip("2001:db8:1:2:bbbb::9"), None)
        );
        assert_eq!(source(ip("2001:db8:1:2::1"), None), "2001:db8:1:2::/64");
        assert_eq!(source(ip("::ffff:198.51.100.4"), None), "198.51.100.4");
        let proxy = ip("10.0.0.1");
        assert_eq!(
            source(proxy, Some("198.51.100.4, 10.0.0.2")),
            "198.51.100.4"
        );
        assert_eq!(source(proxy, Some(" ")), "10.0.0.1");
        assert_eq!(source(proxy, Some("unknown")), "unknown");
    }
}
