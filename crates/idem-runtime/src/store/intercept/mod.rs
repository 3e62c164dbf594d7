//! Wrap any [`Store`] to watch, delay or alter what passes through it.
//!
//! A store answers [`Operation`]s ([`Store::call`]), so a layer in front of
//! one sees every operation as a value and forwards it whole, as a tower
//! `Layer` wraps a `Service`: there is no method to forget. [`Interceptor`]
//! is that layer, with the wrapped store's fast path kept (a wrapper that
//! dropped it would send every claim of a memory store the slow way), and
//! hands each operation to a [`Hook`] on its way:
//!
//! * [`Hook::around`] gets every asynchronous operation as an
//!   [`Operation`] (its name, key and arguments) and the wrapped store. It
//!   runs the operation with [`Operation::run`] — or runs another, or
//!   none — and returns the [`Answer`]. Code before `run` is the "before"
//!   hook, code after it the "after" hook, with the result in hand.
//! * [`Hook::around_local`] gets the caller's-thread claim
//!   ([`FastPath::claim_local`]) the same way, synchronously.
//!
//! Both default to forwarding unchanged, so a hook implements only what
//! it watches. One comes with idem: `Timed` (feature `otel`) records each
//! operation's duration in an OpenTelemetry histogram.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//!
//! use idem_runtime::store::intercept::{Answer, Hook, Interceptor, Operation};
//! use idem_runtime::store::{MemoryStore, Store, StoreError};
//!
//! /// Counts the writes that reach the store.
//! #[derive(Debug, Default)]
//! struct CountWrites(AtomicU64);
//!
//! #[async_trait::async_trait]
//! impl Hook for CountWrites {
//!     async fn around(
//!         &self,
//!         op: Operation<'_>,
//!         store: &dyn Store,
//!     ) -> Result<Answer, StoreError> {
//!         if op.kind().writes() {
//!             self.0.fetch_add(1, Ordering::Relaxed);
//!         }
//!         op.run(store).await
//!     }
//! }
//!
//! let store = Interceptor::new(Arc::new(MemoryStore::new()), CountWrites::default());
//! assert_eq!(store.describe(), "memory");
//! ```

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use super::{ClaimRequest, FastPath, LocalClaim, Store, StoreError};
// The operations a hook sees, where a hook's author looks for them.
pub use super::{Answer, OpKind, Operation};

#[cfg(feature = "otel")]
mod timed;
#[cfg(feature = "otel")]
pub use timed::Timed;

/// What an [`Interceptor`] calls on the way to the wrapped store. Every
/// method has a default that forwards unchanged.
#[async_trait]
pub trait Hook: Send + Sync + fmt::Debug + 'static {
    /// Handle one asynchronous operation: usually `op.run(store).await`,
    /// with what the hook does before and after it. The answer must be
    /// the one `op`'s method returns ([`Answer::Done`] for a checkpoint,
    /// [`Answer::Record`] for a get, …); any other is reported to the
    /// caller as [`StoreError::Unavailable`], so that a mistaken hook
    /// makes the executor refuse, never act on a made-up answer.
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        op.run(store).await
    }

    /// Handle the caller's-thread claim ([`FastPath::claim_local`]):
    /// usually the wrapped store's own, with what the hook does before and
    /// after it. It must not block (see [`FastPath`]); returning `None`
    /// sends the claim the usual way, through [`Hook::around`].
    fn around_local(
        &self,
        req: &ClaimRequest<'_>,
        store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        store.fast_path()?.claim_local(req)
    }

    /// How the wrapped store describes itself through the interceptor
    /// (`inner` is its own [`Store::describe`]); unchanged by default.
    fn describe(&self, inner: String) -> String {
        inner
    }
}

/// A [`Store`] that forwards every method to `inner` through a [`Hook`].
/// See the [module docs](self).
#[derive(Debug)]
pub struct Interceptor<H, S = Arc<dyn Store>> {
    inner: S,
    hook: H,
}

impl<H: Hook, S: Store> Interceptor<H, S> {
    /// `inner`, with every operation handed to `hook`.
    pub fn new(inner: S, hook: H) -> Self {
        Interceptor { inner, hook }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }
}

/// The claim goes through [`Hook::around_local`]. A completion is always
/// declined here: it goes through [`Hook::around`] as
/// [`Operation::Complete`], so that a hook sees every one (what it forwards
/// is the wrapped store's asynchronous `complete`).
impl<H: Hook, S: Store> FastPath for Interceptor<H, S> {
    fn claim_local(&self, req: &ClaimRequest<'_>) -> Option<Result<LocalClaim, StoreError>> {
        self.hook.around_local(req, &self.inner)
    }
}

#[async_trait]
impl<H: Hook, S: Store> Store for Interceptor<H, S> {
    fn describe(&self) -> String {
        self.hook.describe(self.inner.describe())
    }

    fn fast_path(&self) -> Option<&dyn FastPath> {
        Some(self)
    }

    async fn call(&self, op: Operation<'_>) -> Result<Answer, StoreError> {
        self.hook.around(op, &self.inner).await
    }
}

#[cfg(test)]
mod tests;
