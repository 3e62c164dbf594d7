//! Deliberately broken stores, to prove the simulation can fail: each
//! breaks one rule of the store contract the way a plausible bug would, and
//! the simulation must report duplicate effects or lost results for a
//! large share of seeds when run against it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use idem_runtime::clock::Timestamp;
use idem_runtime::record::{Fence, Outcome, RecordState};
use idem_runtime::store::{ClaimOutcome, ClaimRequest};
use idem_runtime::{IdempotencyKey, Record, Store, StoreError};
use serde_json::Value;

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

/// A store that forwards to a correct one, except for its [`Breakage`].
#[derive(Debug)]
pub struct BrokenStore {
    inner: Arc<dyn Store>,
    breakage: Breakage,
}

impl BrokenStore {
    /// `inner`, broken as `breakage` says.
    pub fn new(inner: Arc<dyn Store>, breakage: Breakage) -> Self {
        BrokenStore { inner, breakage }
    }

    /// The fence a write goes out with: without fencing, whoever owns the
    /// record now.
    async fn fence(&self, key: &IdempotencyKey, given: Fence) -> Fence {
        if self.breakage != Breakage::NoFencing {
            return given;
        }
        match self.inner.get(key).await {
            Ok(Some(Record {
                state: RecordState::InFlight { fence, .. },
                ..
            })) => fence,
            _ => given,
        }
    }
}

#[async_trait]
impl Store for BrokenStore {
    fn describe(&self) -> String {
        format!("broken:{:?}({})", self.breakage, self.inner.describe())
    }

    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        if self.breakage != Breakage::RacyClaim {
            return self.inner.claim(req).await;
        }
        let seen = self.inner.get(req.key).await?;
        tokio::task::yield_now().await;
        match self.inner.claim(req).await? {
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

    async fn checkpoint(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        step: &str,
        value: &Value,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let fence = self.fence(key, fence).await;
        self.inner.checkpoint(key, fence, step, value, lease).await
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        if self.breakage == Breakage::NoRenewal {
            return Ok(());
        }
        let fence = self.fence(key, fence).await;
        self.inner.renew(key, fence, lease).await
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let fence = self.fence(key, fence).await;
        self.inner.complete(key, fence, outcome, ttl).await
    }

    async fn release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        let fence = self.fence(key, fence).await;
        self.inner.release(key, fence).await
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }

    async fn replace(
        &self,
        key: &IdempotencyKey,
        expected: idem_runtime::store::Expected,
        new: Option<&Record>,
        audit: Option<&idem_runtime::audit::AuditEvent>,
    ) -> Result<Option<Fence>, StoreError> {
        self.inner.replace(key, expected, new, audit).await
    }

    async fn append_audit(
        &self,
        event: &idem_runtime::audit::AuditEvent,
    ) -> Result<u64, StoreError> {
        self.inner.append_audit(event).await
    }

    async fn audit(
        &self,
        query: &idem_runtime::audit::AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<idem_runtime::audit::AuditPage, StoreError> {
        self.inner.audit(query, cursor, limit).await
    }

    async fn scan(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<idem_runtime::store::ScanPage, StoreError> {
        self.inner.scan(cursor, limit).await
    }

    async fn wait(
        &self,
        key: &IdempotencyKey,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.inner.wait(key, timeout).await
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        self.inner.sweep().await
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.inner.now().await
    }

    async fn close(&self) {
        self.inner.close().await
    }
}
