//! The memory store's expiry index: the keys of the records that lapse,
//! by when they lapse, so that a sweep finds the expired records without
//! visiting the live ones.

use std::collections::BTreeMap;

use crate::clock::Timestamp;

/// The width of a bucket of the expiry index, in milliseconds.
const EXPIRY_BUCKET_MS: u64 = 1000;

/// The keys of the records that lapse, by when they lapse, in buckets of
/// [`EXPIRY_BUCKET_MS`]: every write that gives a record a new expiry
/// adds its key, after the write. A key is held as its first 64 bits (an
/// entry is 16 bytes, not the 32 of a timestamp and a shared key): the
/// map finds the records by them.
///
/// An entry is a hint, not a promise: the record may since have been
/// extended, replaced or removed, and other keys may share its bits, so a
/// sweep re-checks the records in the map and deletes one only if it is
/// expired then; a record given a later expiry has its own later entry,
/// and the stale one is dropped when its bucket comes due.
#[derive(Debug, Default)]
pub(super) struct ExpiryIndex {
    /// Bucket `b` holds the entries expiring in `((b - 1) * W, b * W]`
    /// milliseconds, `W` the bucket width.
    buckets: BTreeMap<u64, Vec<(Timestamp, u64)>>,
}

impl ExpiryIndex {
    /// Index the key whose first 64 bits are `bits` as lapsing at `at`.
    pub(super) fn insert(&mut self, at: Timestamp, bits: u64) {
        self.buckets
            .entry(at.0.div_ceil(EXPIRY_BUCKET_MS))
            .or_default()
            .push((at, bits));
    }

    /// Take out every entry expiring at or before `now`: the buckets
    /// entirely past (moved out whole, so the caller's lock on the index
    /// is held for a split of the map, not for a copy of every entry), and
    /// the due entries of the one `now` is in.
    pub(super) fn take_due(&mut self, now: Timestamp) -> Due {
        let later = self.buckets.split_off(&(now.0 / EXPIRY_BUCKET_MS + 1));
        let past = std::mem::replace(&mut self.buckets, later);
        let mut current = Vec::new();
        if let Some(mut bucket) = self.buckets.first_entry() {
            bucket.get_mut().retain(|&(at, bits)| {
                let keep = at > now;
                if !keep {
                    current.push(bits);
                }
                keep
            });
            if bucket.get().is_empty() {
                bucket.remove();
            }
        }
        Due { past, current }
    }

    /// How many entries the index holds (stale ones included).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.buckets.values().map(Vec::len).sum()
    }
}

/// The entries [`ExpiryIndex::take_due`] took out.
#[derive(Debug)]
pub(super) struct Due {
    past: BTreeMap<u64, Vec<(Timestamp, u64)>>,
    current: Vec<u64>,
}

impl Due {
    /// The keys' first 64 bits, one per entry (a key indexed twice comes
    /// twice).
    pub(super) fn into_bits(self) -> impl Iterator<Item = u64> {
        self.past
            .into_values()
            .flatten()
            .map(|(_, bits)| bits)
            .chain(self.current)
    }
}
