//! Finding and reading records: listing, counting, finding a key by a
//! prefix, showing one, reading the audit log.

use std::collections::BTreeMap;

use super::{Operator, OperatorError};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::{CorruptRecord, Outcome, Record, RecordState, Status};
use crate::store::StoreExt;

/// How many records one [`StoreExt::scan`] page
/// asks for.
const SCAN_PAGE: usize = 500;

/// How many candidates an ambiguous prefix lists.
const MAX_CANDIDATES: usize = 10;

/// Which records [`Operator::list`] returns; every field set must match.
///
/// The executor's own bookkeeping records (tools named `idem:…`, such as
/// a repeat window's index `idem:window:TOOL`) are left out unless
/// [`tool`](Filter::tool) names one: they are not calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Any of these statuses (empty: any).
    pub status: Vec<Status>,
    /// This tool.
    pub tool: Option<String>,
    /// This namespace.
    pub namespace: Option<String>,
    /// Created at or after this instant.
    pub since: Option<Timestamp>,
}

impl Filter {
    /// Records in `status`.
    pub fn status(status: Status) -> Self {
        Filter {
            status: vec![status],
            ..Filter::default()
        }
    }

    /// Whether only open records pass: the filter names statuses, and
    /// each is open ([`Status::is_open`]). [`Operator::list`] then reads
    /// the store's open records alone ([`StoreExt::scan_open`]), newest first.
    ///
    /// [`StoreExt::scan_open`]: crate::store::StoreExt::scan_open
    pub fn open_only(&self) -> bool {
        !self.status.is_empty() && self.status.iter().all(|s| s.is_open())
    }

    /// Whether `record` passes.
    pub fn matches(&self, record: &Record) -> bool {
        (self.status.is_empty() || self.status.contains(&record.status()))
            && match &self.tool {
                Some(tool) => *tool == record.tool,
                None => !record.is_bookkeeping(),
            }
            && self
                .namespace
                .as_ref()
                .is_none_or(|n| record.info.namespace.as_ref() == Some(n))
            && self.since.is_none_or(|since| record.created_at >= since)
    }
}

/// One page of [`Operator::list`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    /// The matching records read for this page.
    pub records: Vec<Record>,
    /// Pass back to [`Operator::list`] for the next page; `None` after the
    /// last.
    pub cursor: Option<String>,
    /// Stored records read for this page that could not be decoded, whatever
    /// the filter (see [`ScanPage::corrupt`](crate::store::ScanPage::corrupt)).
    pub corrupt: Vec<CorruptRecord>,
}

/// How many records are in each status ([`Operator::counts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Records per status; statuses with none are absent.
    pub by_status: BTreeMap<Status, u64>,
    /// Records per tool.
    pub by_tool: BTreeMap<String, u64>,
    /// All records (expired ones not included).
    pub total: u64,
    /// Unknown outcomes by how long they have waited for a person, for an
    /// alert (nothing settles them but a person: they never expire).
    pub unknown_by_age: UnknownAges,
    /// Stored records that could not be decoded (not counted above).
    #[serde(skip)]
    pub corrupt: Vec<CorruptRecord>,
}

/// How many unknown outcomes have waited how long since they were
/// recorded ([`Counts::unknown_by_age`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct UnknownAges {
    /// Recorded less than an hour ago.
    pub under_1h: u64,
    /// Between an hour and a day ago.
    pub under_1d: u64,
    /// Between a day and a week ago.
    pub under_7d: u64,
    /// A week ago or more.
    pub over_7d: u64,
    /// When the oldest was recorded.
    pub oldest: Option<Timestamp>,
}

impl UnknownAges {
    /// Count an unknown outcome recorded at `at`, at `now`.
    fn add(&mut self, at: Timestamp, now: Timestamp) {
        const HOUR: u64 = 3600 * 1000;
        let waited = now.as_millis().saturating_sub(at.as_millis());
        let bucket = match waited {
            w if w < HOUR => &mut self.under_1h,
            w if w < 24 * HOUR => &mut self.under_1d,
            w if w < 7 * 24 * HOUR => &mut self.under_7d,
            _ => &mut self.over_7d,
        };
        *bucket += 1;
        self.oldest = Some(self.oldest.map_or(at, |o| o.min(at)));
    }
}

