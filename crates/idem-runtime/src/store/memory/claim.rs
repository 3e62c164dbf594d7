//! The claim on the memory store: answered from the record as it is
//! held, compact or whole, under the shard's read lock when nothing is
//! written; a new record is made compact from the request itself.

use std::sync::Arc;

use super::lean::{Lean, LeanAnswer};
use super::map::{Body, Entry, Id};
use super::MemoryStore;
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::Outcome;
use crate::store::{transition, ClaimOutcome, ClaimRequest, LocalClaim, StoreError};

/// What a claim answers: [`StoreExt::claim`](crate::store::StoreExt::claim)'s
/// [`ClaimOutcome`], or the [`LocalClaim`] of
/// [`FastPath::claim_local`](crate::store::FastPath::claim_local), which
/// answers a completed call with its outcome alone (no record is built for
/// a duplicate).
pub(super) trait Answer: Sized {
    /// The answer `claim`.
    fn claim(claim: ClaimOutcome) -> Self;
    /// The answer that the compact record `lean` of `key` completed with
    /// `outcome`.
    fn completed(outcome: Outcome, lean: &Lean, key: &IdempotencyKey) -> Self;
}

impl Answer for ClaimOutcome {
    fn claim(claim: ClaimOutcome) -> Self {
        claim
    }
    fn completed(_: Outcome, lean: &Lean, key: &IdempotencyKey) -> Self {
        ClaimOutcome::Completed(Arc::new(lean.to_record(key.clone())))
    }
}

impl Answer for LocalClaim {
    fn claim(claim: ClaimOutcome) -> Self {
        LocalClaim::Claim(claim)
    }
    fn completed(outcome: Outcome, _: &Lean, _: &IdempotencyKey) -> Self {
        LocalClaim::Completed(outcome)
    }
}

/// The answer to `req` that the record of `entry` gives at `now` without
/// a write ([`transition::answer`]); `None` when it is expired or the
/// claim writes.
fn answer<A: Answer>(entry: &Entry, req: &ClaimRequest<'_>, now: Timestamp) -> Option<A> {
    match &entry.body {
        body if body.is_expired(now) => None,
        Body::Lean(lean) => match lean.answer(req, now)? {
            LeanAnswer::Claim(claim) => Some(A::claim(claim)),
            LeanAnswer::Completed(outcome) => Some(A::completed(outcome, lean, req.key)),
        },
        Body::Full(record) => transition::answer(record, req, now).map(A::claim),
    }
}

impl MemoryStore {
    /// [`StoreExt::claim`](crate::store::StoreExt::claim), synchronously: a claim that writes nothing (a
    /// duplicate, a live owner, a key reuse) is answered under the shard's
    /// read lock; anything else takes the write lock.
    pub(super) fn claim_now<A: Answer>(&self, req: &ClaimRequest<'_>) -> Result<A, StoreError> {
        self.open()?;
        let now = self.clock.now();
        let id = Id::of(req.key);
        if let Some(entry) = self.records.read(&id).get(&id) {
            if let Some(answer) = answer(entry, req, now) {
                return Ok(answer);
            }
        }
        let mut shard = self.records.write(&id);
        let (claim, before, after) = match shard.get_mut(&id) {
            None => {
                let (claim, body) = self.create(req, now);
                shard.insert(&id, Entry::new(&id, body));
                (claim, None, None)
            }
            Some(entry) => {
                // Looked at again: it may have changed since the read.
                if let Some(answer) = answer(entry, req, now) {
                    return Ok(answer);
                }
                let before = entry.body.expires_at();
                if entry.body.is_expired(now) {
                    // An expired record counts as absent; its waiters stay.
                    let (claim, body) = self.create(req, now);
                    entry.body = body;
                    (claim, before, None)
                } else {
                    // A takeover of a lapsed lease, or an approved call.
                    let existing = entry.body.to_arc(req.key.clone());
                    let d = transition::claim(Some(existing), req, now, || self.fresh_fence());
                    if let Some(record) = d.write {
                        entry.body = Body::of(record);
                    }
                    (d.claim, before, entry.body.expires_at())
                }
            }
        };
        drop(shard);
        self.index_expiry(before, after, id.bits);
        Ok(A::claim(claim))
    }

    /// The record a claim of an absent key creates, and the answer.
    fn create(&self, req: &ClaimRequest<'_>, now: Timestamp) -> (ClaimOutcome, Body) {
        let fence = self.fresh_fence();
        match Lean::claimed(req, now, fence) {
            Some(lean) => (
                ClaimOutcome::Acquired {
                    fence,
                    lease_until: now.plus(req.lease),
                    steps: Default::default(),
                    takeover: None,
                },
                Body::Lean(lean),
            ),
            None => {
                let d = transition::claim(None, req, now, || fence);
                let record = d.write.expect("a claim of an absent key writes");
                (d.claim, Body::Full(Arc::new(record)))
            }
        }
    }
}
