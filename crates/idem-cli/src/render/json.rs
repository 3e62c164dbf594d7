//! The JSON that `--json` prints: the stable schema documented in
//! `docs/cli.md`. Every field is always present (`null` when it does not
//! apply), so a script can index without checking; fields are only ever
//! added, never renamed or removed.
//!
//! These types are the schema: they are built from the library's records
//! here, and never serialized from the library's own types, whose stored
//! form may change between versions. A record and an audit event are
//! [`idem_runtime::operator::json`]'s, which the inbox's API shows too.

use std::collections::BTreeMap;

use idem_runtime::clock::Timestamp;
use idem_runtime::operator::Counts;
use idem_runtime::record::Status;
use serde::Serialize;

pub(crate) use idem_runtime::operator::json::{json_or_string, AuditEventJson, RecordJson};

/// `idem log --json`.
#[derive(Debug, Serialize)]
pub(crate) struct LogJson {
    /// The events shown, oldest first.
    pub events: Vec<AuditEventJson>,
    /// How many events matched (more than `events` holds when `--limit`
    /// cut the list).
    pub total: u64,
}

/// `idem ls --json`.
#[derive(Debug, Serialize)]
pub(crate) struct ListJson {
    /// The matching records shown, newest first.
    pub records: Vec<RecordJson>,
    /// How many records matched (more than `records` holds when `--limit`
    /// cut the list).
    pub total: u64,
}

/// `idem stats --json`.
#[derive(Debug, Serialize)]
pub(crate) struct StatsJson {
    /// All records (expired ones not included).
    pub total: u64,
    /// Records per state; every state is present, zero included.
    pub by_status: BTreeMap<&'static str, u64>,
    /// Records per tool.
    pub by_tool: BTreeMap<String, u64>,
    /// Unknown outcomes by how long they have waited for a person.
    pub unknown_by_age: UnknownAgesJson,
}

/// [`StatsJson::unknown_by_age`].
#[derive(Debug, Serialize)]
pub(crate) struct UnknownAgesJson {
    /// Recorded less than an hour ago.
    pub under_1h: u64,
    /// Between an hour and a day ago.
    pub under_1d: u64,
    /// Between a day and a week ago.
    pub under_7d: u64,
    /// A week ago or more.
    pub over_7d: u64,
    /// When the oldest was recorded (RFC 3339), if any.
    pub oldest: Option<String>,
}

/// `idem key --json`.
#[derive(Debug, Serialize)]
pub(crate) struct KeyJson {
    /// The derived key.
    pub key: String,
    /// `call`, `step`, `natural` or `custom`.
    pub source: &'static str,
    /// The key derivation version.
    pub version: u32,
    /// The namespace.
    pub namespace: String,
    /// The tool.
    pub tool: String,
    /// The RFC 8785 canonical arguments, when `--args` was given.
    pub canonical_arguments: Option<String>,
    /// Their fingerprint, as records store it.
    pub fingerprint: Option<String>,
}

/// What `resolve --release`, `delete` and `purge` print with `--json`.
#[derive(Debug, Serialize)]
pub(crate) struct DeletedJson {
    /// The key deleted (`null` for `purge`).
    pub key: Option<String>,
    /// How many records were deleted.
    pub deleted: u64,
}

impl StatsJson {
    /// The schema's view of `counts`.
    pub(crate) fn new(counts: &Counts) -> Self {
        StatsJson {
            total: counts.total,
            by_status: Status::ALL
                .iter()
                .map(|s| (s.as_str(), counts.by_status.get(s).copied().unwrap_or(0)))
                .collect(),
            by_tool: counts.by_tool.clone(),
            unknown_by_age: UnknownAgesJson {
                under_1h: counts.unknown_by_age.under_1h,
                under_1d: counts.unknown_by_age.under_1d,
                under_7d: counts.unknown_by_age.under_7d,
                over_7d: counts.unknown_by_age.over_7d,
                oldest: counts.unknown_by_age.oldest.map(Timestamp::rfc3339),
            },
        }
    }
}
