//! Repeat windows on every real store, under real concurrency: bursts of
//! identical unkeyed calls from several workers (each with its own
//! connection), timed to straddle a second boundary, run the tool once per
//! burst; and a call with other arguments made through another worker ends
//! the window for all of them. This is what the tool's window index in the
//! store is for (one compare-and-swap per new effect); it relies on each
//! store answering a read after a write it has acknowledged, which every
//! backend must.
//!
//! Redis and PostgreSQL servers are started on loopback by the test; when
//! their binaries are missing the case is skipped loudly (a failure under
//! `IDEM_REQUIRE_SERVERS=1`).
#![cfg(all(feature = "sqlite", feature = "redis", feature = "postgres"))]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use idem::dispatch::{Arguments, ToolCall};
use idem::prelude::*;
use idem::RepeatWindow;
use idem_testkit::{skip, PostgresServer, RedisServer, TempDir};
use serde::{Deserialize, Serialize};

/// How often the tool body ran, per order.
#[derive(Clone, Default)]
struct Ledger {
    runs: Arc<Mutex<HashMap<u64, usize>>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Charge {
    order: u64,
}

/// Charge an order: repeating it charges twice.
#[tool(class = "non_idempotent_write")]
async fn charge(args: Charge, State(ledger): State<Ledger>) -> Result<u64, ToolError> {
    *ledger.runs.lock().unwrap().entry(args.order).or_default() += 1;
    Ok(args.order)
}

const WINDOW: Duration = Duration::from_secs(1);
const WORKERS: usize = 3;
const CALLS_PER_WORKER: usize = 6;
const BURSTS: u64 = 4;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Every burst straddles a boundary: its calls start between 40 ms before
/// and 40 ms after a multiple of the window, from `WORKERS` workers of
/// their own on the store at `url`. One charge per burst.
async fn bursts_across_boundaries_charge_once(url: &str) {
    let ledger = Ledger::default();
    let mut dispatchers = Vec::new();
    for worker in 0..WORKERS {
        let store = idem::store::connect(url).await.expect("the store opens");
        let executor = Executor::builder_shared(store)
            .state(ledger.clone())
            .worker(format!("worker-{worker}"))
            .build();
        dispatchers.push(Dispatcher::new(executor, idem::tools![charge]));
    }
    let run = RunContext::default().repeat_window(RepeatWindow::new(WINDOW));
    for burst in 0..BURSTS {
        let window_ms = WINDOW.as_millis() as u64;
        let boundary = (now_ms() / window_ms + 1) * window_ms;
        let mut calls = tokio::task::JoinSet::new();
        for (worker, dispatcher) in dispatchers.iter().enumerate() {
            for n in 0..CALLS_PER_WORKER {
                let dispatcher = dispatcher.clone();
                let run = run.clone();
                // Spread over [boundary - 40 ms, boundary + 40 ms].
                let slot = (worker * CALLS_PER_WORKER + n) as u64;
                let at = boundary - 40 + slot * 80 / (WORKERS * CALLS_PER_WORKER) as u64;
                calls.spawn(async move {
                    tokio::time::sleep(Duration::from_millis(at.saturating_sub(now_ms()))).await;
                    let call = ToolCall {
                        id: None,
                        name: "charge".into(),
                        arguments: Arguments::Text(format!(r#"{{"order":{burst}}}"#)),
                    };
                    dispatcher.dispatch_one(call, &run).await
                });
            }
        }
        for result in calls.join_all().await {
            assert!(!result.is_error(), "{url}: {:?}", result.result);
        }
        let runs = ledger.runs.lock().unwrap().get(&burst).copied();
        assert_eq!(
            runs,
            Some(1),
            "{url}: burst {burst} across a boundary charged {runs:?} times"
        );
    }

    // A, B, A through three workers: the call in between ends the window
    // on every worker, and the last A repeats on a fourth call.
    let charge_through = |worker: usize, order: u64| {
        let call = ToolCall {
            id: None,
            name: "charge".into(),
            arguments: Arguments::Text(format!(r#"{{"order":{order}}}"#)),
        };
        dispatchers[worker].dispatch_one(call, &run)
    };
    for (worker, order) in [(0, 100), (1, 101), (2, 100), (0, 100)] {
        let result = charge_through(worker, order).await;
        assert!(!result.is_error(), "{url}: {:?}", result.result);
    }
    let runs = ledger.runs.lock().unwrap().clone();
    assert_eq!(
        (runs.get(&100).copied(), runs.get(&101).copied()),
        (Some(2), Some(1)),
        "{url}: A, B, A, A ran A twice and B once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_sqlite() {
    let dir = TempDir::new("idem-window").unwrap();
    let url = format!("sqlite://{}", dir.path().join("idem.db").display());
    bursts_across_boundaries_charge_once(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_redis() {
    let Some(server) = RedisServer::start() else {
        skip("repeat windows on Redis", "redis-server");
        return;
    };
    bursts_across_boundaries_charge_once(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_postgres() {
    let Some(server) = PostgresServer::start() else {
        skip(
            "repeat windows on PostgreSQL",
            "PostgreSQL (initdb, postgres)",
        );
        return;
    };
    bursts_across_boundaries_charge_once(&server.url()).await;
}
