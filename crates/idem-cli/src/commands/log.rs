//! `idem log`: the store's audit log, oldest first — who approved, denied,
//! resolved, released or deleted what, when and why, including for
//! records that are gone; and who signed in to the inbox, failed to, signed
//! out, or had their sessions revoked, from where.

use std::collections::VecDeque;

use idem_runtime::audit::{AuditEvent, AuditQuery};
use idem_runtime::key::IdempotencyKey;
use idem_runtime::operator::{Operator, OperatorError};
use idem_runtime::record::Status;

use super::{now, Output};
use crate::cli::LogArgs;
use crate::error::CliError;
use crate::render::json::{AuditEventJson, LogJson};
use crate::render::short_key;
use crate::render::table::{Cell, Table};
use crate::time::relative;

/// How many events one read of the log asks for.
const PAGE: usize = 500;

/// `idem log`: the latest `--limit` matching events, oldest first.
pub(super) async fn run(operator: &Operator, args: &LogArgs, out: &Output) -> Result<(), CliError> {
    let now = now(operator).await?;
    let since = args.since.map(|since| since.at(now));
    let wanted = match &args.key {
        Some(given) => Some(KeyFilter::parse(given)?),
        None => None,
    };
    let query = AuditQuery {
        key: wanted.as_ref().and_then(KeyFilter::exact),
        since,
        until: None,
    };
    let limit = if args.limit == 0 {
        usize::MAX
    } else {
        args.limit
    };
    // Read a page at a time, keeping only the latest `limit` matches.
    let mut latest = VecDeque::new();
    let mut total = 0u64;
    let mut cursor: Option<String> = None;
    loop {
        let page = operator
            .audit(&query, cursor.as_deref(), PAGE)
            .await
            .map_err(CliError::from)?;
        for event in page.events {
            if wanted.as_ref().is_some_and(|w| !w.matches(&event.key)) {
                continue;
            }
            total += 1;
            if latest.len() == limit {
                latest.pop_front();
            }
            latest.push_back(event);
        }
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let events: Vec<AuditEvent> = latest.into();
    if out.json {
        return out.json(&LogJson {
            events: events.iter().map(AuditEventJson::new).collect(),
            total,
        });
    }
    if events.is_empty() {
        out.note("No audit events match.");
        return Ok(());
    }
    let mut table = Table::new(&[
        "AT",
        "KEY",
        "TOOL",
        "NAMESPACE",
        "ACTION",
        "BY",
        "STATE",
        "REASON",
    ]);
    for event in &events {
        table.row(vec![
            Cell::plain(format!(
                "{} ({})",
                event.at.rfc3339(),
                relative(now, event.at)
            )),
            Cell::plain(short_key(event.key.as_str())),
            Cell::plain(event.tool.as_str()),
            Cell::plain(event.namespace.as_deref().unwrap_or("-")),
            Cell::plain(event.action.as_str()),
            Cell::plain(event.by.as_str()),
            Cell::plain(states(event)),
            Cell::plain(event.reason.as_deref().unwrap_or("")),
        ]);
    }
    let mut text = table.render();
    if total > events.len() as u64 {
        text.push_str(&format!(
            "(the latest {} of {total} events; --limit 0 shows all)\n",
            events.len()
        ));
    }
    out.text(&text)
}

/// Where the record went, as the log shows it; `-` for an event about no
/// record (a sign-in to the inbox).
fn states(event: &AuditEvent) -> String {
    match (event.before, event.after) {
        (None, None) => "-".to_owned(),
        (before, after) => format!("{} → {}", state(before), state(after)),
    }
}

/// A status as the log shows it; `deleted` where the record went away.
fn state(status: Option<Status>) -> &'static str {
    status.map_or("deleted", Status::as_str)
}

/// Which keys `idem log KEY` shows: one key, or every key with a prefix
/// (the log is read whole then, since its record may be gone and no
/// record can say which key the prefix means).
enum KeyFilter {
    Exact(IdempotencyKey),
    Prefix(String),
}

impl KeyFilter {
    fn parse(given: &str) -> Result<KeyFilter, CliError> {
        let given = given.trim().to_ascii_lowercase();
        if let Ok(key) = IdempotencyKey::parse(&given) {
            return Ok(KeyFilter::Exact(key));
        }
        let hex = given.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex || given.len() < 4 || given.len() > 64 {
            return Err(CliError::from(OperatorError::InvalidKey { given }));
        }
        Ok(KeyFilter::Prefix(given))
    }

    fn exact(&self) -> Option<IdempotencyKey> {
        match self {
            KeyFilter::Exact(key) => Some(key.clone()),
            KeyFilter::Prefix(_) => None,
        }
    }

    fn matches(&self, key: &IdempotencyKey) -> bool {
        match self {
            KeyFilter::Exact(wanted) => wanted == key,
            KeyFilter::Prefix(prefix) => key.as_str().starts_with(prefix.as_str()),
        }
    }
}
