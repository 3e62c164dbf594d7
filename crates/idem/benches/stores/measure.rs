//! Measurements: every figure of one store.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Backend, Raw};
use crate::common::{args, send_email};
use crate::config::Config;
use crate::expiry::{expiry_stall, Expiry};
use crate::fsync::fsyncs;
use crate::timing::{caller, mean_latency, micros, quantile};
use idem_runtime::store::StoreExt;

#[derive(Debug, Default, Clone, Copy)]
pub struct PerCall {
    pub latency: Duration,
    pub ops: f64,
    pub wal: Option<f64>,
}

#[derive(Debug, Default)]
pub struct Report {
    pub store: &'static str,
    pub first: PerCall,
    pub duplicate: PerCall,
    pub fsyncs: Option<(f64, f64)>,
    pub burst: Option<(Duration, u64, u64, u64)>,
    pub workers: Vec<(usize, f64)>,
    pub sizes: Vec<(usize, Duration, Duration)>,
    pub sweep: Option<Sweep>,
    /// Redis's counterpart of `sweep`: records lapsing together.
    pub expiry: Option<Expiry>,
}

#[derive(Debug, Clone, Copy)]
pub struct Sweep {
    pub records: u64,
    pub deleted: u64,
    pub took: Duration,
    pub calls: u64,
    pub median: Duration,
    pub p99: Duration,
    pub worst: Duration,
    pub baseline_median: Duration,
    pub baseline_worst: Duration,
}

/// First calls (distinct keys) then duplicates of them; per call: mean
/// latency, store operations, WAL bytes.
pub async fn first_and_duplicate(b: &Backend, config: &Config, run: &str) -> (PerCall, PerCall) {
    b.settle().await;
    let (ops0, wal0) = (b.ops(), b.wal().await);
    let (first, n) = mean_latency(config.calls, config.budget, |i| async move {
        b.call(run, i).await;
    })
    .await;
    b.settle().await;
    let (ops1, wal1) = (b.ops(), b.wal().await);
    let (duplicate, m) = mean_latency(config.calls, config.budget, |i| async move {
        let out = b.call(run, i % n).await;
        debug_assert!(out.meta.deduplicated);
    })
    .await;
    let (ops2, wal2) = (b.ops(), b.wal().await);
    let per =
        |a: Option<u64>, z: Option<u64>, calls: u64| Some((z? as f64 - a? as f64) / calls as f64);
    (
        PerCall {
            latency: first,
            ops: (ops1 - ops0) as f64 / n as f64,
            wal: per(wal0, wal1, n),
        },
        PerCall {
            latency: duplicate,
            ops: (ops2 - ops1) as f64 / m as f64,
            wal: per(wal1, wal2, m),
        },
    )
}

/// `config.burst` concurrent calls of one new key: wall time, claims sent
/// to the store, claims it answered on the caller's thread, and how many
/// callers got a recorded (deduplicated) answer.
pub async fn burst(b: &Backend, config: &Config) -> (Duration, u64, u64, u64) {
    let claims = b.probe.hook().claims.load(Ordering::Relaxed);
    let local = b.probe.hook().local.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..config.burst {
        let exec = b.exec.clone();
        calls.spawn(async move {
            let out = exec
                .call(send_email, args())
                .run("burst", 0)
                .await
                .expect("call");
            u64::from(out.meta.deduplicated)
        });
    }
    let deduplicated = calls.join_all().await.into_iter().sum();
    let took = started.elapsed();
    let claims = b.probe.hook().claims.load(Ordering::Relaxed) - claims;
    let local = b.probe.hook().local.load(Ordering::Relaxed) - local;
    (took, claims, local, deduplicated)
}

/// Calls per second with `workers` tasks, each making first calls on its
/// own keys one after the other.
pub async fn throughput(b: &Arc<Backend>, workers: usize, budget: Duration) -> f64 {
    let deadline = Instant::now() + budget;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let b = b.clone();
        tasks.spawn(async move {
            let run = format!("workers-{workers}-{w}");
            let mut n = 0u64;
            while Instant::now() < deadline {
                b.call(&run, n).await;
                n += 1;
            }
            n
        });
    }
    let calls: u64 = tasks.join_all().await.into_iter().sum();
    calls as f64 / started.elapsed().as_secs_f64()
}

