//! The data layout in Redis: the keys of a record and of its slot, and the
//! layout version under `PREFIX:schema` (its migrations are in
//! `migrate.rs`).

use crate::RedisStore;
use idem_runtime::key::IdempotencyKey;

/// How many slots one round trip reads at once, when a scan counts index
/// sizes or a migration walks the slots.
pub(super) const COUNT_WINDOW: u16 = 512;

/// The data layout this build writes and understands, kept under
/// `PREFIX:schema`.
///
/// Each version's data is migrated, one version at a time, when a store
/// of a later one connects to it read-write.
///
/// Version 2 (idem 0.2) adds records awaiting approval, call details, the
/// worker and operator audit to the record's hash, and the per-slot
/// indexes that scans page through. Data of version 1 is migrated when a
/// version 2 store connects to it: its records are indexed (they read
/// unchanged, lacking only what version 1 did not record), then the version
/// is set to 2, so a version 1 build refuses to connect rather than
/// misread a record awaiting approval. Records that version 1 workers still
/// connected at that moment create afterwards are not indexed: claims and
/// reads find them, scans do not, so stop version 1 workers before the
/// first version 2 store connects.
///
/// Version 3 (idem 0.3) adds the audit index (which slots' streams hold
/// events of which minute) that reads of the whole audit log go by. Data
/// of version 2 is migrated by noting the moment from which the index is
/// complete: older events are still read by merging every slot's stream.
/// As for version 1, stop version 2 workers first: their audit events
/// would be missing from reads of the whole log (reads by key find them).
///
/// Version 4 adds the per-slot open sets, `PREFIX:{SLOT}:open`:
/// the keys of the slot's open records (in flight, awaiting approval,
/// completed with an unknown outcome) scored by their creation, which the
/// scripts keep as they change a record and
/// [`StoreExt::scan_open`](idem_runtime::store::StoreExt::scan_open) pages
/// through. Data of version 3 is migrated when a version 4 store connects:
/// every slot's records are looked at (a script for each 1,000 keys of a
/// slot, 512 slots a round trip) and the open ones put in their slot's open
/// set, then the version is set to 4. Several stores connecting at once
/// may all do it; the scripts agree. Stop version 3 workers first: records
/// they open or settle afterwards are missing from the open sets, or stay
/// in them until a reader finds them settled. A store connected read-only
/// to data of version 3 reads the whole store for each page of open
/// records instead.
pub const SCHEMA_VERSION: u32 = 4;

/// The first layout version with the open sets.
pub(super) const OPEN_INDEXED_SINCE: u32 = 4;

/// The oldest data layout a store connected read-only
/// ([`RedisStore::connect_read_only`]) reads without migrating it: version
/// 1 kept no indexes, so scans would miss every record. Older data is
/// refused with [`StoreError::SchemaTooOld`](idem_runtime::store::StoreError::SchemaTooOld).
pub const OLDEST_READABLE: u32 = 2;

/// How many slots (hash tags) the records are spread over: keys are hex,
/// and a slot is a key's first three digits.
pub(super) const SLOTS: u16 = 4096;

impl RedisStore {
    /// The Redis key holding the record of `key`.
    pub fn record_key(&self, key: &IdempotencyKey) -> String {
        format!("{}:{{{}}}:r:{}", self.prefix, slot(key), key.as_str())
    }

    pub(super) fn fence_key(&self, key: &IdempotencyKey) -> String {
        format!("{}:{{{}}}:fence", self.prefix, slot(key))
    }

    /// The index of the slot of `key`.
    pub(super) fn index_key(&self, key: &IdempotencyKey) -> String {
        index_key(&self.prefix, slot(key))
    }

    /// The open set of the slot of `key`.
    pub(super) fn open_key(&self, key: &IdempotencyKey) -> String {
        format!("{}:{{{}}}:open", self.prefix, slot(key))
    }

    /// The audit stream and counter of the slot of `key`.
    pub(super) fn audit_keys(&self, key: &IdempotencyKey) -> [String; 2] {
        let slot = slot(key);
        [
            format!("{}:{{{slot}}}:audit", self.prefix),
            format!("{}:{{{slot}}}:audit_seq", self.prefix),
        ]
    }
}

/// The hash slot tag of `key`: its first three hex digits (4,096 slots).
pub(super) fn slot(key: &IdempotencyKey) -> &str {
    &key.as_str()[..3]
}

/// The index of the records of `slot` (three hex digits).
pub(super) fn index_key(prefix: &str, slot: &str) -> String {
    format!("{prefix}:{{{slot}}}:keys")
}

/// The open set of `slot`: the keys of its open records, scored by their
/// creation.
pub(super) fn open_key(prefix: &str, slot: u16) -> String {
    format!("{prefix}:{{{slot:03x}}}:open")
}

/// The audit stream of `slot`.
pub(super) fn audit_key(prefix: &str, slot: u16) -> String {
    format!("{prefix}:{{{slot:03x}}}:audit")
}
