//! What `idem proxy --listen` adds to a call at a fixed rate: the same
//! calls sent on a schedule (open loop: each call is sent at its time
//! whether or not the earlier ones have been answered, and timed from that
//! time, so a slow answer delays no measurement) to an MCP server over
//! streamable HTTP directly and through the proxy, in one run.
//!
//! ```text
//! cargo bench -p idem-cli --bench proxy_rate            # 1,000 calls per rate
//! cargo bench -p idem-cli --bench proxy_rate -- 5000    # more
//! ```
//!
//! The upstream is a small MCP server in this process (JSON answers, no
//! session), so that what is measured is HTTP and the proxy, not a tool:
//! `echo` (annotated read-only: the proxy never records it), `write`
//! (annotated idempotent: the proxy claims and completes a record of it in
//! its SQLite store, the default, for each call's own key), and `write`
//! again with the same keys (a duplicate: answered from the record). The
//! proxy runs as users run it, a release build with its logs (`info`, an
//! access line per call, written to a file) and its metrics on. For each
//! call and rate
//! (100 and 1,000 calls a second) the bench prints the 50th, 90th and 99th
//! percentiles and the maximum of each path in milliseconds, and the
//! difference: what the proxy adds. 100 calls at the rate are sent first
//! and not counted.

use std::sync::Arc;
use std::time::Duration;

#[path = "../tests/support/mcp_http.rs"]
#[allow(unreachable_pub, dead_code)] // shared with the tests, which use all of it
mod mcp_http;

use mcp_http::{serve_upstream, Proxy, Session};

/// The rates measured, in calls a second.
const RATES: [u64; 2] = [100, 1_000];

/// Calls sent at the rate before the measured ones.
const WARM_UP: u64 = 100;

fn main() {
    let calls: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(calls));
}

async fn run(calls: u64) {
    let upstream = serve_upstream().await;
    let place = idem_testkit::TempDir::new("idem-proxy-rate").expect("a temporary directory");
    let proxy = Proxy::start(upstream, place.path(), &[]);
    let http = mcp_http::http();
    let direct = Arc::new(Session::open(http.clone(), format!("http://{upstream}/mcp")).await);
    let proxied = Arc::new(Session::open(http, proxy.url.clone()).await);

    println!(
        "proxy_rate: {calls} calls per rate and tool, open loop, after {WARM_UP} unmeasured; ms"
    );
    println!("| call | calls/s | path | p50 | p90 | p99 | max | failed |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut added = Vec::new();
    // A duplicate is `write` sent again with the keys (and arguments) of
    // the `write` row at its rate: answered from the record by the proxy,
    // run again by the upstream called directly.
    for (row_name, tool) in [("echo", "echo"), ("write", "write"), ("duplicate", "write")] {
        for rate in RATES {
            let mut row = Vec::new();
            for (path, session) in [("direct", &direct), ("proxy", &proxied)] {
                let label = format!("{path}-{tool}-{rate}");
                schedule(session, tool, rate, WARM_UP, &format!("warm-{label}")).await;
                let (mut spent, failed) = schedule(session, tool, rate, calls, &label).await;
                spent.sort_by(f64::total_cmp);
                let p = [
                    percentile(&spent, 0.50),
                    percentile(&spent, 0.90),
                    percentile(&spent, 0.99),
                    spent.last().copied().unwrap_or(f64::NAN),
                ];
                println!(
                    "| {row_name} | {rate} | {path} | {:.3} | {:.3} | {:.3} | {:.3} | {failed} |",
                    p[0], p[1], p[2], p[3]
                );
                row.push(p);
            }
            added.push((row_name, rate, row));
        }
    }
    println!("\nwhat the proxy adds (proxy − direct), ms:");
    println!("| call | calls/s | p50 | p90 | p99 |");
    println!("|---|---|---|---|---|");
    for (tool, rate, row) in added {
        let [direct, proxied] = [row[0], row[1]];
        println!(
            "| {tool} | {rate} | {:.3} | {:.3} | {:.3} |",
            proxied[0] - direct[0],
            proxied[1] - direct[1],
            proxied[2] - direct[2]
        );
    }
    println!("\nthe proxy's log: {} lines", proxy.log_lines());
    drop(proxy);
}

/// `n` calls of `tool` at `rate` a second, each timed from its scheduled
/// time to its answer: the milliseconds of each, and how many failed.
async fn schedule(
    session: &Arc<Session>,
    tool: &str,
    rate: u64,
    n: u64,
    label: &str,
) -> (Vec<f64>, u64) {
    let interval = Duration::from_secs(1) / u32::try_from(rate).expect("a rate");
    let start = tokio::time::Instant::now() + Duration::from_millis(20);
    let mut calls = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    for i in 0..n {
        let at = start + interval * u32::try_from(i).expect("fewer calls");
        tokio::time::sleep_until(at).await;
        let session = session.clone();
        let (tool, key) = (tool.to_owned(), format!("{label}-{i}"));
        calls.push(tokio::spawn(async move {
            let ok = session.call(&tool, &key, i).await;
            (at.elapsed().as_secs_f64() * 1000.0, ok)
        }));
    }
    let mut spent = Vec::with_capacity(calls.len());
    let mut failed = 0;
    for call in calls {
        let (ms, ok) = call.await.expect("a call's task");
        spent.push(ms);
        failed += u64::from(!ok);
    }
    (spent, failed)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    // Nearest rank.
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
