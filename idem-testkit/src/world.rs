//! The outside world the simulated tools act on: three providers, the
//! effect ledger they all write to, and the trace of everything that
//! happened in one schedule.
//!
//! The ledger is the ground truth the checks read: it is written by the
//! providers when an effect *applies*, never by idem, so a duplicate effect
//! is visible there whatever idem's records say.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Counters of what the simulation observed, beyond the ledger.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Writes the store refused with a stale fence.
    pub(crate) stale_writes_rejected: AtomicU64,
    /// Reconcile hooks that answered Applied or NotApplied.
    pub(crate) reconciled: AtomicU64,
}

/// One schedule's world. Everything is behind mutexes held for a statement
/// only, never across an await.
#[derive(Debug)]
pub struct World {
    /// Where the schedule's clock started, to stamp trace events.
    start: tokio::time::Instant,
    trace: Mutex<Vec<String>>,
    /// Idempotency key → the effects applied under it, in order.
    ledger: Mutex<BTreeMap<String, Vec<String>>>,
    /// The payment provider's idempotency table: `Idempotency-Key` → the
    /// first response, returned again for every repeat.
    payments: Mutex<BTreeMap<String, Value>>,
    /// The mailer's sent log (Message-IDs), searchable by reconcile hooks.
    sent: Mutex<Vec<String>>,
    next_id: AtomicU64,
    pub(crate) counters: Counters,
}

impl World {
    /// An empty world whose clock starts now (tokio's clock: virtual when
    /// paused).
    pub(crate) fn new() -> Self {
        World {
            start: tokio::time::Instant::now(),
            trace: Mutex::new(Vec::new()),
            ledger: Mutex::new(BTreeMap::new()),
            payments: Mutex::new(BTreeMap::new()),
            sent: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    /// Append an event to the trace, stamped with the schedule's time.
    pub(crate) fn event(&self, what: impl AsRef<str>) {
        let at = self.start.elapsed().as_millis();
        lock(&self.trace).push(format!("{at:>7} {}", what.as_ref()));
    }

    /// A fresh number, for provider ids and Message-IDs. Drawn in the order
    /// the tools run, which paused time makes the same for the same seed.
    pub(crate) fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn apply(&self, key: &str, effect: String) {
        self.event(format!("EFFECT {effect} key={}", short(key)));
        lock(&self.ledger)
            .entry(key.to_owned())
            .or_default()
            .push(effect);
    }

    /// The payment provider, which honours idempotency keys: a repeated
    /// `Idempotency-Key` returns the first response and applies nothing.
    pub(crate) fn charge(&self, idempotency_key: &str, account: &str, cents: u64) -> Value {
        if let Some(first) = lock(&self.payments).get(idempotency_key) {
            self.event(format!(
                "payments: repeat of key={} answered from its first response",
                short(idempotency_key)
            ));
            return first.clone();
        }
        let id = format!("ch_{}", self.fresh_id());
        let response = serde_json::json!({ "charge_id": id });
        lock(&self.payments).insert(idempotency_key.to_owned(), response.clone());
        self.apply(idempotency_key, format!("charge {id} {account} {cents}"));
        response
    }

    /// The mailer, which does not honour idempotency keys: every send is an
    /// email. It keeps a sent log of Message-IDs.
    pub(crate) fn send_mail(&self, key: &str, message_id: &str, to: &str) {
        lock(&self.sent).push(message_id.to_owned());
        self.apply(key, format!("mail {message_id} to {to}"));
    }

    /// Whether the mailer's sent log holds `message_id`.
    pub(crate) fn mail_was_sent(&self, message_id: &str) -> bool {
        lock(&self.sent).iter().any(|m| m == message_id)
    }

    /// The account service: deleting is irreversible and not deduplicated.
    pub(crate) fn delete_account(&self, key: &str, request_id: &str, account: &str) {
        self.apply(key, format!("delete {account} ({request_id})"));
    }

    /// How many effects applied under `key`.
    pub(crate) fn effects(&self, key: &str) -> usize {
        lock(&self.ledger).get(key).map_or(0, Vec::len)
    }

    /// Keys whose effect the ledger holds more than once, with the effects.
    pub(crate) fn duplicates(&self) -> Vec<(String, Vec<String>)> {
        lock(&self.ledger)
            .iter()
            .filter(|(_, effects)| effects.len() > 1)
            .map(|(key, effects)| (key.clone(), effects.clone()))
            .collect()
    }

    /// The trace so far, and its hash (SHA-256 of the events, one a line).
    pub(crate) fn trace(&self) -> (Vec<String>, String) {
        let trace = lock(&self.trace).clone();
        let mut hash = Sha256::new();
        for line in &trace {
            hash.update(line.as_bytes());
            hash.update(b"\n");
        }
        (trace, hex::encode(&hash.finalize()[..8]))
    }
}

/// The last characters of a key: enough to tell a schedule's keys apart in
/// a trace, short enough to read.
pub(crate) fn short(key: &str) -> &str {
    key.get(key.len().saturating_sub(8)..).unwrap_or(key)
}

/// A poisoned mutex only means another task panicked mid-statement; the
/// simulation's data is still what it was, and the panic is reported
/// anyway.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
