//! The inbox at scale: a store of `IDEM_BENCH_INBOX_RECORDS` records (10⁶
//! by default), `IDEM_BENCH_INBOX_OPEN` of them awaiting approval (10⁴),
//! the rest settled. Timed: the inbox's first page (50 items, read as
//! `idem serve` reads it: [`Operator::list`] with the inbox's statuses,
//! through [`StoreExt::scan_open`]), the next page from its cursor, and a
//! refresh of the live watcher (the first page and the audit events since
//! its last look). The baseline, in the same run on the same data: the
//! first page read by scanning the whole store once
//! ([`scan_open_by_scanning`], what every page cost before the index;
//! not for the memory store, whose scan is quadratic).
//!
//! The settled records are copied from a real one straight into the
//! store ([`Backend::fill`]); the open ones are claimed and parked through
//! the store itself, so its index of open records is the one its writes
//! keep.

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::audit::AuditQuery;
use idem_runtime::clock::Timestamp;
use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::operator::{Filter, Operator};
use idem_runtime::record::{CallInfoRef, RecordState, Status};
use idem_runtime::store::{
    scan_open_by_scanning, ClaimOutcome, ClaimRequest, Expected, ExpectedState, Store,
};

use crate::backend::{filler_key, Backend};
use crate::config::env_or;
use idem_runtime::store::StoreExt;

/// One store's figures.
#[derive(Debug)]
pub struct InboxReport {
    pub store: &'static str,
    pub records: u64,
    pub open: u64,
    /// Median and slowest of the first page, the next page, a refresh.
    pub first: (Duration, Duration),
    pub next: (Duration, Duration),
    pub refresh: (Duration, Duration),
    /// The first page by scanning the whole store (one run); `None` for
    /// the memory store, whose scan pages each sort the whole map (the
    /// scan of 10⁶ records takes many minutes).
    pub scanned: Option<Duration>,
}

/// How many times each figure is taken.
const ROUNDS: usize = 30;

/// The inbox's statuses, as `idem serve` lists them.
fn inbox_filter() -> Filter {
    Filter {
        status: vec![Status::AwaitingApproval, Status::Unknown, Status::InFlight],
        ..Filter::default()
    }
}

/// What [`park_open`] leaves each claimed call as.
#[derive(Debug, Clone, Copy)]
pub enum Parked {
    /// In flight: claimed, its lease ten minutes long.
    InFlight,
    /// Awaiting approval, the request lapsing a week after it was asked.
    Week,
    /// Awaiting approval, the request lapsing at this instant.
    Until(Timestamp),
}

