//! idem on a real Redis Cluster through the public API, as an application
//! would use it: a primary dies mid-run, and no call runs twice.
#![cfg(feature = "redis")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem::prelude::*;
use idem::store::redis::RedisOptions;
use idem::store::RedisStore;
use idem::InFlightPolicy;
use idem_testkit::{skip, RedisCluster};
use serde::{Deserialize, Serialize};

/// How often the tool body ran, per idempotency key.
#[derive(Clone, Default)]
struct Payments {
    runs: Arc<Mutex<HashMap<String, usize>>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
struct Charge {
    order: u64,
}

/// Charge an order: repeating it charges the customer twice.
#[tool(class = "non_idempotent_write")]
async fn charge(
    args: Charge,
    ctx: &ToolCtx,
    State(payments): State<Payments>,
) -> Result<u64, ToolError> {
    let key = ctx.key().expect("writes are keyed").as_str().to_owned();
    *payments.runs.lock().unwrap().entry(key).or_default() += 1;
    // Long enough that calls are mid-run when the primary dies.
    tokio::time::sleep(Duration::from_millis(20)).await;
    Ok(args.order)
}

/// What the calls of one run came to.
#[derive(Default)]
struct Tally {
    succeeded: AtomicUsize,
    succeeded_after_kill: AtomicUsize,
    failed_closed: AtomicUsize,
}

/// Eight workers charge orders (a hundred repeated ones, and a fresh one
/// every third call) for eight seconds on a cluster of three primaries with
/// one replica each, writes counting once a replica holds them. Two
/// seconds in, one primary is killed (`SIGKILL`); its replica takes over.
/// Every call succeeds or fails with a typed store, outcome-not-recorded,
/// in-flight, superseded or unknown-outcome error, and no order is charged
/// twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_killed_mid_run_fails_calls_closed_and_never_runs_one_twice() {
    let test = "a_primary_killed_mid_run_fails_calls_closed_and_never_runs_one_twice";
    let started = tokio::task::spawn_blocking(|| RedisCluster::start_with_replicas(1))
        .await
        .unwrap();
    let Some(cluster) = started else {
        return skip(test, "redis-server and redis-cli");
    };
    let victim = cluster.primary_ports()[0];
    let options = RedisOptions::default().wait_for_replicas(1, Duration::from_millis(500));
    let store = RedisStore::connect_with(&cluster.url(), options)
        .await
        .unwrap();
    let payments = Payments::default();
    let exec = Arc::new(
        Executor::builder(store)
            .state(payments.clone())
            .lease(Duration::from_secs(2))
            .on_in_flight(InFlightPolicy::Wait(Duration::from_secs(5)))
            .build(),
    );
    let tally = Arc::new(Tally::default());
    let killed = Arc::new(Mutex::new(None::<Instant>));
    let fresh = Arc::new(AtomicUsize::new(1_000_000));
    let start = Instant::now();
    let end = start + Duration::from_secs(8);

    let mut workers = tokio::task::JoinSet::new();
    for worker in 0..8u64 {
        let (exec, tally, killed, fresh) =
            (exec.clone(), tally.clone(), killed.clone(), fresh.clone());
        workers.spawn(async move {
            let mut n = worker;
            while Instant::now() < end {
                n = n
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let order = match n % 3 {
                    0 => fresh.fetch_add(1, Ordering::SeqCst) as u64,
                    _ => (n >> 33) % 100,
                };
                let call = exec
                    .call(charge, Charge { order })
                    .call_id(format!("order-{order}"))
                    .await;
                match call {
                    Ok(out) => {
                        assert_eq!(out.output, order, "another order's result");
                        tally.succeeded.fetch_add(1, Ordering::SeqCst);
                        if killed.lock().unwrap().is_some() {
                            tally.succeeded_after_kill.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    Err(
                        IdemError::Store { .. }
                        | IdemError::OutcomeNotRecorded { .. }
                        | IdemError::InFlight { .. }
                        | IdemError::Superseded { .. }
                        | IdemError::OutcomeUnknown { .. },
                    ) => {
                        tally.failed_closed.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(other) => panic!("order {order}: unexpected error {other}"),
                }
            }
        });
    }

    tokio::time::sleep(Duration::from_secs(2)).await;
    let cluster = Arc::new(Mutex::new(cluster));
    {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || cluster.lock().unwrap().kill(victim))
            .await
            .unwrap();
    }
    *killed.lock().unwrap() = Some(Instant::now());
    while let Some(done) = workers.join_next().await {
        done.unwrap();
    }

    let runs = payments.runs.lock().unwrap().clone();
    let twice: Vec<_> = runs.iter().filter(|(_, &n)| n > 1).collect();
    let (ok, ok_after, closed) = (
        tally.succeeded.load(Ordering::SeqCst),
        tally.succeeded_after_kill.load(Ordering::SeqCst),
        tally.failed_closed.load(Ordering::SeqCst),
    );
    eprintln!(
        "{test}: {} keys ran, {ok} calls succeeded ({ok_after} after the kill), {closed} failed closed",
        runs.len()
    );
    assert!(twice.is_empty(), "charged twice: {twice:?}");
    assert!(ok_after > 0, "nothing succeeded after the kill");
    assert!(closed > 0, "no call met the dead primary");
    drop(cluster);
}
