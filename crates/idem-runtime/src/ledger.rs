//! idem's own records in a store: the bookkeeping that features keep
//! beside the calls, under tool names no tool may take.
//!
//! A repeat window's index, the inbox's sessions and revocations, a
//! webhook's deliveries and its cursor into the audit log are each a small
//! record that every worker on the store must agree on and that outlives
//! restarts. They are records like a call's, so they get a call's
//! guarantees for free — one owner at a time under a fenced lease, a
//! compare-and-swap that refuses a stale writer, expiry by the sweeper —
//! and this module is the one way to keep them:
//!
//! * [`names`]: every reserved tool name, in one list.
//! * [`key`]: a key made of parts (a domain and its values).
//! * [`Ledger`]: one book (one reserved tool) on a store, with the few
//!   operations the features need: [`get`](Ledger::get) a value,
//!   [`create`](Ledger::create) it once, [`swap`](Ledger::swap) it when it
//!   is as read, and [`claim`](Ledger::claim) an entry once to work on it,
//!   [`renew`](Ledger::renew) its lease and [`complete`](Ledger::complete)
//!   it.
//!
//! Records whose tool carries the reserved prefix are bookkeeping
//! ([`Record::is_bookkeeping`]): operators' listings and counts leave them
//! out.
//!
//! ```
//! use std::time::Duration;
//!
//! use idem_runtime::ledger::{self, Ledger};
//! use idem_runtime::store::MemoryStore;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let book = Ledger::new(&store, ledger::names::NOTIFY_CURSOR);
//! let key = ledger::key(&["example-cursor/v1", "endpoint-1"]);
//! let ttl = Duration::from_secs(3600);
//! let made = serde_json::json!({ "cursor": "endpoint-1" });
//!
//! assert!(book.create(&key, &made, &5u64, ttl).await.unwrap());
//! assert!(!book.create(&key, &made, &9u64, ttl).await.unwrap(), "made once");
//! let entry = book.get::<u64>(&key).await.unwrap().unwrap();
//! assert_eq!(entry.value, 5);
//! assert!(book.swap(&entry, &6u64, ttl).await.unwrap());
//! assert!(!book.swap(&entry, &7u64, ttl).await.unwrap(), "a stale read swaps nothing");
//! assert_eq!(book.get::<u64>(&key).await.unwrap().unwrap().value, 6);
//! # });
//! ```

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::clock::{Clock, SystemClock, Timestamp};
use crate::key::{CanonicalArgs, Fingerprint, IdempotencyKey};
use crate::record::{
    CallInfoRef, CorruptRecord, Fence, Outcome, OutputJson, Record, RecordState,
    RESERVED_STEP_PREFIX,
};
use crate::store::{
    ClaimOutcome, ClaimRequest, Expected, ExpectedState, Store, StoreError, StoreExt,
};

/// The reserved tool names: every record idem keeps for itself carries one
/// of these (they all start with [`PREFIX`](names::PREFIX)).
pub mod names {
    pub use crate::record::RESERVED_STEP_PREFIX as PREFIX;

    /// The sessions of `idem serve`'s inbox, one record per session.
    pub const SESSION: &str = "idem:session";
    /// A person's revocation of their sessions: those started before it
    /// are over.
    pub const SESSIONS_REVOKED: &str = "idem:sessions-revoked";
    /// The inbox's own audit events (sign-ins, sign-outs, refusals).
    pub const INBOX: &str = "idem:inbox";
    /// A delivery of one decision to one webhook endpoint.
    pub const NOTIFY: &str = "idem:notify";
    /// A webhook endpoint's cursor into the audit log.
    pub const NOTIFY_CURSOR: &str = "idem:notify:cursor";
    /// The approval rules in force on the store (one record).
    pub const APPROVAL_RULES: &str = "idem:approval-rules";

    /// The repeat-window index of `tool` (`idem:window:TOOL`).
    pub fn window_index(tool: &str) -> String {
        format!("{PREFIX}window:{tool}")
    }

    /// Whether `tool` is a reserved name (idem's bookkeeping, never a
    /// tool's).
    pub fn is_reserved(tool: &str) -> bool {
        tool.starts_with(PREFIX)
    }
}

