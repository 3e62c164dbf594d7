//! The store's audit log: every operator action and approval decision, kept
//! apart from the records it speaks of, so it outlives them.
//!
//! A record's own [`audit`](crate::record::Record::audit) goes when the
//! record goes — an operator's delete, a release of an unknown outcome (the
//! very change that lets a non-idempotent call run again), the record's
//! expiry. An [`AuditEvent`] appended to the store stays until the store's
//! audit retention ([`DEFAULT_AUDIT_RETENTION`] unless its options say
//! otherwise) has passed, whatever happens to its record:
//!
//! * [`StoreExt::append_audit`](crate::store::StoreExt::append_audit) appends one
//!   event; [`StoreExt::replace`](crate::store::StoreExt::replace) appends one in
//!   the same transaction as its swap, and only when the swap happens.
//! * [`StoreExt::audit`](crate::store::StoreExt::audit) reads the log oldest
//!   first, a page at a time, filtered by an [`AuditQuery`].
//! * [`StoreExt::sweep`](crate::store::StoreExt::sweep) deletes the events older
//!   than the retention.
//!
//! ```
//! use idem_runtime::audit::{AuditEvent, AuditQuery};
//! use idem_runtime::clock::Timestamp;
//! use idem_runtime::key::{Fingerprint, IdempotencyKey};
//! use idem_runtime::record::{AuditAction, Status};
//! use idem_runtime::store::{MemoryStore, StoreExt};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = MemoryStore::new();
//! let key = IdempotencyKey::parse(&"ab".repeat(32)).unwrap();
//! let event = AuditEvent {
//!     seq: None,
//!     at: store.now().await.unwrap(),
//!     by: "ana".into(),
//!     action: AuditAction::Deleted,
//!     reason: Some("test data".into()),
//!     key: key.clone(),
//!     tool: "charge_card".into(),
//!     namespace: None,
//!     fingerprint: Fingerprint::new("f00d"),
//!     before: Some(Status::Unknown),
//!     after: None,
//! };
//! let seq = store.append_audit(&event).await.unwrap();
//! let page = store.audit(&AuditQuery::for_key(key), None, 100).await.unwrap();
//! assert_eq!(page.events, vec![AuditEvent { seq: Some(seq), ..event }]);
//! # });
//! ```

use std::time::Duration;

use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::record::{AuditAction, Status};

/// How long a store keeps audit events unless its options say otherwise:
/// 365 days.
pub const DEFAULT_AUDIT_RETENTION: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// The most events one page of [`StoreExt::audit`](crate::store::StoreExt::audit)
/// holds, whatever limit is asked for.
pub const MAX_AUDIT_PAGE: usize = 10_000;

/// One operator action or approval decision, as the store's audit log
/// keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AuditEvent {
    /// Where the store put the event in its log, assigned when it was
    /// appended (see [`StoreExt::append_audit`](crate::store::StoreExt::append_audit));
    /// `None` in an event being built. Ignored when appending.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// When (the store's clock).
    pub at: Timestamp,
    /// Who: the operator as given with `--by`, or the policy that decided.
    pub by: String,
    /// What.
    pub action: AuditAction,
    /// Why, or the note given with an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The key of the record acted on.
    pub key: IdempotencyKey,
    /// The record's tool.
    pub tool: String,
    /// The record's namespace, if its call recorded one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The record's fingerprint (of the call's canonical arguments).
    pub fingerprint: Fingerprint,
    /// Where the record stood before (`None`: there was none).
    pub before: Option<Status>,
    /// Where it stands after (`None`: the record was deleted).
    pub after: Option<Status>,
}

/// Which events [`StoreExt::audit`](crate::store::StoreExt::audit) reads; the
/// default reads them all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only the events of this key.
    pub key: Option<IdempotencyKey>,
    /// Only events at or after this instant.
    pub since: Option<Timestamp>,
    /// Only events before this instant.
    pub until: Option<Timestamp>,
}

impl AuditQuery {
    /// Every event of `key`.
    pub fn for_key(key: IdempotencyKey) -> Self {
        AuditQuery {
            key: Some(key),
            ..AuditQuery::default()
        }
    }

    /// Whether `event` is one this query reads.
    pub fn matches(&self, event: &AuditEvent) -> bool {
        self.key.as_ref().is_none_or(|k| *k == event.key)
            && self.since.is_none_or(|since| event.at >= since)
            && self.until.is_none_or(|until| event.at < until)
    }
}

/// One page of [`StoreExt::audit`](crate::store::StoreExt::audit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditPage {
    /// The events of this page, oldest first.
    pub events: Vec<AuditEvent>,
    /// Where the next page starts; `None` after the last page. Opaque:
    /// pass it back to [`StoreExt::audit`](crate::store::StoreExt::audit)
    /// unchanged, with the same query.
    pub cursor: Option<String>,
}

/// The cursor after the event at `at` with `seq`, for the stores that
/// order their log by `(at, seq)`.
pub fn position_cursor(at: Timestamp, seq: u64) -> String {
    format!("{}.{seq}", at.as_millis())
}

/// The page of `events` read with one more than `limit` asked for: the
/// first `limit`, and a cursor after the last of them when there was more.
pub fn page_of(mut events: Vec<AuditEvent>, limit: usize) -> AuditPage {
    let more = events.len() > limit;
    events.truncate(limit);
    let cursor = more
        .then(|| events.last())
        .flatten()
        .map(|e| position_cursor(e.at, e.seq.unwrap_or_default()));
    AuditPage { events, cursor }
}

/// The `(at, seq)` a [`position_cursor`] names.
pub fn parse_position_cursor(cursor: &str) -> Option<(Timestamp, u64)> {
    let (at, seq) = cursor.split_once('.')?;
    Some((Timestamp(at.parse().ok()?), seq.parse().ok()?))
}

/// The instant before which events are older than `retention` at `now`
/// (`None`: none are, the retention reaches before the epoch).
pub fn retention_cutoff(now: Timestamp, retention: Duration) -> Option<Timestamp> {
    let retention = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    now.as_millis().checked_sub(retention).map(Timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_cursor_reads_back_as_the_position_it_names() {
        let cursor = position_cursor(Timestamp(1_700_000_000_123), 42);
        assert_eq!(
            parse_position_cursor(&cursor),
            Some((Timestamp(1_700_000_000_123), 42))
        );
        assert_eq!(parse_position_cursor("nonsense"), None);
        assert_eq!(parse_position_cursor("12.x"), None);
    }

    #[test]
    fn a_retention_longer_than_the_clock_has_run_deletes_nothing() {
        assert_eq!(
            retention_cutoff(Timestamp(10), Duration::from_secs(1)),
            None
        );
        assert_eq!(
            retention_cutoff(Timestamp(5_000), Duration::from_secs(2)),
            Some(Timestamp(3_000))
        );
        assert_eq!(retention_cutoff(Timestamp(5_000), Duration::MAX), None);
    }
}
