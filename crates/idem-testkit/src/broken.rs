//! Deliberately broken stores, to prove the simulation can fail: each
//! breaks one rule of the store contract the way a plausible bug would, and
//! the simulation must report duplicate effects or lost results for a
//! large share of seeds when run against it.
//!
//! Each is a [`Hook`] on an [`Interceptor`] (the [`Breakage`] itself), so
//! every operation it does not break reaches the correct store unchanged,
//! the caller's-thread claim ([`FastPath::claim_local`](idem_runtime::store::FastPath::claim_local)) included.

use std::sync::Arc;

use async_trait::async_trait;
use idem_runtime::record::{Fence, RecordState};
use idem_runtime::store::intercept::{Answer, Hook, Interceptor, Operation};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, ClaimRequest, LocalClaim};
use idem_runtime::{IdempotencyKey, Record, Store, StoreError};

/// Which rule is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breakage {
    /// Fencing disabled: `checkpoint`, `renew`, `complete` and `release`
    /// accept any fence (the wrapper swaps in the current owner's before
    /// forwarding), so a superseded owner's writes land.
    NoFencing,
    /// Claim as read-then-write: a `get`, a yield, then a blind claim that
    /// ignores an owner in flight, so concurrent workers all acquire.
    RacyClaim,
    /// Lease renewal that never renews: `renew` answers Ok and does
    /// nothing, so a slow owner's lease runs out under it.
    NoRenewal,
}

impl Breakage {
    /// All three.
    pub const ALL: [Breakage; 3] = [
        Breakage::NoFencing,
        Breakage::RacyClaim,
        Breakage::NoRenewal,
    ];
}

/// A store that forwards to a correct one, except for its [`Breakage`]:
/// `BrokenStore::new(inner, breakage)`.
pub type BrokenStore = Interceptor<Breakage, Arc<dyn Store>>;

/// The fence a write goes out with when fencing is disabled: whoever owns
/// the record now.
async fn current_owner(store: &dyn Store, key: &IdempotencyKey, given: Fence) -> Fence {
    match store.get(key).await {
        Ok(Some(Record {
            state: RecordState::InFlight { fence, .. },
            ..
        })) => fence,
        _ => given,
    }
}

/// The claim as read-then-write: a `get`, a yield, then a blind claim
/// that ignores an owner in flight.
async fn racy_claim(store: &dyn Store, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
    let seen = store.get(req.key).await?;
    tokio::task::yield_now().await;
    match store.claim(req).await? {
        // The blind write: an owner in flight is not looked at.
        ClaimOutcome::InFlight { fence, lease_until } => Ok(ClaimOutcome::Acquired {
            fence,
            lease_until,
            steps: seen.map(|r| r.steps).unwrap_or_default(),
            takeover: None,
        }),
        other => Ok(other),
    }
}

#[async_trait]
impl Hook for Breakage {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        match (*self, op) {
            (Breakage::RacyClaim, Operation::Claim(req)) => {
                Ok(Answer::Claim(racy_claim(store, req).await?))
            }
            (Breakage::NoRenewal, Operation::Renew { .. }) => Ok(Answer::Done),
            (Breakage::NoFencing, mut op) => {
                let key = op.key();
                if let (
                    Some(key),
                    Operation::Checkpoint { fence, .. }
                    | Operation::Renew { fence, .. }
                    | Operation::Complete { fence, .. }
                    | Operation::Release { fence, .. },
                ) = (key, &mut op)
                {
                    *fence = current_owner(store, key, *fence).await;
                }
                op.run(store).await
            }
            (_, op) => op.run(store).await,
        }
    }

    /// A read-then-write claim has no caller's-thread path: it goes the
    /// usual way, where it races. The other breakages claim as the store
    /// does.
    fn around_local(
        &self,
        req: &ClaimRequest<'_>,
        store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        match self {
            Breakage::RacyClaim => None,
            Breakage::NoFencing | Breakage::NoRenewal => store.fast_path()?.claim_local(req),
        }
    }

    fn describe(&self, inner: String) -> String {
        format!("broken:{self:?}({inner})")
    }
}
