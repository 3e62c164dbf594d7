//! Phase 2, inside one process: concurrent calls of one key share one
//! claim. The first call of a key (the leader) goes to the store; calls of
//! the same key and arguments that arrive while it is under way (the
//! followers) wait for the outcome it records, in memory, and answer from
//! it as duplicates do. When the leader ends without recording an outcome
//! (it released the key, lost its lease, failed to reach the store, or was
//! cancelled), its followers go to the store themselves, so they get the
//! store's answer. A burst of 10,000 duplicates thus costs one claim.
//!
//! The flight is registered before the claim, not after it is won: with a
//! store whose claim takes milliseconds (SQLite's group commit, a remote
//! server), a burst arrives while the first claim is still on its way, and
//! every call of it would reach the store (measured: 19,907 claims for
//! 10,000 calls on SQLite). It costs every keyed call one map insert and
//! removal.
//!
//! The store remains the authority: this only saves round trips between
//! calls that the store would have answered the same way.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use crate::key::{Fingerprint, IdempotencyKey, KeyHashBuilder};
use crate::record::Outcome;

/// The keys being claimed by this executor right now.
#[derive(Default)]
pub(super) struct Flights {
    map: DashMap<IdempotencyKey, Arc<Flight>, KeyHashBuilder>,
    /// How many flights are in the map (or about to enter or leave it):
    /// with none, [`Flights::contains`] answers without hashing the key or
    /// locking a shard. On a store that answers on the caller's thread
    /// (memory), flights are never made, and every call asks.
    live: AtomicUsize,
}

/// One key being claimed: what it is claimed for, and its outcome once
/// recorded.
pub(super) struct Flight {
    tool: &'static str,
    fingerprint: Fingerprint,
    /// `Some(outcome)`: recorded; `None`: the leader ended without one.
    done: OnceLock<Option<Outcome>>,
    notify: tokio::sync::Notify,
}

/// How a call joined the flights.
pub(super) enum Joined<'a> {
    /// The first: claim at the store, and publish the outcome.
    Leader(FlightGuard<'a>),
    /// Another call of the same key and arguments is under way.
    Follower(Arc<Flight>),
    /// The key is under way for other arguments or another tool: go to the
    /// store, which answers with a key-reuse error.
    Apart,
}

impl Flights {
    /// Whether a call of `key` is being claimed by this executor now.
    pub(super) fn contains(&self, key: &IdempotencyKey) -> bool {
        // A flight that starts just after this answer is missed either way:
        // the map's answer, too, may be out of date by the time it is used.
        self.live.load(Ordering::Acquire) != 0 && self.map.contains_key(key)
    }

    /// Join the flight of `key`, or start it.
    pub(super) fn join(
        &self,
        key: &IdempotencyKey,
        tool: &'static str,
        fingerprint: &Fingerprint,
    ) -> Joined<'_> {
        match self.map.entry(key.clone()) {
            Entry::Occupied(e) => {
                let flight = e.get();
                if flight.tool == tool && flight.fingerprint == *fingerprint {
                    Joined::Follower(flight.clone())
                } else {
                    Joined::Apart
                }
            }
            Entry::Vacant(v) => {
                let flight = Arc::new(Flight {
                    tool,
                    fingerprint: fingerprint.clone(),
                    done: OnceLock::new(),
                    notify: tokio::sync::Notify::new(),
                });
                self.live.fetch_add(1, Ordering::AcqRel);
                v.insert(flight.clone());
                Joined::Leader(FlightGuard {
                    flights: self,
                    key: key.clone(),
                    flight,
                })
            }
        }
    }
}

impl Flight {
    /// The outcome, once the leader recorded one or ended without.
    pub(super) async fn landed(&self) -> Option<&Outcome> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before `done` is read, so a publication between
            // the read and the await still wakes this follower.
            notified.as_mut().enable();
            if let Some(done) = self.done.get() {
                return done.as_ref();
            }
            notified.await;
        }
    }

    /// The outcome if it already landed.
    pub(super) fn try_landed(&self) -> Option<Option<&Outcome>> {
        self.done.get().map(Option::as_ref)
    }

    fn land(&self, outcome: Option<Outcome>) {
        if self.done.set(outcome).is_ok() {
            self.notify.notify_waiters();
        }
    }
}

/// The leader's hold on a flight: publishes the recorded outcome, and on
/// drop (however the leader ends) releases the followers and the key.
pub(super) struct FlightGuard<'a> {
    flights: &'a Flights,
    key: IdempotencyKey,
    flight: Arc<Flight>,
}

impl FlightGuard<'_> {
    /// The leader recorded `outcome` (or found it recorded).
    pub(super) fn publish(&self, outcome: &Outcome) {
        // The map and this guard hold two references; more are followers.
        // Without followers the copy is not worth making.
        if Arc::strong_count(&self.flight) > 2 {
            self.flight.land(Some(outcome.clone()));
        }
    }
}

impl Drop for FlightGuard<'_> {
    fn drop(&mut self) {
        self.flights
            .map
            .remove_if(&self.key, |_, f| Arc::ptr_eq(f, &self.flight));
        self.flights.live.fetch_sub(1, Ordering::AcqRel);
        // Followers still waiting go to the store themselves.
        self.flight.land(None);
    }
}
