//! Records to rows and back: a record's row read and decoded, a record
//! encoded and written; and the completed records a store read recently,
//! kept decoded.
//!
//! # Decoded records
//!
//! The completed records a store read recently, decoded, each with the
//! bytes it was decoded from.
//!
//! Decoding a record's JSON is most of what answering a duplicate from
//! SQLite costs once the row is read. A replayed run asks for the same
//! completed records again, and they do not change: the row is still read
//! every time (another process, or an operator, may have changed or
//! deleted it), but when its bytes are the bytes decoded last time, the
//! decoded record is handed out again instead of being decoded anew. A
//! record is only ever answered from bytes equal to the row's, so the cache
//! can be stale without being wrong.
//!
//! When the budget is spent, a record picked at random makes room, not the
//! oldest: a replay that cycles through more records than fit would find
//! none of them under first-in-first-out (each is dropped just before it is
//! read again), and finds a share in proportion to the budget this way.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension};

use idem_runtime::clock::Timestamp;
use idem_runtime::key::{IdempotencyKey, KeyHashBuilder};
use idem_runtime::record::{CorruptRecord, Record};
use idem_runtime::store::StoreError;

/// Read and decode the record of `key`, expired or not. A row that does not
/// decode is a [`StoreError::Corrupt`] — never treated as absent.
pub(super) fn load(
    conn: &Connection,
    key: &IdempotencyKey,
) -> rusqlite::Result<Result<Option<Record>, StoreError>> {
    load_with(conn, key, |bytes| Record::from_bytes(key.as_str(), bytes))
}

/// Read the row of `key` and decode it with `decode`.
pub(super) fn load_with<T>(
    conn: &Connection,
    key: &IdempotencyKey,
    decode: impl FnOnce(&[u8]) -> Result<T, CorruptRecord>,
) -> rusqlite::Result<Result<Option<T>, StoreError>> {
    // Decoded from SQLite's own buffer, without copying the blob out first.
    let record = conn
        .prepare_cached("SELECT record FROM idem_records WHERE key = ?1")?
        .query_row([key.as_str()], |row| Ok(decode(row.get_ref(0)?.as_blob()?)))
        .optional()?;
    Ok(record.transpose().map_err(StoreError::from))
}

pub(super) fn store(conn: &Connection, record: &Record) -> rusqlite::Result<()> {
    store_bytes(conn, record, &record.to_bytes())
}

/// Write `record`, encoded as `bytes`, with the columns read from it: its
/// expiry, and `open_at`, its creation time while it is open
/// ([`Record::is_open`]; `NULL` once it settles), which puts it in the
/// index of open records.
pub(super) fn store_bytes(
    conn: &Connection,
    record: &Record,
    bytes: &[u8],
) -> rusqlite::Result<()> {
    let expires_at = record.expires_at().map(millis);
    let open_at = record.is_open().then(|| millis(record.created_at));
    conn.prepare_cached(
        "INSERT INTO idem_records (key, expires_at, record, open_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at,
             record = excluded.record, open_at = excluded.open_at",
    )?
    .execute(rusqlite::params![
        record.key.as_str(),
        expires_at,
        bytes,
        open_at
    ])?;
    Ok(())
}

