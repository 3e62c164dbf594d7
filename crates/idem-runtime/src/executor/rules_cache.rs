//! The approval rules in force on the store, as an executor last read
//! them: read again at most once a second.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::approval::rules::Rules;
use crate::store::Store;

/// How long the rules read from the store are used before they are read
/// again.
const FRESH_FOR: Duration = Duration::from_secs(1);

/// The rules in force on the store, as last read.
#[derive(Debug, Default)]
pub(super) struct RulesCache {
    read: Mutex<Option<(Instant, Option<Arc<Rules>>)>>,
}

impl RulesCache {
    /// The rules in force (`None`: none published), read again when the
    /// last read is older than [`FRESH_FOR`].
    pub(super) async fn current(
        &self,
        store: &dyn Store,
    ) -> Result<Option<Arc<Rules>>, crate::store::StoreError> {
        if let Some((at, rules)) = &*self.read.lock().unwrap_or_else(|p| p.into_inner()) {
            if at.elapsed() < FRESH_FOR {
                return Ok(rules.clone());
            }
        }
        let rules = Rules::in_force(store).await?.map(Arc::new);
        *self.read.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), rules.clone()));
        Ok(rules)
    }
}
