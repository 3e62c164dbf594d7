//! Paging through the open records ([`StoreExt::scan_open`]): the cursor
//! every store writes, and the default that reads the whole store.

use std::fmt;
use std::str::FromStr;

use super::{ScanPage, Store, StoreError, StoreExt};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::record::Record;

/// Where a page of [`StoreExt::scan_open`] ended: the last record returned,
/// by its creation time and key (the order of the scan, newest first).
/// The next page starts with the next older record. Its text,
/// `MILLIS:KEY`, is the cursor a page hands out; a store may read it with
/// [`str::parse`] and write it with [`fmt::Display`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OpenCursor {
    /// When the last record returned was created.
    pub created_at: Timestamp,
    /// Its key.
    pub key: IdempotencyKey,
}

impl OpenCursor {
    /// The cursor a page of open records ends with: the one after its
    /// `last` record when `more` records follow, else none.
    pub(crate) fn ending(last: Option<&Record>, more: bool) -> Option<String> {
        last.filter(|_| more)
            .map(|r| OpenCursor::after(r).to_string())
    }

    /// The cursor after `record`.
    pub fn after(record: &Record) -> OpenCursor {
        OpenCursor {
            created_at: record.created_at,
            key: record.key.clone(),
        }
    }

    /// Whether `record` comes after this cursor in the scan's order
    /// (created earlier, or at the same millisecond under a smaller key).
    pub fn precedes(&self, record: &Record) -> bool {
        (record.created_at, &record.key) < (self.created_at, &self.key)
    }

    /// The cursor given to a store, or the store's
    /// [`StoreError::BadCursor`] naming it.
    pub fn parse_for(store: &str, cursor: &str) -> Result<OpenCursor, StoreError> {
        cursor.parse().map_err(|()| StoreError::BadCursor {
            store: store.to_owned(),
            cursor: cursor.to_owned(),
            kind: "open-records scan",
        })
    }
}

impl fmt::Display for OpenCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.created_at.as_millis(), self.key.as_str())
    }
}

impl FromStr for OpenCursor {
    type Err = ();

    fn from_str(text: &str) -> Result<OpenCursor, ()> {
        let (millis, key) = text.split_once(':').ok_or(())?;
        Ok(OpenCursor {
            created_at: Timestamp(millis.parse().map_err(|_| ())?),
            key: IdempotencyKey::parse(key).map_err(|_| ())?,
        })
    }
}

/// [`StoreExt::scan_open`] for a store without an index of its open records:
/// every page reads the whole store with [`StoreExt::scan`], keeps the open
/// records after `cursor`, and returns the newest `limit` of them. Its
/// cost grows with the store, not with the page (and with a store whose
/// scan pages cost the store's size, such as the memory store's, with its
/// square): correct for any store, fast for none of any size.
pub async fn scan_open_by_scanning<S: Store + ?Sized>(
    store: &S,
    cursor: Option<&str>,
    limit: usize,
) -> Result<ScanPage, StoreError> {
    let after = cursor
        .map(|c| OpenCursor::parse_for(&store.describe(), c))
        .transpose()?;
    let limit = limit.max(1);
    let mut open = Vec::new();
    let mut corrupt = Vec::new();
    let mut next = None;
    loop {
        let page = store.scan(next.as_deref(), 1000).await?;
        open.extend(
            page.records
                .into_iter()
                .filter(|r| r.is_open() && after.as_ref().is_none_or(|a| a.precedes(r))),
        );
        // Corrupt records have no creation time to order them by: the
        // first page reports them, once.
        if after.is_none() {
            corrupt.extend(page.corrupt);
        }
        match page.cursor {
            Some(c) => next = Some(c),
            None => break,
        }
    }
    open.sort_by(|a, b| (b.created_at, &b.key).cmp(&(a.created_at, &a.key)));
    let more = open.len() > limit;
    open.truncate(limit);
    Ok(ScanPage {
        cursor: OpenCursor::ending(open.last(), more),
        records: open,
        corrupt,
    })
}
