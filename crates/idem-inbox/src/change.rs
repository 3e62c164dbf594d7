//! What changed in the inbox since the last look, as the `inbox` event of
//! the live pages (`live`) names it: kept by the server's state
//! (`state::App::changes`), made by the task that looks (`live::watch`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// What changed since the last look, as an `inbox` event's data says.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Change {
    /// Keys new on the first page.
    pub added: BTreeSet<String>,
    /// Keys whose item changed, or that a decision was recorded for.
    pub changed: BTreeSet<String>,
    /// Keys no longer on the first page.
    pub removed: BTreeSet<String>,
    /// More decisions were recorded than one look reads: some are not
    /// named, and every page refreshes.
    pub more: bool,
}

impl Change {
    /// The change from the first page `last` to `now` (key → version).
    pub(crate) fn between(
        last: &BTreeMap<String, String>,
        now: &BTreeMap<String, String>,
    ) -> Change {
        let mut change = Change::default();
        for (key, version) in now {
            match last.get(key) {
                None => change.added.insert(key.clone()),
                Some(v) if v != version => change.changed.insert(key.clone()),
                Some(_) => false,
            };
        }
        change.removed = last
            .keys()
            .filter(|k| !now.contains_key(*k))
            .cloned()
            .collect();
        change
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty() && !self.more
    }
}

/// The last change sent, numbered.
pub(crate) type Changes = (u64, Arc<Change>);
