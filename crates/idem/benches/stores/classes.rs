//! Durability by class: what a first call costs as an `idempotent_write`
//! (its claim need not be durable), as a `non_idempotent_write` (durable
//! claim, durable started mark, durable completion), and as an
//! `idempotent_write` whose claims are forced durable — what every call
//! paid before durability followed the class. All three in one run, on
//! one store each, so that the ratios are the same run's.
//!
//! The "before" row runs the same tool through a
//! [`ForceDurable`](crate::class::ForceDurable) hook,
//! which sets [`ClaimRequest::durable`] on every claim before it reaches
//! the store (and the counting probe behind it).
//!
//! PostgreSQL is measured on a server of its own started with
//! `fsync=on` ([`PostgresServer::start_with`](idem_testkit::PostgresServer::start_with)):
//! on the test server (`fsync=off`) a WAL flush costs nothing and the
//! classes would not differ.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idem::Executor;
use idem_postgres::PostgresStore;
use idem_runtime::store::Store;

use crate::backend::{Backend, Raw};
use crate::class::Class;
use crate::config::Config;
use crate::fsync::{class_fsyncs, FSYNC_CALLS};
use crate::timing::{mean_latency, micros};
use idem_runtime::store::StoreExt;

/// One row: a class on one store.
#[derive(Debug, Clone)]
pub struct ClassRow {
    pub class: Class,
    /// Mean latency of a first call, one at a time.
    pub first: Duration,
    /// Store operations per first call.
    pub ops: f64,
    /// SQLite: fsync + fdatasync per first call (`strace`).
    pub fsyncs: Option<f64>,
    /// PostgreSQL: WAL bytes per first call.
    pub wal_bytes: Option<f64>,
    /// PostgreSQL: `pg_stat_wal`'s `wal_write` and `wal_sync` per first
    /// call.
    pub wal_flushes: Option<(f64, f64)>,
    /// (workers, calls per second).
    pub workers: Vec<(usize, f64)>,
}

#[derive(Debug)]
pub struct ClassReport {
    pub store: &'static str,
    pub rows: Vec<ClassRow>,
}

/// Calls per second of `class` with `workers` tasks, each making first
/// calls on its own keys one after the other.
async fn throughput(exec: &Executor, class: Class, workers: usize, budget: Duration) -> f64 {
    let deadline = Instant::now() + budget;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let exec = exec.clone();
        tasks.spawn(async move {
            let run = format!("{}-workers-{workers}-{w}", class.tag());
            let mut n = 0u64;
            while Instant::now() < deadline {
                class.call(&exec, &run, n).await;
                n += 1;
            }
            n
        });
    }
    let calls: u64 = tasks.join_all().await.into_iter().sum();
    calls as f64 / started.elapsed().as_secs_f64()
}

/// `pg_stat_wal`'s `wal_write` and `wal_sync`, once every client backend
/// but `client`'s own has exited (a backend reports its WAL statistics at
/// most once a second while busy, and when it exits) and the WAL writer
/// has had time to report its own (it does each round, every 200 ms).
async fn wal_stats(client: &tokio_postgres::Client) -> (i64, i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
                &[],
            )
            .await
            .expect("pg_stat_activity");
        let others: i64 = row.get(0);
        if others == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(450)).await;
    client
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await
        .expect("clear the statistics snapshot");
    let row = client
        .query_one("SELECT wal_write, wal_sync FROM pg_stat_wal", &[])
        .await
        .expect("pg_stat_wal");
    (row.get(0), row.get(1))
}

/// `wal_write` and `wal_sync` of `calls` first calls of `class` through a
/// store of their own on `url`, closed at the end (so that its backends
/// exit and report): the deltas from before it connected to after it
/// closed.
async fn wal_flushes_of(
    client: &tokio_postgres::Client,
    url: &str,
    class: Class,
    calls: u64,
) -> (i64, i64) {
    let before = wal_stats(client).await;
    let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(url).await.expect("connect"));
    let exec = class.executor(store.clone());
    let run = format!("{}-flushes-{calls}", class.tag());
    for i in 0..calls {
        class.call(&exec, &run, i).await;
    }
    drop(exec);
    store.close().await;
    drop(store);
    let after = wal_stats(client).await;
    (after.0 - before.0, after.1 - before.1)
}