impl Operator {
    /// Records matching `filter`, from `cursor` on (`None`: the start).
    /// Reads the store a page at a time until about `limit` records match
    /// or the store ends; a page may hold a few more than `limit`.
    ///
    /// A filter of open statuses alone ([`Filter::open_only`]: in flight,
    /// awaiting approval, approved, unknown) reads only the store's open
    /// records, through the index the store keeps of them
    /// ([`StoreExt::scan_open`]), newest
    /// first, and a page holds at most `limit`. Otherwise the whole store
    /// is read, in the store's order.
    pub async fn list(
        &self,
        filter: &Filter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page, OperatorError> {
        let open_only = filter.open_only();
        let limit = if open_only { limit.max(1) } else { limit };
        let mut cursor = cursor.map(str::to_owned);
        let mut records = Vec::new();
        let mut corrupt = Vec::new();
        loop {
            let page = if open_only {
                let want = (limit - records.len()).min(SCAN_PAGE);
                self.store.scan_open(cursor.as_deref(), want).await?
            } else {
                self.store.scan(cursor.as_deref(), SCAN_PAGE).await?
            };
            // Open records come newest first: once a record is older than
            // `since`, so is every one after it.
            let past_since = open_only
                && filter
                    .since
                    .is_some_and(|since| page.records.last().is_some_and(|r| r.created_at < since));
            records.extend(page.records.into_iter().filter(|r| filter.matches(r)));
            corrupt.extend(page.corrupt);
            cursor = page.cursor.filter(|_| !past_since);
            if cursor.is_none() || records.len() >= limit {
                return Ok(Page {
                    records,
                    cursor,
                    corrupt,
                });
            }
        }
    }

    /// Calls awaiting approval that match `filter` (its status is ignored),
    /// read from the store's open records.
    pub async fn pending(&self, filter: &Filter) -> Result<Vec<Record>, OperatorError> {
        let filter = Filter {
            status: vec![Status::AwaitingApproval],
            ..filter.clone()
        };
        let mut all = Vec::new();
        let mut cursor = None;
        loop {
            let page = self.list(&filter, cursor.as_deref(), SCAN_PAGE).await?;
            all.extend(page.records);
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(all),
            }
        }
    }

