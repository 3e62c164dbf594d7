//! The simulation against correct stores: no duplicate effect and no lost
//! result, on every store; and on the memory store, the same seed replays
//! the same way.

use std::sync::Arc;

use idem_runtime::Store;
use idem_testkit::{skip, PostgresServer, RedisServer, Summary, TempDir};

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in [1, 7, 42, 1234] {
        let first = idem_testkit::run_memory(seed);
        let again = idem_testkit::run_memory(seed);
        assert_eq!(first.trace, again.trace, "seed {seed} replayed differently");
        assert_eq!(first.trace_hash, again.trace_hash);
        assert!(first.trace.len() > 10, "seed {seed} did next to nothing");
    }
    assert_ne!(
        idem_testkit::run_memory(1).trace_hash,
        idem_testkit::run_memory(2).trace_hash,
        "different seeds should make different schedules"
    );
}

#[test]
fn memory_store_no_duplicates_and_no_lost_results() {
    let mut summary = Summary::default();
    for seed in 1..=500 {
        summary.add(&idem_testkit::run_memory(seed));
    }
    eprintln!("memory: {}", summary.line());
    assert!(
        summary.passed(),
        "failing seeds: {:?}",
        summary.failing_seeds
    );
    // The faults did strike.
    assert!(summary.stale_writes_rejected > 0 && summary.unknown_outcomes > 0);
    assert!(summary.reconciled > 0);
}

/// How many schedules each durable store's test runs: 40, or
/// `IDEM_SIM_DURABLE_SCHEDULES` (the figures quoted run 1,000).
fn durable_schedules() -> u64 {
    std::env::var("IDEM_SIM_DURABLE_SCHEDULES")
        .ok()
        .map(|n| n.parse().expect("IDEM_SIM_DURABLE_SCHEDULES: a number"))
        .unwrap_or(40)
}

/// `schedules` schedules on a durable store, ten at a time, in real time.
/// The lease is longer than the example's: these tests run in debug
/// builds next to each other on small machines, and a worker starved of
/// CPU for longer than its lease is a real pause past the lease.
fn on_durable(name: &str, url: String, schedules: u64) {
    let timing = idem_testkit::Timing {
        lease: std::time::Duration::from_millis(600),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let summary = runtime.block_on(async {
        let store: Arc<dyn Store> = idem_runtime::store::connect(&url).await.unwrap();
        let tag = format!("test{}", std::process::id());
        let mut running = tokio::task::JoinSet::new();
        let mut summary = Summary::default();
        let mut seeds = 1..=schedules;
        loop {
            while running.len() < 10 {
                let Some(seed) = seeds.next() else { break };
                let (store, tag) = (store.clone(), tag.clone());
                running.spawn(
                    async move { idem_testkit::run_durable(store, seed, &tag, timing).await },
                );
            }
            let Some(report) = running.join_next().await else {
                break;
            };
            let report = report.unwrap();
            if report.failed() {
                eprintln!(
                    "{name} seed {} failed:\n{}",
                    report.seed,
                    report.trace.join("\n")
                );
            }
            summary.add(&report);
        }
        store.close().await;
        summary
    });
    eprintln!("{name}: {}", summary.line());
    assert!(
        summary.passed(),
        "failing seeds: {:?}",
        summary.failing_seeds
    );
}

#[test]
fn sqlite_store_no_duplicates_and_no_lost_results() {
    let dir = TempDir::new("idem-sim-sqlite").unwrap();
    let url = format!("sqlite://{}", dir.path().join("chaos.db").display());
    on_durable("sqlite", url, durable_schedules());
}

#[test]
fn redis_store_no_duplicates_and_no_lost_results() {
    let Some(server) = RedisServer::start() else {
        return skip(
            "redis_store_no_duplicates_and_no_lost_results",
            "redis-server",
        );
    };
    on_durable("redis", server.url(), durable_schedules());
}

#[test]
fn postgres_store_no_duplicates_and_no_lost_results() {
    let Some(server) = PostgresServer::start() else {
        return skip(
            "postgres_store_no_duplicates_and_no_lost_results",
            "PostgreSQL",
        );
    };
    on_durable("postgres", server.url(), durable_schedules());
}