/// WAL writes and syncs per first call of `class`, net of connecting and
/// closing a store (a run with no call).
async fn wal_flushes(client: &tokio_postgres::Client, url: &str, class: Class) -> (f64, f64) {
    let idle = wal_flushes_of(client, url, class, 0).await;
    let busy = wal_flushes_of(client, url, class, FSYNC_CALLS).await;
    let n = FSYNC_CALLS as f64;
    ((busy.0 - idle.0) as f64 / n, (busy.1 - idle.1) as f64 / n)
}

/// Every per-class figure of store `name` (PostgreSQL: on a server with
/// `fsync=on`).
pub async fn measure_classes(name: &'static str, config: &Config) -> Option<ClassReport> {
    let b = Arc::new(Backend::open_with(name, true).await?);
    eprintln!("== {name}, by class");
    let store: Arc<dyn Store> = b.probe.clone();
    let execs: Vec<(Class, Executor)> = Class::ALL
        .into_iter()
        .map(|c| (c, c.executor(store.clone())))
        .collect();
    for (class, exec) in &execs {
        // Warm up: connections, prepared statements, the reader pool.
        for i in 0..50 {
            class.call(exec, &format!("{}-warm", class.tag()), i).await;
        }
    }
    let mut rows: Vec<ClassRow> = Class::ALL
        .into_iter()
        .map(|class| ClassRow {
            class,
            first: Duration::ZERO,
            ops: 0.0,
            fsyncs: None,
            wal_bytes: None,
            wal_flushes: None,
            workers: Vec::new(),
        })
        .collect();
    // First calls, one at a time: the classes take turns, ROUNDS times
    // each with a share of the budget, so that the machine's load (other
    // work on the same cores and disk) drifts over all of them alike.
    const ROUNDS: u32 = 3;
    let mut totals = vec![(Duration::ZERO, 0u64, 0u64, Some(0u64)); execs.len()];
    for round in 0..ROUNDS {
        for (c, (class, exec)) in execs.iter().enumerate() {
            b.settle().await;
            let (ops0, wal0) = (b.ops(), b.wal().await);
            let run = format!("{}-first-{round}", class.tag());
            let (mean, n) = mean_latency(
                config.calls.div_ceil(ROUNDS as usize),
                config.budget / ROUNDS,
                |i| {
                    let run = &run;
                    async move { class.call(exec, run, i).await }
                },
            )
            .await;
            let (ops1, wal1) = (b.ops(), b.wal().await);
            let t = &mut totals[c];
            t.0 += mean * n as u32;
            t.1 += n;
            t.2 += ops1 - ops0;
            t.3 = match (t.3, wal0, wal1) {
                (Some(sum), Some(a), Some(z)) => Some(sum + (z - a)),
                _ => None,
            };
        }
    }
    for (row, &(time, n, ops, wal)) in rows.iter_mut().zip(&totals) {
        row.first = time / n as u32;
        row.ops = ops as f64 / n as f64;
        row.wal_bytes = wal.map(|w| w as f64 / n as f64);
        eprintln!(
            "  {}: first {:.1} µs, {:.2} ops",
            row.class.label(),
            micros(row.first),
            row.ops
        );
    }
    // Throughput: the classes take turns at each number of workers, each
    // going first in turn.
    for (k, workers) in [1, 4, 16, 64].into_iter().enumerate() {
        for j in 0..execs.len() {
            let c = (j + k) % execs.len();
            let (class, exec) = &execs[c];
            b.settle().await;
            let rate = throughput(exec, *class, workers, config.budget).await;
            eprintln!("  {}, {workers} workers: {rate:.0} calls/s", class.label());
            rows[c].workers.push((workers, rate));
        }
    }
    // Closed before counting PostgreSQL's flushes, which waits for every
    // other client backend to exit.
    b.probe.close().await;
    match &b.raw {
        Raw::Sqlite(_) => {
            for row in &mut rows {
                row.fsyncs = class_fsyncs(name == "sqlite-normal", row.class);
            }
        }
        Raw::Postgres(client) => {
            let url = b.url.clone().expect("a PostgreSQL server's URL");
            for row in &mut rows {
                row.wal_flushes = Some(wal_flushes(client, &url, row.class).await);
            }
        }
        _ => {}
    }
    Some(ClassReport { store: name, rows })
}
