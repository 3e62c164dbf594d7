//! What a person does with records: list and inspect them, approve or deny
//! calls awaiting approval, settle what idem refused to guess.
//!
//! idem refuses rather than acting twice: an `irreversible` call waits for
//! an approval, a call whose outcome is unknown is never re-run. Someone
//! must then decide, and [`Operator`] is how — from a program, or through
//! the `idem` command-line program, which is a thin layer over it. Every
//! change is fenced (it applies to the record as it was read, or is refused
//! with [`OperatorError::Changed`] and changes nothing), never overrules an
//! owner whose lease is live, never overwrites a recorded outcome, and is
//! recorded on the record with who, when and why ([`AuditEntry`]).
//!
//! ```
//! use idem_runtime::operator::{Filter, Operator};
//! use idem_runtime::record::Status;
//! use idem_runtime::store::MemoryStore;
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let operator = Operator::new(std::sync::Arc::new(MemoryStore::new()));
//! let unknown = operator
//!     .list(&Filter::status(Status::Unknown), None, 50)
//!     .await
//!     .unwrap();
//! assert!(unknown.records.is_empty());
//! # });
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::approval::transition::{self, Replace, Undecidable};
use crate::approval::Approval;
use crate::audit::{AuditEvent, AuditQuery};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::CorruptRecord;
use crate::record::{
    AuditAction, AuditEntry, FailureCode, Outcome, OutputJson, Record, RecordState, Status,
    StoredFailure, DEFAULT_TTL,
};
use crate::store::{Expected, ExpectedState, Store, StoreError};

/// How many records one [`Store::scan`] page asks for.
const SCAN_PAGE: usize = 500;

/// How many candidates an ambiguous prefix lists.
const MAX_CANDIDATES: usize = 10;

/// Which records [`Operator::list`] returns; every field set must match.
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

    /// Whether `record` passes.
    pub fn matches(&self, record: &Record) -> bool {
        (self.status.is_empty() || self.status.contains(&record.status()))
            && self.tool.as_ref().is_none_or(|t| *t == record.tool)
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

/// How [`Operator::resolve`] settles a call.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// The effect happened; duplicates get this output.
    Succeeded(Value),
    /// The effect did not happen and must not be tried again; duplicates get
    /// this failure.
    Failed(String),
    /// The effect did not happen; the record is deleted so that a new call
    /// with the key runs.
    Release,
}

/// Who does an operator action, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// Who (a user name, a bot).
    pub by: String,
    /// Why, or a note.
    pub reason: Option<String>,
}

impl Actor {
    /// This actor's `action` at `at`, as recorded.
    fn entry(&self, at: Timestamp, action: AuditAction) -> AuditEntry {
        AuditEntry {
            at,
            by: self.by.clone(),
            action,
            reason: self.reason.clone(),
        }
    }

    /// `by`, with no reason given.
    pub fn new(by: impl Into<String>) -> Self {
        Actor {
            by: by.into(),
            reason: None,
        }
    }

