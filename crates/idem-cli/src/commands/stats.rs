//! `idem stats`: how many records are in each state, and per tool.

use idem_runtime::clock::Timestamp;
use idem_runtime::operator::{Counts, Operator};
use idem_runtime::record::Status;

use super::Output;
use crate::error::CliError;
use crate::render::json::StatsJson;
use crate::render::style::{status as status_style, HEADER};
use crate::render::table::{Cell, Table};
use idem_runtime::store::StoreExt;

/// `idem stats`: records per state and per tool.
pub(super) async fn run(operator: &Operator, out: &Output) -> Result<(), CliError> {
    let counts = operator.counts().await?;
    let now = operator.store().now().await?;
    let printed = print(&counts, now, out);
    // As `idem ls`: what could be read, then the corrupt records named.
    match counts.corrupt.is_empty() {
        true => printed,
        false => printed.and(Err(CliError::Corrupt(counts.corrupt))),
    }
}

fn print(counts: &Counts, now: Timestamp, out: &Output) -> Result<(), CliError> {
    if out.json {
        return out.json(&StatsJson::new(counts));
    }
    let mut states = Table::new(&["STATE", "RECORDS"]);
    for status in Status::ALL {
        let n = counts.by_status.get(&status).copied().unwrap_or(0);
        let style = if n > 0 {
            status_style(status)
        } else {
            anstyle::Style::new()
        };
        states.row(vec![
            Cell::styled(status.as_str(), style),
            Cell::plain(n.to_string()),
        ]);
    }
    states.row(vec![
        Cell::styled("total", HEADER),
        Cell::styled(counts.total.to_string(), HEADER),
    ]);
    let mut text = states.render();
    let ages = &counts.unknown_by_age;
    if let Some(oldest) = ages.oldest {
        text.push_str(&format!(
            "\nunknown outcomes wait for a person (they never expire): {} under 1h, {} under 1d, {} under 7d, {} older; the oldest for {}\n",
            ages.under_1h,
            ages.under_1d,
            ages.under_7d,
            ages.over_7d,
            crate::time::age(now, oldest)
        ));
    }
    if !counts.by_tool.is_empty() {
        let mut tools = Table::new(&["TOOL", "RECORDS"]);
        for (tool, n) in &counts.by_tool {
            tools.row(vec![Cell::plain(tool.as_str()), Cell::plain(n.to_string())]);
        }
        text.push('\n');
        text.push_str(&tools.render());
    }
    out.text(&text)
}
