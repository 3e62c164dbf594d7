//! Counting store operations: a hook on the store's
//! [`Interceptor`](idem_runtime::store::intercept::Interceptor).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use idem_runtime::store::intercept::{Answer, Hook, Interceptor, OpKind, Operation};
use idem_runtime::store::{ClaimRequest, LocalClaim, Store, StoreError};

/// The real store behind a [`Counts`] hook.
pub type Probe = Interceptor<Counts, Arc<dyn Store>>;

/// The real store, with its operations counted.
pub fn probe(inner: Arc<dyn Store>) -> Probe {
    Interceptor::new(
        inner,
        Counts {
            ops: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            local: AtomicU64::new(0),
        },
    )
}

/// Counts operations (each one round trip on Redis and PostgreSQL), claims
/// sent to the store, and claims it answered on the caller's thread
/// ([`FastPath::claim_local`](idem_runtime::store::FastPath::claim_local): a map read in memory, a read of the file on
/// SQLite). Closing the store is not counted.
#[derive(Debug)]
pub struct Counts {
    pub ops: AtomicU64,
    pub claims: AtomicU64,
    pub local: AtomicU64,
}

impl Counts {
    fn count(&self) {
        self.ops.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait::async_trait]
impl Hook for Counts {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        match op.kind() {
            OpKind::Close => {}
            OpKind::Claim => {
                self.count();
                self.claims.fetch_add(1, Ordering::Relaxed);
            }
            _ => self.count(),
        }
        op.run(store).await
    }

    fn around_local(
        &self,
        req: &ClaimRequest<'_>,
        store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        // Counted when answered: a claim the store answered on the caller's
        // thread is still one store operation (no round trip).
        let answer = store.fast_path()?.claim_local(req)?;
        self.count();
        self.local.fetch_add(1, Ordering::Relaxed);
        Some(answer)
    }
}