    /// With a reason.
    pub fn because(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// Why an operator action was refused. Nothing was changed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// No record under the key (never written, released, swept, expired).
    #[error("no record with key {key}")]
    NotFound {
        /// The key or prefix given.
        key: String,
    },
    /// A key prefix matched several records.
    #[error("key prefix {prefix} is ambiguous; it matches {}{}", candidates.join(", "), if *more { ", …" } else { "" })]
    Ambiguous {
        /// The prefix given.
        prefix: String,
        /// Some of the keys it matches.
        candidates: Vec<String>,
        /// Whether it matches more than those.
        more: bool,
    },
    /// Not a key, nor a prefix of one.
    #[error(
        "{given:?} is not a key or a key prefix (a key is 64 hexadecimal digits; give at least 4)"
    )]
    InvalidKey {
        /// What was given.
        given: String,
    },
    /// Approving or denying a record that does not await approval.
    #[error("key {key} is not awaiting approval (it is {status})")]
    NotPending {
        /// The key.
        key: IdempotencyKey,
        /// What it is.
        status: Status,
    },
    /// Approving or denying a call that is already approved.
    #[error("key {key} is already approved (by {by}); it runs on the next call with its key")]
    AlreadyApproved {
        /// The key.
        key: IdempotencyKey,
        /// Who approved it.
        by: String,
    },
    /// Settling a call whose owner holds a live lease.
    #[error("key {key} is in flight under a live lease (until {until} ms since the epoch, worker {worker}); wait for it to finish or its lease to run out")]
    LiveLease {
        /// The key.
        key: IdempotencyKey,
        /// When the lease runs out.
        until: Timestamp,
        /// The worker holding it.
        worker: String,
    },
    /// Settling a record that has a definite outcome already.
    #[error("key {key} is already {status}; a recorded outcome is never overwritten")]
    AlreadySettled {
        /// The key.
        key: IdempotencyKey,
        /// Its status.
        status: Status,
    },
    /// Resolving a record that awaits approval (approve or deny it).
    #[error("key {key} is {status}; approve or deny it instead of resolving it")]
    AwaitsDecision {
        /// The key.
        key: IdempotencyKey,
        /// Its status.
        status: Status,
    },
    /// The record changed between reading it and changing it (another
    /// operator, a call that claimed it).
    #[error("the record with key {key} changed while this action was being made; nothing was changed — look at it again")]
    Changed {
        /// The key.
        key: IdempotencyKey,
    },
    /// The store failed; nothing was changed.
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Operator actions on a store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Operator {
    store: Arc<dyn Store>,
    ttl: Duration,
}

