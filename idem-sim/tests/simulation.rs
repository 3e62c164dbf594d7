//! The simulation against correct stores: no duplicate effect and no lost
//! result, on every store; and on the memory store, the same seed replays
//! the same way.

use std::sync::Arc;

use idem_runtime::testing::{skip, PostgresServer, RedisServer, TempDir};
use idem_runtime::Store;
use idem_sim::Summary;

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in [1, 7, 42, 1234] {
        let first = idem_sim::run_memory(seed);
        let again = idem_sim::run_memory(seed);
        assert_eq!(first.trace, again.trace, "seed {seed} replayed differently");
        assert_eq!(first.trace_hash, again.trace_hash);
        assert!(first.trace.len() > 10, "seed {seed} did next to nothing");
    }
    assert_ne!(
        idem_sim::run_memory(1).trace_hash,
        idem_sim::run_memory(2).trace_hash,
        "different seeds should make different schedules"
    );
}

#[test]
fn memory_store_no_duplicates_and_no_lost_results() {
    let mut summary = Summary::default();
    for seed in 1..=500 {
        summary.add(&idem_sim::run_memory(seed));
    }
    eprintln!("memory: {}", summary.line());
    assert!(summary.passed(), "failing seeds: {:?}", summary.failing_seeds);
    // The faults did strike.
    assert!(summary.stale_writes_rejected > 0 && summary.unknown_outcomes > 0);
    assert!(summary.reconciled > 0);
}

/// `schedules` schedules on a durable store, all at once, in real time.
fn on_durable(store: &str, url: String, schedules: u64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let summary = runtime.block_on(async {
        let store: Arc<dyn Store> = idem_runtime::store::connect(&url).await.unwrap();
        let mut running = tokio::task::JoinSet::new();
        for seed in 1..=schedules {
            let store = store.clone();
            running.spawn(async move { idem_sim::run_durable(store, seed, "test").await });
        }
        let mut summary = Summary::default();
        while let Some(report) = running.join_next().await {
            summary.add(&report.unwrap());
        }
        store.close().await;
        summary
    });
    eprintln!("{store}: {}", summary.line());
    assert!(summary.passed(), "failing seeds: {:?}", summary.failing_seeds);
}

#[test]
fn sqlite_store_no_duplicates_and_no_lost_results() {
    let dir = TempDir::new("idem-sim-sqlite").unwrap();
    let url = format!("sqlite://{}", dir.path().join("chaos.db").display());
    on_durable("sqlite", url, 40);
}

#[test]
fn redis_store_no_duplicates_and_no_lost_results() {
    let Some(server) = RedisServer::start() else {
        return skip("redis_store_no_duplicates_and_no_lost_results", "redis-server");
    };
    on_durable("redis", server.url(), 40);
}

#[test]
fn postgres_store_no_duplicates_and_no_lost_results() {
    let Some(server) = PostgresServer::start() else {
        return skip("postgres_store_no_duplicates_and_no_lost_results", "PostgreSQL");
    };
    on_durable("postgres", server.url(), 40);
}
