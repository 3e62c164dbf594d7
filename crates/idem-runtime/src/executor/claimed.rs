//! The key a call is made under, learned while it runs ([`ClaimedKey`]).

use std::future::Future;
use std::sync::{Arc, OnceLock};

use crate::key::IdempotencyKey;

tokio::task_local! {
    static CLAIMED: ClaimedKey;
}

/// Where the first keyed call made inside [`ClaimedKey::scope`] leaves its
/// key, as soon as the key is known (derived, or, for a call keyed by a
/// [repeat window](super::RepeatWindow), found in the window's index) —
/// before the call finishes.
///
/// A server answers a call that runs long with a handle to its record
/// this way (an MCP task, an HTTP `202` with a status link) while the call
/// goes on; the handle is then read as every duplicate is, from the record.
/// A read has no key, and leaves none.
///
/// ```
/// use idem_runtime::ClaimedKey;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let claimed = ClaimedKey::new();
/// let watch = claimed.clone();
/// let call = async { /* `executor.call(tool, args).call_id(…)`, spawned or not */ };
/// let running = tokio::spawn(async move { claimed.scope(call).await });
/// // Later, while the call may still run: its key, once it has claimed one.
/// running.await.unwrap();
/// assert!(watch.get().is_none(), "no keyed call was made");
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClaimedKey(Arc<OnceLock<IdempotencyKey>>);

impl ClaimedKey {
    /// A place for a key, empty.
    pub fn new() -> Self {
        ClaimedKey::default()
    }

    /// Run `future`, keeping the key of the first keyed call it makes (a
    /// tool's own sub-calls come later, and are not kept). The future may
    /// be spawned; clones of this value read the same key.
    pub async fn scope<F: Future>(&self, future: F) -> F::Output {
        CLAIMED.scope(self.clone(), future).await
    }

    /// The key, once the call has one.
    pub fn get(&self) -> Option<&IdempotencyKey> {
        self.0.get()
    }
}

/// Tell the scope the call runs in, if any, its key.
pub(super) fn note(key: &IdempotencyKey) {
    let _ = CLAIMED.try_with(|claimed| {
        if claimed.0.get().is_none() {
            let _ = claimed.0.set(key.clone());
        }
    });
}