/// Claim the calls of [`filler_key`]`(u64::MAX - i)` for each `i` in
/// `keys` through the store itself, 32 at a time, and leave them open as
/// `parked` says.
pub async fn park_open(store: &Arc<dyn Store>, keys: Range<u64>, parked: Parked) {
    let tasks: Vec<_> = (0..32u64)
        .map(|t| {
            let store = store.clone();
            let keys = keys.clone();
            tokio::spawn(async move {
                let fingerprint = Fingerprint::new("0".repeat(64));
                for i in (keys.start + t..keys.end).step_by(32) {
                    let key = IdempotencyKey::parse(&filler_key(u64::MAX - i)).unwrap();
                    let req = ClaimRequest {
                        key: &key,
                        tool: "delete_account",
                        fingerprint: &fingerprint,
                        check_fingerprint: true,
                        lease: Duration::from_secs(600),
                        info: CallInfoRef::EMPTY,
                        worker: None,
                        durable: true,
                    };
                    let ClaimOutcome::Acquired { fence, .. } = store.claim(&req).await.unwrap()
                    else {
                        panic!("open key {i} taken");
                    };
                    let expires_at = match parked {
                        Parked::InFlight => continue,
                        Parked::Week => None,
                        Parked::Until(at) => Some(at),
                    };
                    let mut record = store.get(&key).await.unwrap().unwrap();
                    let now = store.now().await.unwrap();
                    record.state = RecordState::AwaitingApproval {
                        fence,
                        requested_at: now,
                        expires_at: expires_at
                            .unwrap_or_else(|| now.plus(Duration::from_secs(7 * 24 * 3600))),
                        message: "needs a person".into(),
                    };
                    let expected = Expected {
                        fence,
                        state: ExpectedState::InFlight,
                    };
                    store
                        .replace(&key, expected, Some(&record), None)
                        .await
                        .unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// Median and slowest of `ROUNDS` runs of `f`.
async fn timed<F, Fut>(mut f: F) -> (Duration, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut times = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        f().await;
        times.push(start.elapsed());
    }
    times.sort();
    (times[ROUNDS / 2], times[ROUNDS - 1])
}

/// The inbox's figures on `name`.
pub async fn measure_inbox(name: &'static str) -> Option<InboxReport> {
    let records: u64 = env_or("IDEM_BENCH_INBOX_RECORDS", 1_000_000);
    let open: u64 = env_or("IDEM_BENCH_INBOX_OPEN", 10_000u64).min(records);
    let backend = Backend::open(name).await?;
    let started = Instant::now();
    backend
        .fill(0, records - open, Duration::from_secs(30 * 24 * 3600))
        .await;
    let store = backend.probe.inner().clone();
    park_open(&store, 0..open, Parked::Week).await;
    backend.settle().await;
    eprintln!(
        "inbox {name}: {records} records, {open} open, filled in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let operator = Operator::new(store.clone());
    let filter = inbox_filter();
    let page = operator.list(&filter, None, 50).await.unwrap();
    assert_eq!(page.records.len(), 50, "a full first page");
    let cursor = page.cursor.clone().expect("a second page");

    let first = timed(|| async {
        let page = operator.list(&filter, None, 50).await.unwrap();
        assert_eq!(page.records.len(), 50);
    })
    .await;
    let next = timed(|| async {
        let page = operator.list(&filter, Some(&cursor), 50).await.unwrap();
        assert_eq!(page.records.len(), 50);
    })
    .await;
    let since = store.now().await.unwrap();
    let refresh = timed(|| async {
        let page = operator.list(&filter, None, 50).await.unwrap();
        assert_eq!(page.records.len(), 50);
        let query = AuditQuery {
            since: Some(since),
            ..AuditQuery::default()
        };
        operator.audit(&query, None, 500).await.unwrap();
    })
    .await;
    let scanned = match name {
        "memory" => None,
        _ => {
            let start = Instant::now();
            let page = scan_open_by_scanning(&*store, None, 50).await.unwrap();
            assert_eq!(page.records.len(), 50);
            Some(start.elapsed())
        }
    };
    Some(InboxReport {
        store: name,
        records,
        open,
        first,
        next,
        refresh,
        scanned,
    })
}

/// The inbox's table, in Markdown.
pub fn print_inbox_table(reports: &[InboxReport]) {
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1e3);
    let mut s = String::from(
        "\nThe inbox at scale (median / slowest of 30; \"scan\": the first page read by scanning the whole store, once, same run; ÷: scan / first page):\n\n\
         | store | records | open | first page | next page | refresh | scan | ÷ |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in reports {
        s.push_str(&format!(
            "| {} | {} | {} | {} / {} | {} / {} | {} / {} | {} | {} |\n",
            r.store,
            r.records,
            r.open,
            ms(r.first.0),
            ms(r.first.1),
            ms(r.next.0),
            ms(r.next.1),
            ms(r.refresh.0),
            ms(r.refresh.1),
            r.scanned.map_or("–".to_owned(), ms),
            r.scanned.map_or("–".to_owned(), |d| format!(
                "{:.0}×",
                d.as_secs_f64() / r.first.0.as_secs_f64()
            )),
        ));
    }
    println!("{s}");
}
