//! What the inbox lists: the filters of its query string, and a page of
//! the items waiting for a decision, read from the store's open records
//! ([`StoreExt::scan_open`]) newest
//! first, so that a page costs what it shows, not the size of the store.

use idem_runtime::operator::Filter;
use idem_runtime::record::Status;
use idem_runtime::store::OpenCursor;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::decide::{self, Refused};
use super::view::Item;
use crate::state::App;
use idem_runtime::store::StoreExt;

/// How many items a page of the inbox (and of `GET /api/inbox`) holds.
pub(super) const PAGE: usize = 50;

/// The values of the inbox's `state` filter.
pub(super) const STATES: [&str; 4] = ["all", "awaiting_approval", "unknown", "vanished"];

/// The inbox's filters, and where its page starts, from the query string.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub(super) struct InboxFilter {
    /// `all` (the default), `awaiting_approval`, `unknown` or `vanished`.
    #[serde(default)]
    pub state: String,
    /// Only this tool.
    #[serde(default)]
    pub tool: String,
    /// Only this namespace.
    #[serde(default)]
    pub namespace: String,
    /// The page starts after this item (the `next` of the page before);
    /// empty: with the newest.
    #[serde(default)]
    pub after: String,
}

impl InboxFilter {
    /// The query string that repeats these filters and this page (`?…`,
    /// or empty).
    pub(super) fn query(&self) -> String {
        self.query_after(&self.after)
    }

    /// The query string of these filters, for the page after `after`
    /// (empty: the first page).
    pub(super) fn query_after(&self, after: &str) -> String {
        let pairs: Vec<String> = [
            ("state", self.state.as_str()),
            ("tool", &self.tool),
            ("namespace", &self.namespace),
            ("after", after),
        ]
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", percent(v)))
        .collect();
        match pairs.is_empty() {
            true => String::new(),
            false => format!("?{}", pairs.join("&")),
        }
    }

    /// The statuses of the records the `state` filter can show.
    fn statuses(&self) -> Vec<Status> {
        match self.state.as_str() {
            "awaiting_approval" => vec![Status::AwaitingApproval],
            "unknown" => vec![Status::Unknown],
            "vanished" => vec![Status::InFlight],
            _ => vec![Status::AwaitingApproval, Status::Unknown, Status::InFlight],
        }
    }
}

/// `text` percent-encoded for a query string: all but RFC 3986's
/// unreserved characters (letters, digits, `-`, `_`, `.`, `~`).
fn percent(text: &str) -> String {
    const RESERVED: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    utf8_percent_encode(text, RESERVED).to_string()
}

/// A page of the inbox.
#[derive(Debug, Default)]
pub(super) struct Listed {
    /// Its items, newest call first (by when the call was made, then by
    /// key: an order that never changes while an item waits).
    pub items: Vec<Item>,
    /// How many stored records could not be read.
    pub corrupt: usize,
    /// Where the next page starts (`after=`); `None` on the last.
    pub next: Option<String>,
}

/// The page of items waiting for a decision that `filter` selects.
pub(super) async fn items(app: &App, filter: &InboxFilter) -> Result<Listed, Refused> {
    if !STATES.contains(&filter.state.as_str()) && !filter.state.is_empty() {
        return Err(Refused::BadQuery(format!(
            "There is no state “{}” to filter by: state is one of {}.",
            super::view::shown(&filter.state),
            STATES.join(", ")
        )));
    }
    let after = filter.after.trim();
    if !after.is_empty() && after.parse::<OpenCursor>().is_err() {
        return Err(Refused::BadQuery(format!(
            "“{}” is not where a page of the inbox starts: follow the page's own links.",
            super::view::shown(after)
        )));
    }
    let store_filter = Filter {
        status: filter.statuses(),
        tool: Some(filter.tool.trim().to_owned()).filter(|t| !t.is_empty()),
        namespace: Some(filter.namespace.trim().to_owned()).filter(|n| !n.is_empty()),
        since: None,
    };
    let now = app.operator.store().now().await.map_err(decide::store)?;
    let mut listed = Listed::default();
    let mut cursor = Some(after.to_owned()).filter(|a| !a.is_empty());
    loop {
        let page = app
            .operator
            .list(&store_filter, cursor.as_deref(), PAGE - listed.items.len())
            .await
            .map_err(decide::read_failed)?;
        listed.corrupt += page.corrupt.len();
        // A call in flight under a live lease waits for nobody: it is
        // read (it is open) and not shown.
        listed.items.extend(
            page.records
                .iter()
                .filter_map(|r| Item::of(r, app.catalog.as_ref(), now, app.overdue)),
        );
        cursor = page.cursor;
        if cursor.is_none() || listed.items.len() >= PAGE {
            listed.next = cursor;
            return Ok(listed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::percent;

    #[test]
    fn query_values_keep_unreserved_characters_and_escape_the_rest() {
        assert_eq!(percent("a-b_c.d~e"), "a-b_c.d~e");
        assert_eq!(percent("ns/tool x&y=é"), "ns%2Ftool%20x%26y%3D%C3%A9");
    }
}