/// The key made of `parts`: the SHA-256 of each part's length (8 bytes,
/// big-endian) and bytes, in order. The first part names what the key is
/// for and its version (`"idem-notify-delivery/v1"`), so that keys of
/// different books never meet.
///
/// ```
/// let a = idem_runtime::ledger::key(&["demo/v1", "ab", "c"]);
/// let b = idem_runtime::ledger::key(&["demo/v1", "a", "bc"]);
/// assert_ne!(a, b, "the lengths are part of the key");
/// ```
pub fn key(parts: &[&str]) -> IdempotencyKey {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    IdempotencyKey::from_digest(&hash.finalize().into())
}

/// A value of a book, as read: what [`Ledger::swap`] compares against.
#[derive(Debug, Clone)]
pub struct Entry<T> {
    /// The value.
    pub value: T,
    record: Record,
}

impl<T> Entry<T> {
    /// The record the value was read from.
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// When the value was last written.
    pub fn written_at(&self) -> Option<Timestamp> {
        match self.record.state {
            RecordState::Completed { completed_at, .. } => Some(completed_at),
            _ => None,
        }
    }
}

/// What [`Ledger::claim`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The caller owns the entry under `fence` and does the work, then
    /// [`complete`](Ledger::complete)s it; `takeover` when an owner before
    /// it vanished without completing (the work may have been done).
    Owned {
        /// The fence to renew and complete with.
        fence: Fence,
        /// A previous owner's lease ran out.
        takeover: bool,
    },
    /// Another owner works on it now.
    Elsewhere,
    /// It was completed before.
    Done,
}

/// One book of idem's own records on a store: the records of one reserved
/// tool. See the [module docs](self).
#[derive(Debug, Clone, Copy)]
pub struct Ledger<'a> {
    store: &'a dyn Store,
    tool: &'a str,
    namespace: Option<&'a str>,
    worker: Option<&'a str>,
    lease: Duration,
    clock: &'a dyn Clock,
}

impl<'a> Ledger<'a> {
    /// The book of records named `tool` (one of [`names`]) on `store`.
    /// Claims hold a 60-second lease unless [`lease`](Ledger::lease) says
    /// otherwise.
    ///
    /// # Panics
    ///
    /// When `tool` is not a reserved name: a book never takes a tool's
    /// name.
    pub fn new(store: &'a dyn Store, tool: &'a str) -> Self {
        assert!(
            names::is_reserved(tool),
            "a ledger's tool `{tool}` must start with `{RESERVED_STEP_PREFIX}`"
        );
        Ledger {
            store,
            tool,
            namespace: None,
            worker: None,
            lease: Duration::from_secs(60),
            clock: &SystemClock,
        }
    }

    /// The clock a swap dates the new value by (the system's, unless the
    /// caller keeps another: the executor's).
    pub fn clock(mut self, clock: &'a dyn Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Record the entries this book creates under `namespace`.
    pub fn namespace(mut self, namespace: &'a str) -> Self {
        self.namespace = Some(namespace);
        self
    }

    /// Record `worker` as the owner of the entries this book claims.
    pub fn worker(mut self, worker: &'a str) -> Self {
        self.worker = Some(worker);
        self
    }

    /// How long a claim is held before another may take it over.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The book's tool name.
    pub fn tool(&self) -> &'a str {
        self.tool
    }

