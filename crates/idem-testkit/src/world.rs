//! The outside world the simulated tools act on: three providers, the
//! effect ledger they all write to, and the trace of everything that
//! happened in one schedule.
//!
//! The ledger ([`Ledger`]) is the ground truth the checks read: it is
//! written by the providers when they receive a request, never by idem, so
//! a duplicate effect is visible there whatever idem's records say. The
//! world of a schedule keeps it in memory; the world of a worker process
//! keeps it in a file that every worker shares ([`World::shared`]), and
//! its providers then answer from that file (a repeated key, a sent
//! Message-ID) as the in-memory ones answer from memory.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

pub(crate) use crate::ledger::lock;
use crate::ledger::{Entry, Ledger, Provider};

/// Counters of what the simulation observed, beyond the ledger.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Writes the store refused with a stale fence.
    pub(crate) stale_writes_rejected: AtomicU64,
    /// Reconcile hooks that answered Applied or NotApplied.
    pub(crate) reconciled: AtomicU64,
    /// Power cuts that struck.
    pub(crate) power_cuts: AtomicU64,
    /// Claims the power cuts made the store lose (non-durable claims not
    /// yet flushed).
    pub(crate) claims_undone: AtomicU64,
}

/// One schedule's world, or one worker process's view of a shared one.
/// Everything is behind mutexes held for a statement only, never across
/// an await.
#[derive(Debug)]
pub struct World {
    /// Where the schedule's clock started, to stamp trace events.
    start: tokio::time::Instant,
    trace: Mutex<Vec<String>>,
    /// Every request the providers received.
    ledger: Ledger,
    /// Before provider ids, so that the ids of processes that share a
    /// ledger differ (empty in a schedule's world).
    id_prefix: String,
    next_id: AtomicU64,
    /// Tool bodies wait up to this long (at random) before and after they
    /// call their provider, where no fault does it for them.
    pace: Option<Duration>,
    pub(crate) counters: Counters,
}

impl World {
    /// An empty world whose clock starts now (tokio's clock: virtual when
    /// paused), with its ledger in memory.
    pub(crate) fn new() -> Self {
        World::with(Ledger::in_memory(), String::new(), None)
    }

    /// This process's view of a world shared with other processes through
    /// `ledger` (a file), whose tool bodies wait up to `pace` before and
    /// after each provider call.
    pub(crate) fn shared(ledger: Ledger, pace: Duration) -> Self {
        World::with(ledger, format!("{}.", std::process::id()), Some(pace))
    }

    fn with(ledger: Ledger, id_prefix: String, pace: Option<Duration>) -> Self {
        World {
            start: tokio::time::Instant::now(),
            trace: Mutex::new(Vec::new()),
            ledger,
            id_prefix,
            next_id: AtomicU64::new(0),
            pace,
            counters: Counters::default(),
        }
    }

    /// Append an event to the trace, stamped with the schedule's time.
    pub(crate) fn event(&self, what: impl AsRef<str>) {
        let at = self.start.elapsed().as_millis();
        lock(&self.trace).push(format!("{at:>7} {}", what.as_ref()));
    }

    /// A fresh id, for provider ids and Message-IDs. Drawn in the order
    /// the tools run, which paused time makes the same for the same seed.
    pub(crate) fn fresh_id(&self) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{}{n}", self.id_prefix)
    }

    /// A random wait of a tool body, in a world that has a pace.
    pub(crate) async fn pace(&self) {
        if let Some(max) = self.pace {
            let ms = rand::random_range(0..=max.as_millis() as u64);
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }

    /// A request to `provider` that applies `effect` (an effect string
    /// made from the effect's id).
    fn apply(
        &self,
        provider: Provider,
        key: &str,
        subject: &str,
        id: String,
        effect: String,
    ) -> Entry {
        self.event(format!("EFFECT {effect} key={}", short(key)));
        self.ledger.receive(|_| Entry {
            provider,
            key: key.to_owned(),
            subject: subject.to_owned(),
            id,
            effect,
            applied: true,
            pid: std::process::id(),
        })
    }

    /// The payment provider, which honours idempotency keys: a repeated
    /// `Idempotency-Key` returns the first response and applies nothing.
    pub(crate) fn charge(&self, idempotency_key: &str, account: &str, cents: u64) -> Value {
        let entry = self.ledger.receive(|entries| {
            let first = entries.iter().find(|e| {
                e.provider == Provider::Payments && e.key == idempotency_key && e.applied
            });
            let (id, applied) = match first {
                Some(first) => (first.id.clone(), false),
                None => (format!("ch_{}", self.fresh_id()), true),
            };
            Entry {
                provider: Provider::Payments,
                key: idempotency_key.to_owned(),
                subject: account.to_owned(),
                effect: format!("charge {id} {account} {cents}"),
                id,
                applied,
                pid: std::process::id(),
            }
        });
        if entry.applied {
            self.event(format!(
                "EFFECT {} key={}",
                entry.effect,
                short(idempotency_key)
            ));
        } else {
            self.event(format!(
                "payments: repeat of key={} answered from its first response",
                short(idempotency_key)
            ));
        }
        serde_json::json!({ "charge_id": entry.id })
    }

    /// The mailer, which does not honour idempotency keys: every send is an
    /// email. Its sent log (the ledger) is searchable by Message-ID.
    pub(crate) fn send_mail(&self, key: &str, message_id: &str, to: &str) {
        let effect = format!("mail {message_id} to {to}");
        self.apply(Provider::Mailer, key, to, message_id.to_owned(), effect);
    }

    /// Whether the mailer's sent log holds `message_id`.
    pub(crate) fn mail_was_sent(&self, message_id: &str) -> bool {
        self.ledger
            .entries()
            .iter()
            .any(|e| e.provider == Provider::Mailer && e.id == message_id)
    }

    /// The account service: deleting is irreversible and not deduplicated.
    pub(crate) fn delete_account(&self, key: &str, request_id: &str, account: &str) {
        let effect = format!("delete {account} ({request_id})");
        self.apply(
            Provider::Accounts,
            key,
            account,
            request_id.to_owned(),
            effect,
        );
    }

    /// Every request the providers received.
    pub(crate) fn ledger(&self) -> Vec<Entry> {
        self.ledger.entries()
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