pub(super) fn millis(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

/// Records larger than this are decoded every time: keeping them would
/// cost more memory than decoding them again costs time.
pub(super) const MAX_RECORD_BYTES: usize = 16 * 1024;

/// Decoded completed records costing up to `budget` bytes in all.
pub(super) struct DecodedRecords {
    budget: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<IdempotencyKey, Entry, KeyHashBuilder>,
    /// The keys of `entries`, each at its entry's `slot`: where a record to
    /// drop is picked from.
    keys: Vec<IdempotencyKey>,
    /// What the entries cost, by [`cost`].
    used: usize,
}

struct Entry {
    slot: usize,
    bytes: Box<[u8]>,
    record: Arc<Record>,
}

/// What keeping a record read from `len` bytes costs: the bytes, and about
/// as much again for the decoded record (the same strings, unescaped, in
/// their own allocations), plus the entry itself.
fn cost(len: usize) -> usize {
    2 * len + 256
}

impl DecodedRecords {
    /// A cache of records costing up to `budget` bytes; 0 keeps none.
    pub(super) fn new(budget: usize) -> Self {
        DecodedRecords {
            budget,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The record `bytes`, read under `key`, decode to.
    pub(super) fn decode(
        &self,
        key: &IdempotencyKey,
        bytes: &[u8],
    ) -> Result<Arc<Record>, CorruptRecord> {
        let cacheable = self.fits(bytes.len());
        if cacheable {
            let inner = self.inner.lock().expect("not poisoned");
            if let Some(entry) = inner.entries.get(key) {
                if *entry.bytes == *bytes {
                    return Ok(entry.record.clone());
                }
            }
        }
        let record = Arc::new(Record::from_bytes(key.as_str(), bytes)?);
        // Only completed records: they are what duplicates read again, and
        // they change only by an operator's hand.
        if cacheable && record.outcome().is_some() {
            self.keep(key, bytes.into(), record.clone());
        }
        Ok(record)
    }

    /// Keep `record`, just written as `bytes`, if it is completed: the
    /// first duplicate of a call completed in this process then decodes
    /// nothing either. Called before the write commits; should the
    /// transaction roll back, the row does not hold these bytes and the
    /// record is never answered.
    pub(super) fn written(&self, key: &IdempotencyKey, bytes: Vec<u8>, record: Record) {
        if self.fits(bytes.len()) && record.outcome().is_some() {
            self.keep(key, bytes.into_boxed_slice(), Arc::new(record));
        }
    }

    fn fits(&self, len: usize) -> bool {
        len <= MAX_RECORD_BYTES && cost(len) <= self.budget
    }

    fn keep(&self, key: &IdempotencyKey, bytes: Box<[u8]>, record: Arc<Record>) {
        // Keys are SHA-256 digests: their hash is as good as a random pick.
        let mut pick = KeyHashBuilder.hash_one(key);
        let mut dropped = Vec::new();
        let mut inner = self.inner.lock().expect("not poisoned");
        let inner = &mut *inner;
        inner.used += cost(bytes.len());
        if let Some(entry) = inner.entries.get_mut(key) {
            // The row changed since it was cached.
            inner.used -= cost(entry.bytes.len());
            dropped.push(std::mem::replace(&mut entry.bytes, bytes));
            entry.record = record;
        } else {
            let slot = inner.keys.len();
            inner.keys.push(key.clone());
            let entry = Entry {
                slot,
                bytes,
                record,
            };
            inner.entries.insert(key.clone(), entry);
        }
        while inner.used > self.budget && !inner.keys.is_empty() {
            pick = pick
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let mut slot = (pick >> 33) as usize % inner.keys.len();
            if inner.keys[slot] == *key {
                // Not the record just kept: it fits the budget on its own.
                slot = (slot + 1) % inner.keys.len();
            }
            let victim = inner.keys.swap_remove(slot);
            if let Some(moved) = inner.keys.get(slot) {
                inner
                    .entries
                    .get_mut(moved)
                    .expect("every key has its entry")
                    .slot = slot;
            }
            let old = inner
                .entries
                .remove(&victim)
                .expect("every key has its entry");
            inner.used -= cost(old.bytes.len());
            dropped.push(old.bytes);
        }
        // What was dropped is freed after the lock is let go.
    }

    /// How many records are kept, and what they cost.
    #[cfg(test)]
    fn len(&self) -> usize {
        let inner = self.inner.lock().expect("not poisoned");
        assert_eq!(inner.entries.len(), inner.keys.len());
        for (slot, key) in inner.keys.iter().enumerate() {
            assert_eq!(inner.entries[key].slot, slot);
        }
        let used: usize = inner.entries.values().map(|e| cost(e.bytes.len())).sum();
        assert_eq!(inner.used, used);
        assert!(inner.used <= self.budget);
        inner.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use idem_runtime::clock::Timestamp;
    use idem_runtime::key::Fingerprint;
    use idem_runtime::record::{CallInfo, Fence, Outcome, OutputJson, RecordState};

    fn key(n: u8) -> IdempotencyKey {
        IdempotencyKey::parse(&format!("{n:02x}").repeat(32)).unwrap()
    }

    fn completed(key: &IdempotencyKey, output: &str) -> Record {
        Record {
            key: key.clone(),
            tool: "send_email".into(),
            fingerprint: Fingerprint::new("cd".repeat(32)),
            created_at: Timestamp(5),
            state: RecordState::Completed {
                fence: Fence(1),
                outcome: Outcome::Success {
                    output: OutputJson::new(output).unwrap(),
                },
                completed_at: Timestamp(6),
                expires_at: Timestamp(9),
            },
            steps: BTreeMap::new(),
            info: CallInfo::default(),
            worker: None,
            audit: Vec::new(),
        }
    }

    #[test]
    fn the_same_bytes_answer_the_same_record_and_changed_bytes_a_new_one() {
        let cache = DecodedRecords::new(1 << 20);
        let k = key(1);
        let first = completed(&k, "sent").to_bytes();
        let a = cache.decode(&k, &first).unwrap();
        let b = cache.decode(&k, &first).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the second read decodes nothing");

        // An operator rewrote the row: its new bytes are decoded, never
        // answered from the old record.
        let second = completed(&k, "resent").to_bytes();
        let c = cache.decode(&k, &second).unwrap();
        assert_eq!(*c, completed(&k, "resent"));
        assert!(Arc::ptr_eq(&c, &cache.decode(&k, &second).unwrap()));
        assert_eq!(*cache.decode(&k, &first).unwrap(), completed(&k, "sent"));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn the_cache_stays_within_its_budget_and_keeps_a_share_of_a_cycle_too_large_for_it() {
        let bytes: Vec<_> = (0..96)
            .map(|n| completed(&key(n), "sent").to_bytes())
            .collect();
        // Room for 64 records of 96.
        let cache = DecodedRecords::new(64 * cost(bytes[0].len()));
        let mut hits = 0;
        for round in 0..5 {
            for n in 0..96u8 {
                let k = key(n);
                let kept = cache.inner.lock().unwrap().entries.contains_key(&k);
                let before = cache.decode(&k, &bytes[usize::from(n)]).unwrap();
                let again = cache.decode(&k, &bytes[usize::from(n)]).unwrap();
                assert!(Arc::ptr_eq(&before, &again), "a record just read is kept");
                hits += usize::from(round > 0 && kept);
            }
            assert_eq!(cache.len(), 64);
        }
        // First-in-first-out would find none of the cycle's records still
        // kept when it comes back to them; a random pick finds some 40%
        // (each read of another record that is not kept drops one).
        let reads = 4 * 96;
        assert!(
            hits > reads / 5 && hits < reads * 2 / 3,
            "{hits} of {reads}"
        );
    }

    #[test]
    fn a_completed_record_written_is_answered_without_decoding() {
        let cache = DecodedRecords::new(1 << 20);
        let k = key(1);
        let record = completed(&k, "sent");
        let bytes = record.to_bytes();
        cache.written(&k, bytes.clone(), record.clone());
        let inner = cache.inner.lock().unwrap();
        let kept = inner.entries[&k].record.clone();
        drop(inner);
        assert!(Arc::ptr_eq(&kept, &cache.decode(&k, &bytes).unwrap()));
        assert_eq!(*kept, record);

        // In flight: not kept.
        let other = key(2);
        let mut in_flight = completed(&other, "sent");
        in_flight.state = RecordState::InFlight {
            fence: Fence(1),
            lease_until: Timestamp(7),
        };
        cache.written(&other, in_flight.to_bytes(), in_flight);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn records_in_flight_large_records_and_garbage_are_not_kept() {
        let cache = DecodedRecords::new(1 << 20);
        let k = key(1);
        let mut record = completed(&k, "sent");
        record.state = RecordState::InFlight {
            fence: Fence(1),
            lease_until: Timestamp(7),
        };
        let bytes = record.to_bytes();
        let a = cache.decode(&k, &bytes).unwrap();
        assert!(!Arc::ptr_eq(&a, &cache.decode(&k, &bytes).unwrap()));

        let large = completed(&k, &"x".repeat(MAX_RECORD_BYTES)).to_bytes();
        cache.decode(&k, &large).unwrap();
        assert_eq!(cache.len(), 0);

        let err = cache.decode(&k, b"{not json").unwrap_err();
        assert_eq!(err.key, k.as_str());
        assert_eq!(cache.len(), 0);

        let none = DecodedRecords::new(0);
        let bytes = completed(&k, "sent").to_bytes();
        let a = none.decode(&k, &bytes).unwrap();
        assert!(!Arc::ptr_eq(&a, &none.decode(&k, &bytes).unwrap()));
    }
}
