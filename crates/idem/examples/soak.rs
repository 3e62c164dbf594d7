//! A soak: many first calls through the executor with a short TTL and a
//! sweeper, printing, per tenth of the run, the calls done, the process's
//! resident memory and the per-call cost of that tenth — so whether memory
//! and cost stay flat as records come and go is a number anyone can
//! reproduce.
//!
//! ```text
//! cargo run --release --example soak -p idem -- [--calls N] [--store memory|sqlite] [--no-sweeper] [--ttl SECS]
//! ```
//!
//! Every call is a first call of a `#[tool]` (a no-op body) at a new step
//! of one run; one in ten is then repeated (a duplicate, answered from the
//! record, not timed). Records live 3 s (`--ttl`); a sweeper task sweeps
//! the store every 500 ms unless `--no-sweeper`. With `--no-sweeper
//! --ttl 3600` nothing is swept or expires, so the RSS growth over the
//! run is what the records cost. `--calls` defaults to 10⁷ on the
//! memory store and 10⁶ on SQLite (a file in the temporary directory,
//! deleted at the end).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem::store::SqliteStore;
use idem::store::StoreExt;
use idem::{tool, Executor, MemoryStore, Store, ToolError};
use serde::{Deserialize, Serialize};

/// The arguments of every call.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Ping {
    n: u64,
}

/// What the tool returns.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pong {
    n: u64,
}

/// Answer a ping (a no-op, so only the call path is measured).
#[tool(class = "idempotent_write")]
async fn ping(args: Ping) -> Result<Pong, ToolError> {
    Ok(Pong { n: args.n })
}

/// How long a record lives unless `--ttl` says.
const TTL: Duration = Duration::from_secs(3);
/// How often the sweeper sweeps.
const SWEEP_EVERY: Duration = Duration::from_millis(500);

struct Options {
    calls: Option<u64>,
    sqlite: bool,
    sweeper: bool,
    ttl: Duration,
}

fn options() -> Options {
    let mut o = Options {
        calls: None,
        sqlite: false,
        sweeper: true,
        ttl: TTL,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--calls" => {
                let n = args.next().expect("--calls N");
                let n: f64 = n.parse().expect("--calls takes a number (2e6 works)");
                o.calls = Some(n as u64);
            }
            "--store" => match args.next().as_deref() {
                Some("memory") => o.sqlite = false,
                Some("sqlite") => o.sqlite = true,
                other => panic!("--store memory|sqlite, not {other:?}"),
            },
            "--no-sweeper" => o.sweeper = false,
            "--ttl" => {
                let secs = args.next().expect("--ttl SECS");
                let secs: f64 = secs.parse().expect("--ttl takes seconds (0.5 works)");
                o.ttl = Duration::from_secs_f64(secs);
            }
            other => panic!("unknown argument {other:?}"),
        }
    }
    o
}

/// The resident set size, in MiB, from `/proc/self/statm` (0 elsewhere).
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0.0, |pages| (pages * 4096) as f64 / (1024.0 * 1024.0))
}

fn main() {
    let o = options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(soak(o));
}

async fn soak(o: Options) {
    let db = std::env::temp_dir().join(format!("idem-soak-{}.db", std::process::id()));
    let (store, calls): (Arc<dyn Store>, u64) = if o.sqlite {
        let store = SqliteStore::open(&db).await.expect("open the SQLite file");
        (Arc::new(store), o.calls.unwrap_or(1_000_000))
    } else {
        (Arc::new(MemoryStore::new()), o.calls.unwrap_or(10_000_000))
    };
    let ttl = o.ttl;
    let exec = Executor::builder_shared(store.clone()).ttl(ttl).build();
    println!(
        "soak: {calls} first calls on {}, TTL {ttl:?}, one in ten repeated, sweeper {}, RSS at start {:.0} MiB",
        store.describe(),
        if o.sweeper { "every 500 ms" } else { "off" },
        rss_mib()
    );

    let swept = Arc::new(AtomicU64::new(0));
    let sweeper = o.sweeper.then(|| {
        let (store, swept) = (store.clone(), swept.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            loop {
                tick.tick().await;
                let n = store.sweep().await.expect("sweep");
                swept.fetch_add(n, Ordering::Relaxed);
            }
        })
    });

    println!(
        "{:>6} | {:>10} | {:>9} | {:>11} | {:>9} | {:>9} | {:>10}",
        "tenth", "calls", "RSS MiB", "median µs", "mean µs", "p99 µs", "swept"
    );
    let tenth = (calls / 10).max(1);
    let mut took: Vec<u32> = Vec::with_capacity(tenth as usize);
    let started = Instant::now();
    let mut i = 0u64;
    for part in 1..=10u64 {
        took.clear();
        let end = if part == 10 { calls } else { part * tenth };
        while i < end {
            let start = Instant::now();
            exec.call(ping, Ping { n: i })
                .run("soak", i)
                .await
                .expect("first call");
            took.push(start.elapsed().as_nanos().min(u32::MAX as u128) as u32);
            if i % 10 == 9 {
                exec.call(ping, Ping { n: i })
                    .run("soak", i)
                    .await
                    .expect("repeated call");
            }
            i += 1;
        }
        let mean = took.iter().map(|&t| u64::from(t)).sum::<u64>() as f64 / took.len() as f64;
        took.sort_unstable();
        let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
        println!(
            "{:>6} | {:>10} | {:>9.0} | {:>11.2} | {:>9.2} | {:>9.2} | {:>10}",
            part,
            i,
            rss_mib(),
            at(0.5),
            mean / 1000.0,
            at(0.99),
            swept.load(Ordering::Relaxed)
        );
    }
    println!("total {:.1} s", started.elapsed().as_secs_f64());
    if let Some(sweeper) = sweeper {
        sweeper.abort();
    }
    store.close().await;
    drop(exec);
    if o.sqlite {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    }
}
