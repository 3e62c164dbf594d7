//! What a schedule's store has not flushed, so that a simulated power cut
//! can undo it: the non-durable claims since the last durable write.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use idem_runtime::record::{Fence, RecordState};
use idem_runtime::store::{ClaimOutcome, ClaimRequest, Expected, ExpectedState};
use idem_runtime::{IdempotencyKey, Record, Store, StoreError};

use crate::world::{lock, short, World};
use idem_runtime::store::StoreExt;

/// A claim made without [`ClaimRequest::durable`] that acquired a key,
/// and that no durable write has flushed yet.
#[derive(Debug)]
struct Unflushed {
    key: IdempotencyKey,
    fence: Fence,
    /// Whether it took an in-flight record over (which a power cut brings
    /// back) rather than creating the record.
    takeover: bool,
}

/// What the store of a schedule has not flushed: the non-durable claims
/// that acquired a key since its last durable write, oldest first. A
/// durable write of any key empties it, as the fsync of a WAL (SQLite) or
/// a WAL flush (PostgreSQL) covers everything written before it.
///
/// It follows the answers as the hook sees them, which on a server may
/// arrive in another order than the commits: a cut may then lose a claim
/// that a durable commit just before it had in fact flushed. Such a claim
/// is still one whose owner has written nothing since (any write of its
/// would have emptied the list), so losing it is a state a real power cut
/// could leave had the commits come in the order seen. On a server that
/// several schedules share, each schedule keeps its own list, as if it
/// were alone on the store (other schedules' durable writes flush nothing
/// of it): more claims lost than a shared server would lose, never fewer.
#[derive(Debug)]
pub(crate) struct Volatile {
    /// The real store, where a power cut undoes the claims.
    store: Arc<dyn Store>,
    claims: Mutex<Vec<Unflushed>>,
}

impl Volatile {
    /// Nothing unflushed yet on `store` (the real one, not the simulation's
    /// hook: a power cut is no operation of any worker).
    pub(crate) fn new(store: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Volatile {
            store,
            claims: Mutex::new(Vec::new()),
        })
    }

    /// Claim `req` was answered `outcome`: a non-durable claim that acquired
    /// the key is kept; a durable one flushes everything before it; a claim
    /// that acquired nothing wrote nothing.
    pub(crate) fn claimed(&self, req: &ClaimRequest<'_>, outcome: &ClaimOutcome) {
        let ClaimOutcome::Acquired {
            fence, takeover, ..
        } = outcome
        else {
            return;
        };
        if req.durable {
            self.flushed();
        } else {
            lock(&self.claims).push(Unflushed {
                key: req.key.clone(),
                fence: *fence,
                takeover: takeover.is_some(),
            });
        }
    }

    /// A durable write succeeded: everything written before it is on disk.
    pub(crate) fn flushed(&self) {
        lock(&self.claims).clear();
    }

    /// The power fails (struck by worker `who`): the store loses every
    /// claim it had not flushed. Each key they acquired goes back to what
    /// it was before the first of them, if its record is still what the
    /// last of them left (in flight under its fence): deleted when the
    /// first created it; in flight again with its lease run out when the
    /// first took it over. Counted and traced in `world`.
    pub(crate) async fn cut(&self, who: usize, world: &World) {
        world.counters.power_cuts.fetch_add(1, Ordering::Relaxed);
        let lost = std::mem::take(&mut *lock(&self.claims));
        if lost.is_empty() {
            world.event(format!("w{who} power cut: nothing unflushed"));
            return;
        }
        // Per key, in the order first claimed: whether the first claim took
        // the record over, the last claim's fence, and how many claims.
        let mut keys: Vec<(IdempotencyKey, bool, Fence, u64)> = Vec::new();
        for claim in lost {
            match keys.iter_mut().find(|(k, ..)| *k == claim.key) {
                Some((_, _, fence, n)) => {
                    *fence = claim.fence;
                    *n += 1;
                }
                None => keys.push((claim.key, claim.takeover, claim.fence, 1)),
            }
        }
        for (key, takeover, fence, claims) in keys {
            let what = format!("w{who} power cut: key={} {fence}", short(key.as_str()));
            let expected = Expected {
                fence,
                state: ExpectedState::InFlight,
            };
            // Before a takeover the record was in flight with the same
            // steps (a takeover keeps them, and no checkpoint came since:
            // it would have flushed) and a lease run out. `replace` gives
            // the record back under a fresh fence where the store would
            // give back the vanished owner's: that owner, if it still
            // lives, is refused where it would be let through, so this
            // cut is a little kinder to idem than a real one.
            let restored = if takeover {
                match self.previous(&key, fence).await {
                    Some(record) => Some(record),
                    None => {
                        world.event(format!("{what}: moved on, nothing lost"));
                        continue;
                    }
                }
            } else {
                None
            };
            match self
                .store
                .replace(&key, expected, restored.as_ref(), None)
                .await
            {
                Ok(new) => {
                    world
                        .counters
                        .claims_undone
                        .fetch_add(claims, Ordering::Relaxed);
                    world.event(match new {
                        Some(new) => format!(
                            "{what}: {claims} claim(s) lost, in flight again under {new}, lease run out"
                        ),
                        None => format!("{what}: {claims} claim(s) lost, record gone"),
                    });
                }
                Err(StoreError::StaleFence { .. }) => {
                    world.event(format!("{what}: moved on, nothing lost"));
                }
                Err(e) => world.event(format!("{what}: could not undo: {e}")),
            }
        }
    }

    /// The record a takeover under `fence` replaced, as far as it can be
    /// told from the record now: the same one in flight with its lease run
    /// out. `None` when the record is no longer in flight under `fence`.
    async fn previous(&self, key: &IdempotencyKey, fence: Fence) -> Option<Record> {
        let mut record = self.store.get(key).await.ok()??;
        let now = self.store.now().await.ok()?;
        match &mut record.state {
            RecordState::InFlight {
                fence: f,
                lease_until,
            } if *f == fence => *lease_until = now,
            _ => return None,
        }
        Some(record)
    }
}