/// Fill the store with `records` expired records and sweep them while a
/// caller keeps calling; its worst latency then and without a sweep.
pub async fn sweep_stall(b: &Arc<Backend>, records: u64, budget: Duration) -> Sweep {
    const BASE: u64 = 1 << 40;
    b.fill(BASE, BASE + records, Duration::from_millis(1)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let alone = tokio::spawn(caller(b.clone(), "sweep-baseline".into(), stop.clone()));
    tokio::time::sleep(budget).await;
    stop.store(true, Ordering::Relaxed);
    let baseline = alone.await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let during = tokio::spawn(caller(b.clone(), "sweep-caller".into(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let deleted = b.probe.sweep().await.expect("sweep");
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let during = during.await.unwrap();
    Sweep {
        records,
        deleted,
        took,
        calls: during.len() as u64,
        median: quantile(&during, 0.5),
        p99: quantile(&during, 0.99),
        worst: quantile(&during, 1.0),
        baseline_median: quantile(&baseline, 0.5),
        baseline_worst: quantile(&baseline, 1.0),
    }
}

/// First call and duplicate with `size` records present, for each size.
pub async fn growth(b: &Backend, config: &Config) -> Vec<(usize, Duration, Duration)> {
    let mut present = 0;
    let mut rows = Vec::new();
    for &size in &config.sizes {
        let started = Instant::now();
        b.fill(present as u64, size as u64, Duration::from_secs(86_400))
            .await;
        eprintln!(
            "  {}: {} records added in {:.1} s",
            b.name,
            size - present,
            started.elapsed().as_secs_f64()
        );
        present = size;
        let calls = config.calls.min(1000);
        let config = Config {
            calls,
            ..config.clone()
        };
        let (first, duplicate) = first_and_duplicate(b, &config, &format!("size-{size}")).await;
        rows.push((size, first.latency, duplicate.latency));
    }
    rows
}

pub async fn measure(name: &'static str, config: &Config) -> Option<Report> {
    let b = Arc::new(Backend::open(name).await?);
    eprintln!("== {name}");
    // Warm up: connections, prepared statements, the SQLite reader pool.
    for i in 0..50 {
        b.call("warm", i).await;
        b.call("warm", i).await;
    }
    let (first, duplicate) = first_and_duplicate(&b, config, "first").await;
    eprintln!(
        "  first {:.1} µs, duplicate {:.1} µs",
        micros(first.latency),
        micros(duplicate.latency)
    );
    let mut report = Report {
        store: name,
        first,
        duplicate,
        ..Report::default()
    };
    if config.burst > 0 {
        let burst = burst(&b, config).await;
        eprintln!(
            "  burst {:?}, {} claims sent, {} answered locally",
            burst.0, burst.1, burst.2
        );
        report.burst = Some(burst);
    }
    for workers in [1, 4, 16, 64] {
        let rate = throughput(&b, workers, config.budget).await;
        eprintln!("  {workers} workers: {rate:.0} calls/s");
        report.workers.push((workers, rate));
    }
    if config.sweep > 0 && name.starts_with("redis") {
        // Redis deletes expired records itself: the server's expiry of
        // many at once, swept meanwhile.
        let expiry = expiry_stall(&b, config.sweep as u64, config.budget).await;
        eprintln!("  {expiry:?}");
        report.expiry = Some(expiry);
    } else if config.sweep > 0 {
        let sweep = sweep_stall(&b, config.sweep as u64, config.budget).await;
        eprintln!("  {sweep:?}");
        report.sweep = Some(sweep);
    }
    report.sizes = growth(&b, config).await;
    if let Raw::Sqlite(_) = b.raw {
        report.fsyncs = fsyncs(name == "sqlite-normal");
    }
    b.probe.close().await;
    Some(report)
}
