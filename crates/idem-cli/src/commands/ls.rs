//! `idem ls`: the records matching a filter, newest first.
//!
//! The store is read a page at a time and only the newest `--limit`
//! matches are kept, so a large store is never held in memory whole; the
//! total number of matches is counted as the pages go by.

use idem_runtime::clock::Timestamp;
use idem_runtime::operator::{Filter, Operator};
use idem_runtime::record::{CorruptRecord, Record};

use super::{now, Output};
use crate::cli::LsArgs;
use crate::error::CliError;
use crate::render::json::{ListJson, RecordJson};
use crate::render::style::{status as status_style, DIM};
use crate::render::table::{Cell, Table};
use crate::render::{clip, short_key, summary};
use crate::time::relative;

/// How many records one read of the store asks for.
const PAGE: usize = 500;

/// How wide the DETAILS column may grow.
const DETAILS: usize = 60;

/// `idem ls`: the newest matching records as a table (or JSON).
pub(super) async fn run(operator: &Operator, args: &LsArgs, out: &Output) -> Result<(), CliError> {
    let now = now(operator).await?;
    let since = args.since.map(|since| since.at(now));
    let filter = Filter {
        status: args.states.clone(),
        tool: args.tool.clone(),
        namespace: args.namespace.clone(),
        since,
    };
    let limit = if args.limit == 0 {
        usize::MAX
    } else {
        args.limit
    };
    let (records, total, corrupt) = newest(operator, &filter, limit).await?;
    let listed = list(&records, total, now, out);
    // What could be read is printed first; the corrupt records are then
    // named, loudly, and the exit code says the list is incomplete.
    match corrupt.is_empty() {
        true => listed,
        false => listed.and(Err(CliError::Corrupt(corrupt))),
    }
}

/// Print `records` (the newest of `total` matches).
fn list(records: &[Record], total: u64, now: Timestamp, out: &Output) -> Result<(), CliError> {
    if out.json {
        return out.json(&ListJson {
            records: records.iter().map(|r| RecordJson::new(r, now)).collect(),
            total,
        });
    }
    if records.is_empty() {
        out.note("No records match.");
        return Ok(());
    }
    let mut table = Table::new(&[
        "KEY",
        "STATE",
        "TOOL",
        "NAMESPACE",
        "AGE",
        "WORKER",
        "DETAILS",
    ]);
    for record in records {
        let status = record.status();
        table.row(vec![
            Cell::plain(short_key(record.key.as_str())),
            Cell::styled(status.as_str(), status_style(status)),
            Cell::plain(record.tool.as_str()),
            Cell::plain(record.info.namespace.as_deref().unwrap_or("-")),
            Cell::plain(relative(now, record.created_at)),
            Cell::plain(record.worker.as_deref().unwrap_or("-")),
            Cell::styled(clip(&summary(record, now), DETAILS), DIM),
        ]);
    }
    out.text(&table.render())?;
    if (records.len() as u64) < total {
        out.note(&format!(
            "{} more match; show them with --limit 0, or narrow the list with --state, --tool, --namespace or --since",
            total - records.len() as u64
        ));
    }
    Ok(())
}

/// The newest `limit` records matching `filter`, newest first, how many
/// match in all, and the stored records that could not be decoded.
async fn newest(
    operator: &Operator,
    filter: &Filter,
    limit: usize,
) -> Result<(Vec<Record>, u64, Vec<CorruptRecord>), CliError> {
    let mut kept: Vec<Record> = Vec::new();
    let mut corrupt = Vec::new();
    let mut total = 0u64;
    let mut cursor = None;
    loop {
        let page = operator.list(filter, cursor.as_deref(), PAGE).await?;
        total += page.records.len() as u64;
        corrupt.extend(page.corrupt);
        kept.extend(page.records);
        if kept.len() > limit.saturating_mul(2).max(PAGE) {
            newest_first(&mut kept);
            kept.truncate(limit);
        }
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    newest_first(&mut kept);
    kept.truncate(limit);
    Ok((kept, total, corrupt))
}

/// Newest first; the key breaks ties, so the order is stable.
fn newest_first(records: &mut [Record]) {
    records.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| a.key.cmp(&b.key))
    });
}