    /// The open records per status (in flight, awaiting approval, approved,
    /// unknown; statuses with none are absent), read through the store's
    /// index of open records ([`StoreExt::scan_open`]) alone: what a
    /// service's gauges show on every scrape, at a cost that grows with the
    /// open records, not the store.
    ///
    /// [`StoreExt::scan_open`]: crate::store::StoreExt::scan_open
    pub async fn open_counts(&self) -> Result<BTreeMap<Status, u64>, OperatorError> {
        let mut counts = BTreeMap::new();
        let mut cursor = None;
        loop {
            let page = self.store.scan_open(cursor.as_deref(), SCAN_PAGE).await?;
            for record in page.records.iter().filter(|r| !r.is_bookkeeping()) {
                *counts.entry(record.status()).or_default() += 1;
            }
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(counts),
            }
        }
    }

    /// Records per status and tool, read a page at a time.
    pub async fn counts(&self) -> Result<Counts, OperatorError> {
        let mut counts = Counts::default();
        let mut cursor = None;
        let now = self.store.now().await?;
        loop {
            let page = self.store.scan(cursor.as_deref(), SCAN_PAGE).await?;
            for record in &page.records {
                if record.is_bookkeeping() {
                    continue;
                }
                if let RecordState::Completed {
                    outcome: Outcome::Unknown { .. },
                    completed_at,
                    ..
                } = &record.state
                {
                    counts.unknown_by_age.add(*completed_at, now);
                }
                *counts.by_status.entry(record.status()).or_default() += 1;
                *counts.by_tool.entry(record.tool.clone()).or_default() += 1;
                counts.total += 1;
            }
            counts.corrupt.extend(page.corrupt);
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(counts),
            }
        }
    }

    /// The key a full key or a unique prefix of one names (at least four
    /// hexadecimal digits for a prefix, like git).
    pub async fn find(&self, given: &str) -> Result<IdempotencyKey, OperatorError> {
        let given = given.trim().to_ascii_lowercase();
        let given = given.as_str();
        if let Ok(key) = IdempotencyKey::parse(given) {
            return Ok(key);
        }
        let hex = given
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hex || given.len() < 4 || given.len() > 64 {
            return Err(OperatorError::InvalidKey {
                given: given.to_owned(),
            });
        }
        let mut found: Vec<IdempotencyKey> = Vec::new();
        let mut cursor = None;
        loop {
            let page = self.store.scan(cursor.as_deref(), SCAN_PAGE).await?;
            found.extend(
                page.records
                    .into_iter()
                    .filter(|r| r.key.as_str().starts_with(given))
                    .map(|r| r.key),
            );
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        found.sort();
        match found.len() {
            0 => Err(OperatorError::NotFound {
                key: given.to_owned(),
            }),
            1 => Ok(found.remove(0)),
            n => Err(OperatorError::Ambiguous {
                prefix: given.to_owned(),
                more: n > MAX_CANDIDATES,
                candidates: found
                    .into_iter()
                    .take(MAX_CANDIDATES)
                    .map(|k| k.as_str().to_owned())
                    .collect(),
            }),
        }
    }

    /// The record under `key`, steps and audit included.
    pub async fn show(&self, key: &IdempotencyKey) -> Result<Record, OperatorError> {
        self.store
            .get(key)
            .await?
            .ok_or_else(|| OperatorError::NotFound {
                key: key.as_str().to_owned(),
            })
    }

    /// Up to `limit` events of the store's audit log that `query` selects,
    /// oldest first, starting where `cursor` says (`None`: from the
    /// start); see [`StoreExt::audit`]. The log
    /// keeps operator actions and approval decisions after their records
    /// are gone.
    pub async fn audit(
        &self,
        query: &crate::audit::AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<crate::audit::AuditPage, OperatorError> {
        self.store
            .audit(query, cursor, limit)
            .await
            .map_err(OperatorError::Store)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::key::Fingerprint;
    use crate::record::{CallInfoRef, OutputJson};
    use crate::store::{ClaimOutcome, ClaimRequest, MemoryStore};

    /// Records made a millisecond apart: `(key, tool, settled)`.
    async fn store_of(records: &[(&str, &str, bool)]) -> (Arc<MemoryStore>, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new(1_000));
        let store = Arc::new(MemoryStore::with_clock(clock.clone()));
        let fingerprint = Fingerprint::new("f");
        for (key, tool, settled) in records {
            let key = IdempotencyKey::parse(&key.repeat(64)).unwrap();
            let req = ClaimRequest {
                key: &key,
                tool,
                fingerprint: &fingerprint,
                check_fingerprint: true,
                lease: Duration::from_secs(60),
                info: CallInfoRef::EMPTY,
                worker: None,
                durable: true,
            };
            let ClaimOutcome::Acquired { fence, .. } = store.claim(&req).await.unwrap() else {
                panic!("a new key is acquired");
            };
            if *settled {
                let done = Outcome::Success {
                    output: OutputJson::from_value(&serde_json::json!(1)),
                };
                let ttl = Duration::from_secs(60);
                store.complete(&key, fence, &done, ttl).await.unwrap();
            }
            clock.advance(Duration::from_millis(1));
        }
        (store, clock)
    }

    fn keys(page: &Page) -> String {
        page.records.iter().map(|r| &r.key.as_str()[..1]).collect()
    }

    /// An open-only filter reads the open records, newest first, in pages
    /// of exactly `limit`; `since` ends the list at the first older record.
    #[tokio::test]
    async fn an_open_only_list_pages_newest_first_and_stops_at_since() {
        let (store, _clock) = store_of(&[
            ("1", "a", false),
            ("2", "a", true),
            ("3", "b", false),
            ("4", "a", false),
            ("5", "a", false),
            ("6", "a", true),
        ])
        .await;
        let operator = Operator::new(store);
        let filter = Filter {
            status: vec![Status::InFlight],
            tool: Some("a".into()),
            ..Filter::default()
        };
        assert!(filter.open_only());
        assert!(!Filter::default().open_only());
        assert!(!Filter::status(Status::Succeeded).open_only());
        let first = operator.list(&filter, None, 2).await.unwrap();
        assert_eq!(keys(&first), "54");
        let rest = operator
            .list(&filter, first.cursor.as_deref(), 2)
            .await
            .unwrap();
        assert_eq!(keys(&rest), "1");
        assert_eq!(rest.cursor, None);

        // Created at 1000 + (n - 1) ms: since 1003 ms keeps 5 and 4.
        let recent = Filter {
            since: Some(Timestamp(1_003)),
            ..filter
        };
        let page = operator.list(&recent, None, 1).await.unwrap();
        assert_eq!(keys(&page), "5");
        let page = operator
            .list(&recent, page.cursor.as_deref(), 1)
            .await
            .unwrap();
        assert_eq!(keys(&page), "4");
        let page = operator
            .list(&recent, page.cursor.as_deref(), 1)
            .await
            .unwrap();
        assert_eq!((keys(&page).as_str(), page.cursor), ("", None));
    }
}
