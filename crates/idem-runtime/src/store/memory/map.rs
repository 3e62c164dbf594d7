//! The memory store's map: one boxed [`Entry`] per key, in [`SHARDS`]
//! hash tables each behind its own lock, found by the key's first 64
//! bits. Keys are SHA-256 digests, so those bits are already uniform: they
//! pick the shard and are the hash, and nothing is rehashed.

use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;
use tokio::sync::Notify;

use super::lean::Lean;
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::{Fence, Record};
use crate::store::{transition, FenceHolder, StoreError};

/// How many shards the records are split over. A write holds one shard's
/// lock, and anything that walks the map (a scan, a close) holds one
/// shard's read lock at a time: with a million records, 256 shards keep a
/// claim's wait behind such a walk near a millisecond (8, dashmap's
/// default on two cores, made it some 33 ms).
pub(super) const SHARDS: usize = 256;

/// A key as the map finds it: its digest, and the digest's first 64 bits.
#[derive(Debug, Clone, Copy)]
pub(super) struct Id {
    pub(super) bits: u64,
    digest: [u8; 32],
}

impl Id {
    /// The id of `key`.
    pub(super) fn of(key: &IdempotencyKey) -> Id {
        Id {
            bits: key.bits(),
            digest: key.digest(),
        }
    }

    /// The id of the key whose digest is `digest`.
    pub(super) fn of_digest(digest: &[u8; 32]) -> Id {
        Id {
            bits: bits_of(digest),
            digest: *digest,
        }
    }
}

/// What the map holds under a key.
#[derive(Debug)]
pub(super) struct Entry {
    /// The key, as its digest (half its text's size).
    key: [u8; 32],
    /// Woken when the record completes, is released or replaced (an
    /// approval, a denial); made by the first waiter, so calls nobody
    /// waits for allocate none.
    pub(super) changed: Option<Arc<Notify>>,
    pub(super) body: Body,
}

/// A record, compact ([`Lean`]) when it has the common shape, whole
/// otherwise.
#[derive(Debug)]
pub(super) enum Body {
    /// The common shape.
    Lean(Lean),
    /// Any other record: steps, audit entries, awaiting approval, a
    /// fingerprint that is not a digest, very long texts.
    Full(Arc<Record>),
}

impl Entry {
    /// The entry of `id` holding `body`, with no waiters yet.
    pub(super) fn new(id: &Id, body: Body) -> Box<Entry> {
        Box::new(Entry {
            key: id.digest,
            changed: None,
            body,
        })
    }

    /// The key's first 64 bits: its hash.
    fn bits(&self) -> u64 {
        bits_of(&self.key)
    }

    /// The key.
    pub(super) fn key(&self) -> IdempotencyKey {
        IdempotencyKey::from_digest(&self.key)
    }

    /// The key's digest (in the order of the keys' text).
    pub(super) fn digest(&self) -> &[u8; 32] {
        &self.key
    }

    /// Wake the key's waiters, if it has any.
    pub(super) fn wake(&self) {
        if let Some(changed) = &self.changed {
            changed.notify_waiters();
        }
    }
}

impl Body {
    /// `record` as the map holds it: compact when it can be.
    pub(super) fn of(record: Record) -> Body {
        match Lean::of(&record) {
            Some(lean) => Body::Lean(lean),
            None => Body::Full(Arc::new(record)),
        }
    }

    /// The record, under `key` (its own).
    pub(super) fn to_record(&self, key: IdempotencyKey) -> Record {
        match self {
            Body::Lean(lean) => lean.to_record(key),
            Body::Full(record) => Record::clone(record),
        }
    }

    /// The record shared, under `key` (its own).
    pub(super) fn to_arc(&self, key: IdempotencyKey) -> Arc<Record> {
        match self {
            Body::Lean(lean) => Arc::new(lean.to_record(key)),
            Body::Full(record) => record.clone(),
        }
    }

    /// [`Record::expires_at`].
    pub(super) fn expires_at(&self) -> Option<Timestamp> {
        match self {
            Body::Lean(lean) => lean.expires_at(),
            Body::Full(record) => record.expires_at(),
        }
    }

    /// [`Record::is_expired`].
    pub(super) fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at().is_some_and(|at| at <= now)
    }

    /// [`transition::check_owner`] of this record.
    pub(super) fn check_owner(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        match self {
            Body::Lean(lean) if lean.owned_by(fence) => Ok(()),
            Body::Lean(lean) => Err(StoreError::StaleFence {
                key: key.clone(),
                given: fence,
                current: lean.holder(),
            }),
            Body::Full(record) => transition::check_owner(Some(record), key, fence),
        }
    }
}