impl Operator {
    /// Act on `store`.
    ///
    /// A decision an operator makes (an approval, a denial, a resolution)
    /// is kept as long as the tool keeps its outcomes: the TTL the record
    /// was claimed with. Records written before idem 0.3 do not say it;
    /// theirs are kept for 24 h ([`Operator::ttl`] changes that).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Operator {
            store,
            ttl: DEFAULT_TTL,
        }
    }

    /// Keep decisions about records that do not say their tool's TTL
    /// (written before idem 0.3) for `ttl`.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long a decision about `record` is kept: `explicit` when given,
    /// else the tool's TTL recorded with it, else this operator's default.
    fn kept_for(&self, record: &Record, explicit: Option<Duration>) -> Duration {
        explicit.unwrap_or_else(|| record.ttl_or(self.ttl))
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Records matching `filter`, from `cursor` on (`None`: the start).
    /// Reads the store a page at a time until about `limit` records match
    /// or the store ends; a page may hold a few more than `limit`.
    pub async fn list(
        &self,
        filter: &Filter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<Page, OperatorError> {
        let mut cursor = cursor.map(str::to_owned);
        let mut records = Vec::new();
        let mut corrupt = Vec::new();
        loop {
            let page = self.store.scan(cursor.as_deref(), SCAN_PAGE).await?;
            records.extend(page.records.into_iter().filter(|r| filter.matches(r)));
            corrupt.extend(page.corrupt);
            cursor = page.cursor;
            if cursor.is_none() || records.len() >= limit {
                return Ok(Page {
                    records,
                    cursor,
                    corrupt,
                });
            }
        }
    }

    /// Calls awaiting approval that match `filter` (its status is ignored).
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

    /// Records per status and tool, read a page at a time.
    pub async fn counts(&self) -> Result<Counts, OperatorError> {
        let mut counts = Counts::default();
        let mut cursor = None;
        let now = self.store.now().await?;
        loop {
            let page = self.store.scan(cursor.as_deref(), SCAN_PAGE).await?;
            for record in &page.records {
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

    /// Write in the audit log that `actor` asked a person to decide the
    /// call awaiting approval `record` (in a chat, say) and got no
    /// decision. The record does not change; [`Operator::was_asked`] tells
    /// afterwards, so that the person is not asked about it twice.
    pub async fn note_asked(&self, record: &Record, actor: &Actor) -> Result<(), OperatorError> {
        let at = self.store.now().await?;
        let entry = actor.entry(at, AuditAction::Asked);
        let event = AuditEvent {
            seq: None,
            at,
            by: entry.by,
            action: entry.action,
            reason: entry.reason,
            key: record.key.clone(),
            tool: record.tool.clone(),
            namespace: record.info.namespace.clone(),
            fingerprint: record.fingerprint.clone(),
            before: Some(record.status()),
            after: Some(record.status()),
        };
        self.store.append_audit(&event).await?;
        Ok(())
    }

    /// Whether a person was asked about `key` before
    /// ([`Operator::note_asked`]).
    pub async fn was_asked(&self, key: &IdempotencyKey) -> Result<bool, OperatorError> {
        let query = AuditQuery::for_key(key.clone());
        let mut cursor: Option<String> = None;
        loop {
            let page = self.store.audit(&query, cursor.as_deref(), 100).await?;
            if page.events.iter().any(|e| e.action == AuditAction::Asked) {
                return Ok(true);
            }
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(false),
            }
        }
    }

    /// Approve a call awaiting approval: the next call with its key *and
    /// its arguments* runs it once, under `approval`. The approval is bound
    /// to the arguments recorded with the request (those `idem show`
    /// displays), and is kept for the tool's TTL, like an outcome: a
    /// granted approval does not lapse with the request's approval TTL.
    /// Refused for a record that is not awaiting approval, or already
    /// approved, and (fenced) for one that changed since it was read.
    pub async fn approve(
        &self,
        key: &IdempotencyKey,
        approval: Approval,
    ) -> Result<Record, OperatorError> {
        let record = self.show(key).await?;
        self.approve_record(&record, approval).await
    }

    /// [`Operator::approve`] the record as `record` shows it — the version
    /// a person was shown, the arguments they read — and only that: if the
    /// record changed since it was read (another decision, a request that
    /// lapsed and was asked again with other arguments), the approval is
    /// refused with [`OperatorError::Changed`] and nothing changes.
    pub async fn approve_record(
        &self,
        record: &Record,
        approval: Approval,
    ) -> Result<Record, OperatorError> {
        let record = record.clone();
        self.check_pending(&record)?;
        let at = self.store.now().await?;
        let entry = AuditEntry {
            at,
            by: approval.approver.clone(),
            action: AuditAction::Approved,
            reason: approval.note.clone(),
        };
        let approved = transition::approve(&record, approval, at, self.kept_for(&record, None));
        self.swap(&record, approved, entry).await
    }

    /// Deny a call awaiting approval: it never runs, and every call with its
    /// key gets `reason`.
    pub async fn deny(
        &self,
        key: &IdempotencyKey,
        by: &str,
        reason: &str,
    ) -> Result<Record, OperatorError> {
        let record = self.show(key).await?;
        self.deny_record(&record, by, reason).await
    }

    /// [`Operator::deny`] the record as `record` shows it, and only that
    /// version of it (see [`Operator::approve_record`]).
    pub async fn deny_record(
        &self,
        record: &Record,
        by: &str,
        reason: &str,
    ) -> Result<Record, OperatorError> {
        let record = record.clone();
        self.check_pending(&record)?;
        let at = self.store.now().await?;
        let denied = transition::deny(&record, reason, at, self.kept_for(&record, None));
        let entry = AuditEntry {
            at,
            by: by.to_owned(),
            action: AuditAction::Denied,
            reason: Some(reason.to_owned()),
        };
        self.swap(&record, denied, entry).await
    }

    /// Settle a call idem cannot settle itself: an unknown outcome, or a
    /// call whose owner vanished and was never taken over (its lease ran
    /// out). Returns the record as resolved (`None` when released).
    ///
    /// The resolution is kept for the tool's TTL (recorded with the
    /// call), like the outcome the tool would have recorded;
    /// [`Operator::resolve_kept_for`] says otherwise explicitly.
    ///
    /// Refused for a call in flight under a live lease, one with a definite
    /// outcome, and one awaiting approval.
    pub async fn resolve(
        &self,
        key: &IdempotencyKey,
        resolution: Resolution,
        actor: &Actor,
    ) -> Result<Option<Record>, OperatorError> {
        self.settle(key, resolution, actor, None).await
    }

    /// [`Operator::resolve`], keeping the resolution for `ttl` instead of
    /// the tool's TTL. A duplicate after `ttl` runs the call again, so a
    /// TTL shorter than the tool's is a decision to allow that.
    pub async fn resolve_kept_for(
        &self,
        key: &IdempotencyKey,
        resolution: Resolution,
        actor: &Actor,
        ttl: Duration,
    ) -> Result<Option<Record>, OperatorError> {
        self.settle(key, resolution, actor, Some(ttl)).await
    }

    /// [`Operator::resolve`] the record as `record` shows it, and only
    /// that version of it (see [`Operator::approve_record`]): what a person
    /// judged from the page or the transcript they read.
    pub async fn resolve_record(
        &self,
        record: &Record,
        resolution: Resolution,
        actor: &Actor,
    ) -> Result<Option<Record>, OperatorError> {
        self.settle_record(record, resolution, actor, None).await
    }

    async fn settle(
        &self,
        key: &IdempotencyKey,
        resolution: Resolution,
        actor: &Actor,
        ttl: Option<Duration>,
    ) -> Result<Option<Record>, OperatorError> {
        let record = self.show(key).await?;
        self.settle_record(&record, resolution, actor, ttl).await
    }

    async fn settle_record(
        &self,
        record: &Record,
        resolution: Resolution,
        actor: &Actor,
        ttl: Option<Duration>,
    ) -> Result<Option<Record>, OperatorError> {
        let key = &record.key;
        let record = record.clone();
        let now = self.store.now().await?;
        let expected = match (&record.state, record.status()) {
            (_, Status::Unknown) => ExpectedState::Completed,
            (RecordState::InFlight { lease_until, .. }, _) if *lease_until > now => {
                return Err(OperatorError::LiveLease {
                    key: key.clone(),
                    until: *lease_until,
                    worker: record.worker.clone().unwrap_or_else(|| "unknown".into()),
                })
            }
            (RecordState::InFlight { .. }, _) => ExpectedState::LeaseExpired,
            (_, status @ (Status::AwaitingApproval | Status::Approved)) => {
                return Err(OperatorError::AwaitsDecision {
                    key: key.clone(),
                    status,
                })
            }
            (_, status) => {
                return Err(OperatorError::AlreadySettled {
                    key: key.clone(),
                    status,
                })
            }
        };
        let (outcome, action) = match resolution {
            Resolution::Release => {
                let entry = actor.entry(now, AuditAction::Released);
                self.replace(&record, fenced(&record, expected), None, &entry)
                    .await?;
                tracing::info!(
                    key = key.as_str(),
                    by = actor.by,
                    reason = actor.reason.as_deref().unwrap_or(""),
                    "operator released a key"
                );
                return Ok(None);
            }
            Resolution::Succeeded(output) => (
                Outcome::Success {
                    output: OutputJson::from_value(&output),
                },
                AuditAction::ResolvedSucceeded,
            ),
            Resolution::Failed(message) => (
                Outcome::Failure {
                    failure: StoredFailure {
                        code: FailureCode::Permanent,
                        message,
                        details: None,
                    },
                },
                AuditAction::ResolvedFailed,
            ),
        };
        let mut new = record.clone();
        new.state = RecordState::Completed {
            fence: record.fence(),
            outcome,
            completed_at: now,
            expires_at: now.plus(self.kept_for(&record, ttl)),
        };
        let resolved = Replace {
            expected: fenced(&record, expected),
            record: new,
        };
        self.swap(&record, resolved, actor.entry(now, action))
            .await
            .map(Some)
    }

    /// Delete a record, so that the next call with its key runs as new.
    /// Refused for a call in flight under a live lease.
    pub async fn delete(&self, key: &IdempotencyKey, actor: &Actor) -> Result<(), OperatorError> {
        let record = self.show(key).await?;
        let now = self.store.now().await?;
        let expected = match &record.state {
            RecordState::InFlight { lease_until, .. } => {
                if *lease_until > now {
                    return Err(OperatorError::LiveLease {
                        key: key.clone(),
                        until: *lease_until,
                        worker: record.worker.clone().unwrap_or_else(|| "unknown".into()),
                    });
                }
                ExpectedState::LeaseExpired
            }
            RecordState::AwaitingApproval { .. } => ExpectedState::AwaitingApproval,
            RecordState::Completed { .. } => ExpectedState::Completed,
        };
        let entry = actor.entry(now, AuditAction::Deleted);
        self.replace(&record, fenced(&record, expected), None, &entry)
            .await?;
        tracing::info!(
            key = key.as_str(),
            by = actor.by,
            reason = actor.reason.as_deref().unwrap_or(""),
            "operator deleted a record"
        );
        Ok(())
    }

    /// Delete expired records (completed ones and lapsed approval
    /// requests); returns how many.
    pub async fn purge_expired(&self) -> Result<u64, OperatorError> {
        Ok(self.store.sweep().await?)
    }

    /// Wait up to `timeout` for a decision on a call awaiting approval: the
    /// record as it then is (approved, denied, or still awaiting), `None`
    /// when it is gone (expired, deleted). Woken by the decision where the
    /// store can be notified of it; see [`Store::wait_for_decision`].
    pub async fn wait_for_decision(
        &self,
        key: &IdempotencyKey,
        timeout: Duration,
    ) -> Result<Option<Record>, OperatorError> {
        Ok(self.store.wait_for_decision(key, timeout).await?)
    }

    fn check_pending(&self, record: &Record) -> Result<(), OperatorError> {
        transition::decidable(record).map_err(|refused| match refused {
            Undecidable::AlreadyApproved { by } => OperatorError::AlreadyApproved {
                key: record.key.clone(),
                by,
            },
            Undecidable::NotPending(status) => OperatorError::NotPending {
                key: record.key.clone(),
                status,
            },
        })
    }

    /// Swap `old` for the record of the fenced transition `to`, with the
    /// action `entry` recorded on the new record and, in the same write, in
    /// the store's audit log.
    async fn swap(
        &self,
        old: &Record,
        to: Replace,
        entry: AuditEntry,
    ) -> Result<Record, OperatorError> {
        let Replace {
            expected,
            record: mut new,
        } = to;
        new.audit.push(entry.clone());
        let fence = self.replace(old, expected, Some(&new), &entry).await?;
        if let Some(fence) = fence {
            new = crate::store::transition::replacement(&old.key, &new, fence);
        }
        Ok(new)
    }

    /// Swap `old`, if it is as `expected`, for `new` (`None`: delete it), appending `entry` to the
    /// store's audit log in the same write: state before → after, who,
    /// when, why. A refused swap appends nothing.
    async fn replace(
        &self,
        old: &Record,
        expected: Expected,
        new: Option<&Record>,
        entry: &AuditEntry,
    ) -> Result<Option<crate::record::Fence>, OperatorError> {
        let event = AuditEvent {
            seq: None,
            at: entry.at,
            by: entry.by.clone(),
            action: entry.action,
            reason: entry.reason.clone(),
            key: old.key.clone(),
            tool: old.tool.clone(),
            namespace: old.info.namespace.clone(),
            fingerprint: old.fingerprint.clone(),
            before: Some(old.status()),
            after: new.map(Record::status),
        };
        self.store
            .replace(&old.key, expected, new, Some(&event))
            .await
            .map_err(|e| match e {
                StoreError::StaleFence { key, .. } => OperatorError::Changed { key },
                e => OperatorError::Store(e),
            })
    }

    /// Up to `limit` events of the store's audit log that `query` selects,
    /// oldest first, starting where `cursor` says (`None`: from the
    /// start); see [`Store::audit`]. The log keeps operator actions and
    /// approval decisions after their records are gone.
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

/// What a change to `record` expects of the stored one: in `state`, under
/// the fence it was read with.
fn fenced(record: &Record, state: ExpectedState) -> Expected {
    Expected {
        fence: record.fence(),
        state,
    }
}
