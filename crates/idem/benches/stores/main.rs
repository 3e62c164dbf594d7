//! Every store through the public `Executor` API, against the naive
//! `Mutex<HashMap>` wrapper of `benches/overhead.rs` measured in the same
//! run: latency of a first call and of a duplicate, a burst of concurrent
//! calls of one key, throughput with 1, 4, 16 and 64 workers, the cost of a
//! call as the store grows, and how long a sweep of expired records stalls
//! a caller. Per call it also counts store operations (round trips), fsyncs
//! (SQLite, with `strace`) and WAL bytes (PostgreSQL).
//!
//! ```sh
//! cargo bench --bench stores --features redis,postgres
//! ```
//!
//! Redis and PostgreSQL are real servers started on loopback in temporary
//! directories by `idem_testkit::servers` (Redis without persistence,
//! PostgreSQL with `fsync=off`, and a second one with `fsync=on` for the
//! per-class figures); a store whose server is not installed is
//! reported as SKIPPED. SQLite files are in the system's temporary
//! directory. The results are printed as Markdown tables at the end.
//!
//! Knobs (environment variables):
//!
//! * `IDEM_BENCH_STORES`: which stores, comma-separated, of `memory`,
//!   `sqlite-full`, `sqlite-normal`, `redis`, `postgres` (default: all).
//! * `IDEM_BENCH_SIZES`: records already present for the growth table
//!   (default `10000,100000`; `10000,100000,1000000` for the full table;
//!   empty to skip).
//! * `IDEM_BENCH_SWEEP`: expired records swept while a caller keeps calling
//!   (default `100000`; `0` to skip). Redis deletes expired records
//!   itself: there, as many records lapse together while the store is
//!   swept over and over ([`expiry`]).
//! * `IDEM_BENCH_CALLS`: the most calls per latency figure (default 2000).
//! * `IDEM_BENCH_SECS`: the longest a latency figure or a throughput point
//!   runs, in seconds (default 1).
//! * `IDEM_BENCH_BURST`: concurrent calls of one key (default 10000).
//! * `IDEM_BENCH_SQLITE_RECORD_CACHE`: bytes of decoded records the SQLite
//!   stores keep (default the store's own; `0` decodes every duplicate).
//! * `IDEM_BENCH_CLASSES`: the stores measured by class ([`classes`]:
//!   `idempotent_write`, `non_idempotent_write`, and `idempotent_write`
//!   with durable claims as before), PostgreSQL on a server with
//!   `fsync=on` (default `sqlite-full,sqlite-normal,postgres`; empty to
//!   skip).
//!
//! * `IDEM_BENCH_INBOX`: the stores whose inbox is measured at scale
//!   ([`inbox`]: `IDEM_BENCH_INBOX_RECORDS` records, default 10⁶, of
//!   which `IDEM_BENCH_INBOX_OPEN` await approval, default 10⁴; default
//!   none: filling takes minutes). The inbox alone:
//!   `IDEM_BENCH_STORES= IDEM_BENCH_CLASSES= IDEM_BENCH_INBOX=sqlite-normal,redis,postgres`.
//!
//! Nothing here is a test: `cargo test` never runs it, and no result is
//! checked against a threshold.
//!
//! The parts: [`probe`] counts store operations, [`config`] reads the
//! knobs, [`timing`] times calls and the naive wrapper, [`backend`] opens
//! and fills each store, [`measure`] takes every figure of one store
//! ([`expiry`] Redis's counterpart of the sweep figure),
//! [`fsync`] counts SQLite's fsyncs under `strace`, [`classes`] takes the
//! per-class figures, [`inbox`] the inbox's at scale, and [`report`] prints the tables.

#![allow(unreachable_pub)] // `pub` for the other modules of this target
#[path = "../common/mod.rs"]
mod common;

mod backend;
mod class;
mod classes;
mod config;
mod expiry;
mod fsync;
mod inbox;
mod measure;
mod probe;
mod report;
mod timing;

use classes::measure_classes;
use config::{Config, ALL_STORES};
use fsync::{fsync_child, FSYNC_CHILD};
use inbox::{measure_inbox, print_inbox_table};
use measure::measure;
use report::{print_class_tables, print_tables};
use timing::{micros, naive};

/// The runtime every part of the bench runs on: two workers, as the
/// machine has two cores.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn main() {
    if let Ok(spec) = std::env::var(FSYNC_CHILD) {
        fsync_child(&spec);
        return;
    }
    let config = Config::from_env();
    eprintln!("{config:?}");
    let rt = runtime();
    rt.block_on(async {
        let naive = naive(&config).await;
        eprintln!(
            "naive: first {:.2} µs, duplicate {:.2} µs",
            micros(naive.0),
            micros(naive.1)
        );
        each_store(
            &config.stores,
            "",
            async |name| measure(name, &config).await,
            |reports| print_tables(&config, naive, reports),
        )
        .await;
        each_store(
            &config.inbox_stores,
            " inbox",
            async |name| measure_inbox(name).await,
            print_inbox_table,
        )
        .await;
        each_store(
            &config.class_stores,
            " by class",
            async |name| measure_classes(name, &config).await,
            print_class_tables,
        )
        .await;
    });
}

/// Measure each store of `selected` in turn, in the order of
/// [`ALL_STORES`], printing the tables of the reports so far after each (in
/// case a later store fails); a store `measure` skips has no report.
async fn each_store<R>(
    selected: &[String],
    what: &str,
    measure: impl AsyncFn(&'static str) -> Option<R>,
    print: impl Fn(&[R]),
) {
    let mut reports = Vec::new();
    for name in ALL_STORES {
        if selected.iter().any(|s| s == name) {
            if let Some(report) = measure(name).await {
                reports.push(report);
                eprintln!("{name}{what} done");
                print(&reports);
            }
        }
    }
}