/// [`transition::check_owner`] of an absent record.
pub(super) fn nobody_owns(key: &IdempotencyKey, fence: Fence) -> StoreError {
    StoreError::StaleFence {
        key: key.clone(),
        given: fence,
        current: FenceHolder::Nobody,
    }
}

/// The first 64 bits of a digest, as [`IdempotencyKey`] hashes.
fn bits_of(digest: &[u8; 32]) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The index of the shard of the keys whose first 64 bits are `bits`
/// ([`Map::shard`]).
fn shard_of(bits: u64) -> usize {
    (bits >> 32) as usize % SHARDS
}

/// One shard's table.
#[derive(Debug, Default)]
pub(super) struct Shard(HashTable<Box<Entry>>);

impl Shard {
    /// The entry of `id`.
    pub(super) fn get(&self, id: &Id) -> Option<&Entry> {
        self.0.find(id.bits, |e| e.key == id.digest).map(|e| &**e)
    }

    /// The entry of `id`, to change.
    pub(super) fn get_mut(&mut self, id: &Id) -> Option<&mut Entry> {
        self.0
            .find_mut(id.bits, |e| e.key == id.digest)
            .map(|e| &mut **e)
    }

    /// Add `entry`, whose key the shard does not hold.
    pub(super) fn insert(&mut self, id: &Id, entry: Box<Entry>) {
        self.0.insert_unique(id.bits, entry, |e| e.bits());
    }

    /// Take the entry of `id` out.
    pub(super) fn remove(&mut self, id: &Id) -> Option<Box<Entry>> {
        match self.0.find_entry(id.bits, |e| e.key == id.digest) {
            Ok(entry) => Some(entry.remove().0),
            Err(_) => None,
        }
    }

    /// Every entry.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.0.iter().map(|e| &**e)
    }

    /// Take out every entry whose key's first 64 bits are `bits` and
    /// whose record is expired at `now`, into `removed`.
    // The boxes themselves, so that they are freed where the caller drops
    // them, after the lock (a `Vec<Entry>` would free them here).
    #[allow(clippy::vec_box)]
    fn remove_expired(&mut self, bits: u64, now: Timestamp, removed: &mut Vec<Box<Entry>>) {
        while let Ok(entry) = self
            .0
            .find_entry(bits, |e| e.bits() == bits && e.body.is_expired(now))
        {
            removed.push(entry.remove().0);
        }
    }
}

/// The shards.
#[derive(Debug)]
pub(super) struct Map {
    shards: Box<[RwLock<Shard>]>,
}

impl Map {
    /// [`SHARDS`] empty shards.
    pub(super) fn new() -> Map {
        Map {
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
        }
    }

    /// The shard of the keys whose first 64 bits are `bits`: picked by
    /// bits that a shard's table does not use (it takes its buckets from
    /// the lowest bits and its tags from the highest seven), so that the
    /// keys of one shard still spread over all of its table.
    fn shard(&self, bits: u64) -> &RwLock<Shard> {
        &self.shards[shard_of(bits)]
    }

    // The tables stay whole if a panic unwinds through a lock (nothing
    // that runs under one leaves an entry half written), so a poisoned
    // lock is used as it is.

    /// The shard of `id`, to read.
    pub(super) fn read(&self, id: &Id) -> RwLockReadGuard<'_, Shard> {
        self.shard(id.bits)
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The shard of `id`, to change.
    pub(super) fn write(&self, id: &Id) -> RwLockWriteGuard<'_, Shard> {
        self.shard(id.bits)
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// How many entries the shards hold.
    pub(super) fn len(&self) -> usize {
        let mut len = 0;
        self.for_each_shard(|shard| len += shard.0.len());
        len
    }

    /// Call `f` with every shard, each under its read lock in turn.
    pub(super) fn for_each_shard(&self, mut f: impl FnMut(&Shard)) {
        for shard in &self.shards {
            f(&shard.read().unwrap_or_else(PoisonError::into_inner));
        }
    }

    /// Take out the entries of `due` (keys' first 64 bits, from the expiry
    /// index) whose records are expired at `now`, locking each shard once,
    /// and hand them back to be dropped after the locks are released.
    #[allow(clippy::vec_box)]
    pub(super) fn remove_expired(&self, due: &mut [u64], now: Timestamp) -> Vec<Box<Entry>> {
        due.sort_unstable_by_key(|&bits| shard_of(bits));
        let mut removed = Vec::new();
        for group in due.chunk_by(|&a, &b| shard_of(a) == shard_of(b)) {
            let mut shard = self
                .shard(group[0])
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            for &bits in group {
                shard.remove_expired(bits, now, &mut removed);
            }
        }
        removed
    }
}
