//! The approval rules in force, kept in the store: one record of idem's
//! own ([`names::APPROVAL_RULES`]) holding the rules as written and who
//! the approvers are. Whoever holds the approvers file publishes them
//! (`idem serve`, at start and on every reload); every decision written
//! through the [`Operator`](crate::operator::Operator) reads them back.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{RuleEntry, Rules};
use crate::ledger::{self, names, Ledger};
use crate::record::CorruptRecord;
use crate::store::{Store, StoreError};

/// How long published rules are kept: ten years; every publication
/// writes them again.
const KEPT_FOR: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

/// What the record holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Kept {
    rules: Vec<RuleEntry>,
    approvers: Vec<String>,
}

/// The key of the one record.
fn key() -> crate::key::IdempotencyKey {
    ledger::key(&["idem-approval-rules/v1"])
}

impl Rules {
    /// Make these the rules in force on `store`, for every decision made
    /// on it from now on, whichever process makes it. Replaces the rules
    /// published before (the last publication wins).
    pub async fn publish(&self, store: &dyn Store) -> Result<(), StoreError> {
        let book = Ledger::new(store, names::APPROVAL_RULES);
        let kept = Kept {
            rules: self.written.clone(),
            approvers: self.deciders.clone(),
        };
        let made_of = serde_json::json!({ "approval_rules": 1 });
        // A publication that races another is tried again on what it
        // wrote; a few rounds settle any number of publishers.
        for _ in 0..8 {
            match book.get::<Kept>(&key()).await? {
                Some(entry) if entry.value == kept => return Ok(()),
                Some(entry) => {
                    if book.swap(&entry, &kept, KEPT_FOR).await? {
                        return Ok(());
                    }
                }
                None => {
                    if book.create(&key(), &made_of, &kept, KEPT_FOR).await? {
                        return Ok(());
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(StoreError::Unavailable {
            store: store.describe(),
            cause: "the approval rules kept changing while they were published; publish again"
                .into(),
        })
    }

    /// The rules in force on `store` (`None`: none were ever published:
    /// every call needs one approval, from anyone). Rules that no longer
    /// check (written by a later idem) are an error: nothing is decided
    /// past rules that cannot be read.
    pub async fn in_force(store: &dyn Store) -> Result<Option<Rules>, StoreError> {
        let book = Ledger::new(store, names::APPROVAL_RULES);
        let Some(entry) = book.get::<Kept>(&key()).await? else {
            return Ok(None);
        };
        let key = entry.record().key.as_str().to_owned();
        Rules::check(entry.value.rules, &entry.value.approvers)
            .map(Some)
            .map_err(|problem| {
                StoreError::Corrupt(CorruptRecord {
                    key,
                    detail: format!("the approval rules in force do not check: {problem}"),
                })
            })
    }
}
