//! What runs in each worker process: the calls, through an executor whose
//! store is watched (takeovers noted, answers a little late), on the
//! shared world.

use std::fs::{File, OpenOptions};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idem_runtime::dispatch::Arguments;
use idem_runtime::executor::{InFlightPolicy, ATTEMPT_STEP};
use idem_runtime::store::intercept::{Answer, Hook, Interceptor, Operation};
use idem_runtime::store::{ClaimOutcome, ClaimRequest, LocalClaim};
use idem_runtime::{
    Dispatcher, Executor, IdempotencyKey, RunContext, Store, StoreError, ToolCall, ToolDef,
};
use rand::seq::SliceRandom;
use serde_json::json;

use super::{calls, is_delete, WorkerSpec, WORKER_ENV};
use crate::ledger::{append_line, Ledger};
use crate::oracle::is_definite;
use crate::tools::{self, App, Charge, DeleteAccount};
use crate::world::World;

/// Calls each worker makes at a time.
const TASKS: usize = 4;
/// The lease: short, so that a killed owner's keys are taken over within
/// the next round.
const LEASE: Duration = Duration::from_millis(300);
/// A tool body waits up to this long before and again after its effect, so
/// that kills land before, between and after effects.
const BODY_PAUSE: Duration = Duration::from_millis(120);
/// A won claim reaches the worker, and a checkpoint reaches the store, up
/// to this long late (a slow network), so that kills also land between a
/// claim and the mark that the attempt started.
const LATENCY_MS: u64 = 40;
/// How long the final worker may take to get a definite answer for every
/// call.
const FINAL_LIMIT: Duration = Duration::from_secs(15);

/// A random network delay, up to [`LATENCY_MS`].
async fn latency() {
    let ms = rand::random_range(0..=LATENCY_MS);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// The hook on a worker's store: it notes in the worker's results file
/// each claim answered on the caller's thread (`local KEY`) and each
/// takeover its claims win (`takeover KEY started|not-started
/// here|there`: on the caller's thread or the usual way), delivers won
/// claims and checkpoints late (up to [`LATENCY_MS`]), and otherwise does
/// what the real store does.
#[derive(Debug)]
struct Watched {
    results: Arc<File>,
}

impl Watched {
    fn note(&self, key: &IdempotencyKey, outcome: &ClaimOutcome, here: bool) {
        if let ClaimOutcome::Acquired {
            takeover: Some(_),
            steps,
            ..
        } = outcome
        {
            let started = if steps.contains_key(ATTEMPT_STEP) {
                "started"
            } else {
                "not-started"
            };
            let here = if here { "here" } else { "there" };
            append_line(&self.results, &format!("takeover {key} {started} {here}\n"));
        }
    }
}

#[async_trait]
impl Hook for Watched {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        match op {
            Operation::Claim(req) => {
                let answer = op.run(store).await?;
                if let Answer::Claim(outcome) = &answer {
                    self.note(req.key, outcome, false);
                    if matches!(outcome, ClaimOutcome::Acquired { .. }) {
                        latency().await;
                    }
                }
                Ok(answer)
            }
            Operation::Checkpoint { .. } => {
                latency().await;
                op.run(store).await
            }
            _ => op.run(store).await,
        }
    }

    /// A claim won on the caller's thread is noted like any other, but
    /// cannot be late: nothing may wait there. On SQLite, the only durable
    /// store with that path, it answers only calls already decided (a
    /// completed record, an approval to wait for, a key reused), never a
    /// takeover: those all come the usual way.
    fn around_local(
        &self,
        req: &ClaimRequest<'_>,
        store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        let answer = store.fast_path().and_then(|fast| fast.claim_local(req));
        if let Some(Ok(outcome)) = &answer {
            append_line(&self.results, &format!("local {}\n", req.key));
            if let LocalClaim::Claim(outcome) = outcome {
                self.note(req.key, outcome, true);
            }
        }
        answer
    }
}

/// The body of the worker entry point: in a worker process, make the calls
/// and note each one in the results file as it goes (`start CALL`, then
/// `done CALL CODE`, with the output after `ok`); outside one, do nothing.
pub async fn run_worker() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let spec: WorkerSpec = serde_json::from_str(&spec).expect("a worker spec");
    let results = Arc::new(
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.results)
            .expect("open the results file"),
    );
    let store = crate::stores::connect(&spec.url)
        .await
        .expect("connect to the store");
    let world: App = Arc::new(World::shared(Ledger::file(&spec.ledger), BODY_PAUSE));
    let watched = Interceptor::new(
        store,
        Watched {
            results: results.clone(),
        },
    );
    let exec = Executor::builder(watched)
        .state(world)
        .lease(LEASE)
        // Above any tool body here; a takeover of a started call waits
        // this long before it reconciles.
        .timeout(Duration::from_secs(1))
        // A duplicate of a killed owner's call waits for its lease to run out.
        .on_in_flight(InFlightPolicy::Wait(Duration::from_secs(10)))
        .approvals(tools::approvals())
        .build();
    let tools = Dispatcher::new(exec, tools::registry());
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (tools, results, next) = (tools.clone(), results.clone(), next.clone());
            let (until_definite, count) = (spec.until_definite, spec.calls);
            tokio::spawn(async move {
                if until_definite {
                    // Share the calls out; each until its answer is definite.
                    let calls = &calls()[..count];
                    while let Some(call) = calls.get(next.fetch_add(1, Ordering::SeqCst)) {
                        let deadline = Instant::now() + FINAL_LIMIT;
                        while !call_once(&tools, &results, call).await {
                            assert!(Instant::now() < deadline, "no definite answer for {call}");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                } else {
                    // Every call, in an order of this task's own.
                    let mut calls = calls();
                    calls.truncate(count);
                    calls.shuffle(&mut rand::rng());
                    for call in &calls {
                        call_once(&tools, &results, call).await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a worker task");
    }
}

/// Make `call` once, by name as a model's tool call, noting its start and
/// its answer; returns whether the answer is definite.
async fn call_once(tools: &Dispatcher<App>, results: &File, call: &str) -> bool {
    append_line(results, &format!("start {call}\n"));
    let (name, args) = if is_delete(call) {
        (DeleteAccount::SPEC.name, json!({ "account": call }))
    } else {
        (Charge::SPEC.name, json!({ "account": call, "cents": 100 }))
    };
    let tool_call = ToolCall {
        id: Some(call.to_owned()),
        name: name.to_owned(),
        arguments: Arguments::Json(args),
    };
    let answer = tools
        .dispatch_one(tool_call, &RunContext::default())
        .await
        .result;
    let definite = is_definite(&answer);
    let line = match answer {
        Ok(out) => format!("done {call} ok {}\n", out.output),
        Err(e) => format!("done {call} {}\n", e.code().as_str()),
    };
    append_line(results, &line);
    definite
}