    /// The value under `key`: `None` when there is none, or when the
    /// record is in flight (being created or worked on); an error when the
    /// record is another tool's or its value does not read as a `T`.
    pub async fn get<T: DeserializeOwned>(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<Entry<T>>, StoreError> {
        let Some(record) = self.store.get(key).await? else {
            return Ok(None);
        };
        if matches!(record.state, RecordState::InFlight { .. }) {
            return Ok(None);
        }
        self.read(record).map(Some)
    }

    /// The value of a completed `record` of this book.
    pub fn read<T: DeserializeOwned>(&self, record: Record) -> Result<Entry<T>, StoreError> {
        if record.tool != self.tool {
            return Err(self.corrupt(&record.key, "its key holds another record"));
        }
        let RecordState::Completed {
            outcome: Outcome::Success { output },
            ..
        } = &record.state
        else {
            return Err(self.corrupt(&record.key, "it is not a completed value"));
        };
        match output.parse() {
            Ok(value) => Ok(Entry { value, record }),
            Err(e) => Err(self.corrupt(&record.key, &e.to_string())),
        }
    }

    /// Create the value under `key`, kept `ttl`, unless the key is taken:
    /// `true` when this call made it. `made_of` says what the value is
    /// about (its fingerprint is recorded, as a call's arguments are).
    pub async fn create<T: Serialize>(
        &self,
        key: &IdempotencyKey,
        made_of: &Value,
        value: &T,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        match self.claim(key, made_of, ttl).await? {
            Claim::Owned { fence, .. } => {
                self.complete(key, fence, &success(value), ttl).await?;
                Ok(true)
            }
            Claim::Elsewhere | Claim::Done => Ok(false),
        }
    }

    /// Swap the value `entry` was read with for `value`, kept `ttl` from
    /// now: `false` (and nothing changed) when the record changed since it
    /// was read.
    pub async fn swap<T: Serialize, U>(
        &self,
        entry: &Entry<U>,
        value: &T,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.swap_until(entry, value, Some(ttl)).await
    }

    /// [`swap`](Ledger::swap), keeping the record's expiry when `ttl` is
    /// `None`.
    pub async fn swap_until<T: Serialize, U>(
        &self,
        entry: &Entry<U>,
        value: &T,
        ttl: Option<Duration>,
    ) -> Result<bool, StoreError> {
        let record = &entry.record;
        let RecordState::Completed {
            fence,
            completed_at,
            expires_at,
            ..
        } = record.state
        else {
            return Err(self.corrupt(&record.key, "it is not a completed value"));
        };
        let now = self.clock.now();
        let mut new = record.clone();
        new.state = RecordState::Completed {
            fence,
            outcome: success(value),
            completed_at: if ttl.is_some() { now } else { completed_at },
            expires_at: ttl.map_or(expires_at, |ttl| now.plus(ttl)),
        };
        let expected = Expected {
            fence,
            state: ExpectedState::Completed,
        };
        match self
            .store
            .replace(&record.key, expected, Some(&new), None)
            .await
        {
            Ok(_) => Ok(true),
            Err(StoreError::StaleFence { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Delete the value `entry` was read with: `false` (and nothing
    /// deleted) when the record changed since it was read.
    pub async fn delete<U>(&self, entry: &Entry<U>) -> Result<bool, StoreError> {
        let expected = Expected {
            fence: entry.record.fence(),
            state: ExpectedState::Completed,
        };
        match self
            .store
            .replace(&entry.record.key, expected, None, None)
            .await
        {
            Ok(_) => Ok(true),
            Err(StoreError::StaleFence { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Claim the entry under `key` once, to work on it under a lease (see
    /// [`Claim`]); a completed entry is kept `ttl`. `made_of` as for
    /// [`create`](Ledger::create). The claim is durable: a claim forgotten
    /// in a crash would be the work done twice.
    pub async fn claim(
        &self,
        key: &IdempotencyKey,
        made_of: &Value,
        ttl: Duration,
    ) -> Result<Claim, StoreError> {
        let fingerprint = fingerprint(made_of);
        let request = ClaimRequest {
            key,
            tool: self.tool,
            fingerprint: &fingerprint,
            check_fingerprint: true,
            lease: self.lease,
            info: CallInfoRef {
                namespace: self.namespace,
                ttl: Some(ttl),
                ..CallInfoRef::EMPTY
            },
            worker: self.worker,
            durable: true,
        };
        Ok(match self.store.claim(&request).await? {
            ClaimOutcome::Acquired {
                fence, takeover, ..
            } => Claim::Owned {
                fence,
                takeover: takeover.is_some(),
            },
            ClaimOutcome::InFlight { .. } => Claim::Elsewhere,
            ClaimOutcome::Completed(_) => Claim::Done,
            ClaimOutcome::AwaitingApproval(_) | ClaimOutcome::KeyReused { .. } => {
                return Err(self.corrupt(key, "its key holds another record"))
            }
        })
    }

    /// Keep the claim of `key` under `fence` for another lease;
    /// [`StoreError::StaleFence`] when another owner took it over (stop).
    pub async fn renew(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        self.store.renew(key, fence, self.lease).await
    }

    /// Complete the claim of `key` under `fence` with `outcome`, kept
    /// `ttl`.
    pub async fn complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.store.complete(key, fence, outcome, ttl).await
    }

    /// The error for a record of this book that does not read.
    pub fn corrupt(&self, key: &IdempotencyKey, why: &str) -> StoreError {
        StoreError::Corrupt(CorruptRecord {
            key: key.to_string(),
            detail: format!("a record of `{}` is unreadable: {why}", self.tool),
        })
    }
}

/// The successful outcome holding `value`.
pub fn success<T: Serialize>(value: &T) -> Outcome {
    Outcome::Success {
        output: OutputJson::new(value).expect("a ledger's value serializes to JSON"),
    }
}

fn fingerprint(made_of: &Value) -> Fingerprint {
    CanonicalArgs::from_value(made_of)
        .expect("a ledger entry is made of a JSON object")
        .fingerprint
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::clock::ManualClock;
    use crate::store::MemoryStore;

    const HOUR: Duration = Duration::from_secs(3600);

    #[tokio::test]
    async fn an_entry_is_worked_on_by_one_owner_and_taken_over_only_after_its_lease() {
        let clock = ManualClock::new(1_000);
        let store = MemoryStore::with_clock(Arc::new(clock.clone()));
        let book = Ledger::new(&store, names::NOTIFY).lease(Duration::from_secs(10));
        let key = key(&["test-delivery/v1", "endpoint", "event"]);
        let made_of = json!({ "event": "e" });

        let Claim::Owned { fence, takeover } = book.claim(&key, &made_of, HOUR).await.unwrap()
        else {
            panic!("the first claim owns the entry");
        };
        assert!(!takeover);
        assert_eq!(
            book.claim(&key, &made_of, HOUR).await.unwrap(),
            Claim::Elsewhere
        );
        book.renew(&key, fence).await.unwrap();

        clock.advance(Duration::from_secs(11));
        let Claim::Owned {
            fence: newer,
            takeover,
        } = book.claim(&key, &made_of, HOUR).await.unwrap()
        else {
            panic!("a vanished owner's entry is taken over");
        };
        assert!(takeover);
        assert!(matches!(
            book.renew(&key, fence).await,
            Err(StoreError::StaleFence { .. })
        ));
        book.complete(&key, newer, &success(&1), HOUR)
            .await
            .unwrap();
        assert_eq!(book.claim(&key, &made_of, HOUR).await.unwrap(), Claim::Done);
    }

    #[tokio::test]
    async fn another_books_record_under_the_key_is_corrupt_never_read_as_this_one() {
        let store = MemoryStore::new();
        let sessions = Ledger::new(&store, names::SESSION);
        let cursors = Ledger::new(&store, names::NOTIFY_CURSOR);
        let key = key(&["shared/v1", "k"]);
        assert!(sessions
            .create(&key, &json!({ "tool": "s" }), &"dana", HOUR)
            .await
            .unwrap());
        assert!(matches!(
            cursors.get::<u64>(&key).await,
            Err(StoreError::Corrupt(_))
        ));
        // A value that does not read as the type asked for is corrupt too.
        assert!(matches!(
            sessions.get::<u64>(&key).await,
            Err(StoreError::Corrupt(_))
        ));
    }

    #[tokio::test]
    async fn a_delete_happens_only_while_the_entry_is_as_read() {
        let store = MemoryStore::new();
        let book = Ledger::new(&store, names::SESSION);
        let key = key(&["delete/v1", "k"]);
        book.create(&key, &json!({}), &1u8, HOUR).await.unwrap();
        let read = book.get::<u8>(&key).await.unwrap().unwrap();
        assert!(book.swap_until(&read, &2u8, None).await.unwrap());
        assert!(
            !book.delete(&read).await.unwrap(),
            "a stale read deletes nothing"
        );
        let now = book.get::<u8>(&key).await.unwrap().unwrap();
        assert_eq!(now.value, 2);
        assert!(book.delete(&now).await.unwrap());
        assert!(book.get::<u8>(&key).await.unwrap().is_none());
    }

    #[test]
    #[should_panic(expected = "must start with `idem:`")]
    fn a_book_never_takes_a_tools_name() {
        let store = MemoryStore::new();
        let _ = Ledger::new(&store, "send_email");
    }
}
