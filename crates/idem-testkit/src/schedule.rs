//! One schedule: a plan drawn from a seed, run against a store, checked.
//!
//! A schedule has three phases:
//!
//! 1. **Live.** A handful of calls, each made by one to four workers: the
//!    first, concurrent duplicates (other workers on the same key), and the
//!    model repeating the call later (same call id, or same run and step).
//!    Some workers replay instead (`executor.replaying()`). Each worker
//!    carries at most one fault.
//! 2. **Settle.** Once every live worker has finished or crashed and the
//!    leases they left have run out, the model re-runs the run, call after
//!    call, without faults, until each call has a definite answer. This
//!    lets every record in flight be taken over, reconciled or refused.
//! 3. **Replay.** The whole run is replayed from its checkpoint through a
//!    replaying executor: recorded outputs come back, nothing runs.
//!
//! Then the checks ([`oracle`](crate::oracle)): the effect ledger must hold
//! no key twice, every output acknowledged to a caller must be the
//! recorded one, with its effect in the ledger, and no key whose effect
//! applied may be recorded as failed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::dispatch::Arguments;
use idem_runtime::executor::InFlightPolicy;
use idem_runtime::{
    CallOutput, Dispatcher, Executor, IdemError, Namespace, RetryPolicy, RunContext, Store,
    ToolCall,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::faults::{sim_store, CrashPoint, Fault, PausePoint, Worker, FAULTY_OPS, WORKER};
use crate::oracle::{self, Acked};
use crate::tools::{self, App};
use crate::volatile::Volatile;
use crate::world::World;

/// The time scale of a schedule. Every delay is a multiple of the lease,
/// so the same plan means the same thing in virtual time (long leases,
/// free) and in real time against a server (short leases, cheap).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// The executor's lease.
    pub lease: Duration,
}

impl Timing {
    /// For the memory store in paused time: a 3 s lease, as a real
    /// deployment might use; waiting costs nothing.
    pub fn virtual_time() -> Timing {
        Timing {
            lease: Duration::from_secs(3),
        }
    }

    /// For durable stores in real time: a 200 ms lease keeps a schedule
    /// around a second or two.
    pub fn real_time() -> Timing {
        Timing {
            lease: Duration::from_millis(200),
        }
    }

    fn of_lease(&self, factor: f64) -> Duration {
        self.lease.mul_f64(factor)
    }

    /// The tool timeout: above any slow provider the plan draws.
    fn timeout(&self) -> Duration {
        self.lease * 4
    }
}

/// A simulated tool, as the plan names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolKind {
    Charge,
    SendEmail,
    DeleteAccount,
}

impl ToolKind {
    fn name(self) -> &'static str {
        match self {
            ToolKind::Charge => "charge",
            ToolKind::SendEmail => "send_email",
            ToolKind::DeleteAccount => "delete_account",
        }
    }

    fn args(self, i: usize) -> Value {
        match self {
            ToolKind::Charge => json!({ "account": format!("acct-{i}"), "cents": 100 * (i + 1) }),
            ToolKind::SendEmail => {
                json!({ "to": format!("user{i}@example.com"), "subject": format!("hello {i}") })
            }
            ToolKind::DeleteAccount => json!({ "account": format!("acct-{i}") }),
        }
    }
}

/// One call of the run, and the workers that make it.
#[derive(Debug, Clone)]
struct PlannedCall {
    tool: ToolKind,
    /// The provider's call id; `None` keys the call by run and step.
    call_id: Option<String>,
    step: u64,
    args: Value,
    workers: Vec<PlannedWorker>,
}

impl PlannedCall {
    fn label(&self) -> String {
        format!("{}#{}", self.tool.name(), self.step)
    }

    fn tool_call(&self) -> ToolCall {
        ToolCall {
            id: self.call_id.clone(),
            name: self.tool.name().to_owned(),
            arguments: Arguments::Json(self.args.clone()),
        }
    }
}

/// One worker's call: when it starts, what goes wrong.
#[derive(Debug, Clone, Copy)]
struct PlannedWorker {
    at: Duration,
    fault: Fault,
    latency: Duration,
    /// Through a replaying executor.
    replay: bool,
}

/// A plan drawn from a seed.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// The seed it was drawn from.
    pub seed: u64,
    calls: Vec<PlannedCall>,
}

const CRASH_POINTS: [CrashPoint; 6] = [
    CrashPoint::AfterClaim,
    CrashPoint::AfterStarted,
    CrashPoint::AfterIntent,
    CrashPoint::AfterProvider,
    CrashPoint::BeforeRecord,
    CrashPoint::AfterRecord,
];

impl Schedule {
    /// Draw the plan of schedule `seed`.
    pub fn draw(seed: u64, timing: &Timing) -> Schedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let mix = FaultMix::draw(&mut rng);
        // Swarm over the tools too: some runs only send emails.
        let tools: Vec<ToolKind> = [
            ToolKind::Charge,
            ToolKind::SendEmail,
            ToolKind::DeleteAccount,
        ]
        .into_iter()
        .filter(|_| rng.random_bool(0.6))
        .collect();
        let tools = if tools.is_empty() {
            vec![ToolKind::SendEmail]
        } else {
            tools
        };
        let calls = (0..rng.random_range(4..=10))
            .map(|i| {
                let tool = tools[rng.random_range(0..tools.len())];
                let call_id = rng.random_bool(0.5).then(|| format!("call_{i}"));
                let first = timing.of_lease(rng.random_range(0.0..0.5));
                let mut starts = vec![first];
                if rng.random_bool(0.7) {
                    for _ in 0..rng.random_range(1..=3) {
                        starts.push(first + timing.of_lease(rng.random_range(0.0..0.8)));
                    }
                }
                if rng.random_bool(0.4) {
                    starts.push(first + timing.of_lease(rng.random_range(1.0..4.0)));
                }
                let workers = starts
                    .into_iter()
                    .enumerate()
                    .map(|(n, at)| {
                        // The first worker is nearly always the owner, and
                        // most faults strike only an owner: it always gets
                        // one from the mix, the others as often as the mix
                        // says.
                        let replay = n > 0 && rng.random_bool(0.08);
                        PlannedWorker {
                            at,
                            fault: if replay {
                                Fault::None
                            } else {
                                mix.draw_fault(&mut rng, timing, n == 0)
                            },
                            latency: timing.of_lease(rng.random_range(0.02..mix.latency_max)),
                            replay,
                        }
                    })
                    .collect();
                PlannedCall {
                    tool,
                    call_id,
                    step: i,
                    args: tool.args(i as usize),
                    workers,
                }
            })
            .collect();
        Schedule { seed, calls }
    }
}

impl Schedule {
    /// A schedule written by hand, for a test of one fault: `calls`, in
    /// order, each the name of a simulated tool (`charge`, an
    /// idempotent write; `send_email`, a non-idempotent write with a
    /// reconcile hook; `delete_account`, irreversible) and its workers,
    /// each the time it starts, in leases, and its fault. Every worker's
    /// provider answers in a tenth of a lease; half the calls carry a
    /// call id.
    ///
    /// # Panics
    ///
    /// On a tool the simulation does not have.
    pub fn scripted(seed: u64, timing: &Timing, calls: &[(&str, &[(f64, Fault)])]) -> Schedule {
        let calls = calls
            .iter()
            .enumerate()
            .map(|(i, (tool, workers))| {
                let tool = [
                    ToolKind::Charge,
                    ToolKind::SendEmail,
                    ToolKind::DeleteAccount,
                ]
                .into_iter()
                .find(|t| t.name() == *tool)
                .unwrap_or_else(|| panic!("no simulated tool {tool}"));
                PlannedCall {
                    tool,
                    call_id: (i % 2 == 0).then(|| format!("call_{i}")),
                    step: i as u64,
                    args: tool.args(i),
                    workers: workers
                        .iter()
                        .map(|&(at, fault)| PlannedWorker {
                            at: timing.of_lease(at),
                            fault,
                            latency: timing.of_lease(0.1),
                            replay: false,
                        })
                        .collect(),
                }
            })
            .collect();
        Schedule { seed, calls }
    }
}

/// How often each kind of fault strikes in one schedule. Drawn per
/// schedule ("swarm testing"): a schedule where only a few kinds are
/// enabled, each often, reaches the interleavings those kinds make far
/// more often than one uniform mix would, while the mix over all seeds
/// still covers every kind.
#[derive(Debug, Clone, Copy)]
struct FaultMix {
    /// The chance that a worker has a fault at all.
    rate: f64,
    /// Relative weights of crash, store error, pause, slow provider,
    /// timeout after accept, slow approval, power cut; zero disables a
    /// kind.
    weights: [f64; 7],
    /// The slowest a provider answers, in leases, when nothing is wrong:
    /// some runs meet providers slower than the lease on every call, where
    /// only lease renewal keeps a waiting duplicate from taking over.
    latency_max: f64,
}

impl FaultMix {
    fn draw(rng: &mut StdRng) -> FaultMix {
        let mut weights = [0.0; 7];
        for w in &mut weights {
            if rng.random_bool(0.4) {
                *w = rng.random_range(0.2..1.0);
            }
        }
        if weights.iter().all(|w| *w == 0.0) {
            weights[rng.random_range(0..weights.len())] = 1.0;
        }
        FaultMix {
            rate: rng.random_range(0.5..1.0),
            weights,
            latency_max: if rng.random_bool(0.5) { 2.5 } else { 0.6 },
        }
    }

    fn draw_fault(&self, rng: &mut StdRng, timing: &Timing, owner: bool) -> Fault {
        if !owner && !rng.random_bool(self.rate) {
            return Fault::None;
        }
        let mut pick = rng.random_range(0.0..self.weights.iter().sum::<f64>());
        let kind = self
            .weights
            .iter()
            .position(|w| {
                pick -= w;
                pick < 0.0
            })
            .unwrap_or(0);
        match kind {
            0 => Fault::Crash(CRASH_POINTS[rng.random_range(0..CRASH_POINTS.len())]),
            1 => Fault::StoreFails {
                op: FAULTY_OPS[rng.random_range(0..FAULTY_OPS.len())],
                applied: rng.random_bool(0.5),
            },
            2 => {
                let at = match rng.random_range(0..10) {
                    0..=3 => PausePoint::ToolStart,
                    4..=7 => PausePoint::AfterClaim,
                    _ => PausePoint::BeforeRecord,
                };
                // Half just past the lease (the new owner is still at
                // work when the old one wakes), half long past it.
                let leases = if rng.random_bool(0.6) {
                    rng.random_range(1.02..1.3)
                } else {
                    rng.random_range(1.4..3.0)
                };
                Fault::Pause(at, timing.of_lease(leases))
            }
            3 => Fault::SlowProvider(timing.of_lease(rng.random_range(1.2..2.5))),
            4 => Fault::TimeoutAfterAccept,
            5 => Fault::SlowApproval(timing.of_lease(rng.random_range(1.2..3.0))),
            _ => Fault::PowerCut {
                at: CRASH_POINTS[rng.random_range(0..CRASH_POINTS.len())],
                worker_dies: rng.random_bool(0.5),
            },
        }
    }
}

/// What one schedule showed.
#[derive(Debug, Clone)]
pub struct ScheduleReport {
    /// The schedule's seed.
    pub seed: u64,
    /// Keys whose effect the ledger holds more than once, with the effects.
    pub duplicate_effects: Vec<String>,
    /// Outputs acknowledged to a caller whose record or effect is missing
    /// or different.
    pub lost_results: Vec<String>,
    /// Keys whose effect applied while their record says the call failed.
    pub refused_but_applied: Vec<String>,
    /// Writes refused for a stale fence.
    pub stale_writes_rejected: u64,
    /// `OutcomeUnknown` errors returned to callers.
    pub unknown_outcomes: u64,
    /// Reconcile hooks that answered Applied or NotApplied.
    pub reconciled: u64,
    /// Power cuts that struck.
    pub power_cuts: u64,
    /// Claims the power cuts made the store lose: claims of
    /// `idempotent_write` calls (the only ones made without
    /// [`durable`](idem_runtime::store::ClaimRequest::durable)) that no
    /// durable write had flushed yet.
    pub claims_undone: u64,
    /// Calls still without a definite answer after the settle phase.
    pub unsettled: u64,
    /// SHA-256 (first 8 bytes, hex) of the trace.
    pub trace_hash: String,
    /// Every event, in order.
    pub trace: Vec<String>,
}

impl ScheduleReport {
    /// Whether the schedule found a duplicate effect, a lost result or a
    /// call refused whose effect applied.
    pub fn failed(&self) -> bool {
        !self.duplicate_effects.is_empty()
            || !self.lost_results.is_empty()
            || !self.refused_but_applied.is_empty()
    }
}

/// What a worker got back.
enum Answer {
    Done(Result<CallOutput<Value>, IdemError>),
    /// The worker crashed: its call was dropped.
    Crashed,
}

/// The running simulation of one schedule.
struct Sim {
    world: Arc<World>,
    /// Builds a worker's executor: each simulated worker is a process of
    /// its own, with its own executor on the shared store (within one
    /// executor, concurrent calls of a key share one claim and never race
    /// at the store).
    make: Box<dyn Fn() -> Executor<App> + Send + Sync>,
    /// Each worker's dispatcher, made on its first call.
    workers: std::sync::Mutex<std::collections::HashMap<usize, Dispatcher<App>>>,
    namespace: Namespace,
    /// What the store has not flushed, which a power cut loses.
    volatile: Arc<Volatile>,
}

/// Acknowledged outputs and surfaced unknowns, gathered as answers come.
#[derive(Default)]
struct Tally {
    acked: Vec<Acked>,
    unknown: u64,
}

impl Sim {
    fn new(store: Arc<dyn Store>, timing: Timing, namespace: Namespace) -> Sim {
        let world = Arc::new(World::new());
        let volatile = Volatile::new(store.clone());
        let sim_store: Arc<dyn Store> = Arc::new(sim_store(store, world.clone(), volatile.clone()));
        let make = {
            let (world, namespace) = (world.clone(), namespace.clone());
            move || {
                Executor::builder_shared(sim_store.clone())
                    .state(world.clone())
                    .lease(timing.lease)
                    .timeout(timing.timeout())
                    .retry(
                        RetryPolicy::exponential()
                            .initial_delay(timing.of_lease(0.1))
                            .without_jitter()
                            .max_attempts(3),
                    )
                    .on_in_flight(InFlightPolicy::Wait(timing.lease * 20))
                    .namespace(namespace.clone())
                    .approvals(tools::approvals())
                    .build()
            }
        };
        Sim {
            world,
            make: Box::new(make),
            workers: Default::default(),
            namespace,
            volatile,
        }
    }

    /// Worker `id`'s dispatcher, live or replaying.
    fn dispatcher(&self, id: usize, replay: bool) -> Dispatcher<App> {
        let registry = tools::registry;
        let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        let live = workers
            .entry(id)
            .or_insert_with(|| Dispatcher::new((self.make)(), registry()));
        if replay {
            Dispatcher::new(live.executor().replaying(), registry())
        } else {
            live.clone()
        }
    }

    /// Worker `worker` makes `call`; a crash drops the call where it
    /// stands.
    async fn invoke(&self, worker: Arc<Worker>, call: &PlannedCall, replay: bool) -> Answer {
        let run = RunContext::new("run", call.step).namespace(self.namespace.clone());
        let dispatcher = self.dispatcher(worker.id, replay);
        self.world.event(format!(
            "w{} {}{}",
            worker.id,
            if replay { "replays " } else { "calls " },
            call.label()
        ));
        let work = WORKER.scope(
            worker.clone(),
            dispatcher.dispatch_one(call.tool_call(), &run),
        );
        tokio::select! {
            biased;
            () = worker.crashed.notified() => Answer::Crashed,
            result = work => Answer::Done(result.result),
        }
    }

    /// Trace `answer` as it arrives.
    fn trace_answer(&self, worker: usize, call: &PlannedCall, answer: &Answer) {
        let label = call.label();
        match answer {
            Answer::Crashed => self.world.event(format!("w{worker} {label} CRASHED")),
            Answer::Done(Ok(out)) => self.world.event(format!(
                "w{worker} {label} -> ok {}{}",
                out.output,
                if out.meta.deduplicated {
                    " (deduplicated)"
                } else {
                    ""
                }
            )),
            Answer::Done(Err(e)) => self.world.event(format!(
                "w{worker} {label} -> error {}: {e}",
                e.code().as_str()
            )),
        }
    }

    /// Worker `worker` makes `call`, and the answer is traced.
    async fn answered(&self, worker: Arc<Worker>, call: &PlannedCall, replay: bool) -> Answer {
        let id = worker.id;
        let answer = self.invoke(worker, call, replay).await;
        self.trace_answer(id, call, &answer);
        answer
    }
}

impl Tally {
    /// Keep what the checks need from `answer`.
    fn note(&mut self, call: &PlannedCall, answer: &Answer) {
        match answer {
            Answer::Done(Ok(out)) => {
                if let Some(key) = &out.meta.key {
                    self.acked.push(Acked {
                        label: call.label(),
                        key: key.clone(),
                        output: out.output.clone(),
                    });
                }
            }
            Answer::Done(Err(IdemError::OutcomeUnknown { .. })) => self.unknown += 1,
            Answer::Done(Err(_)) | Answer::Crashed => {}
        }
    }
}

/// Whether a settle call got an answer that will not change by asking
/// again.
fn is_definite(answer: &Answer) -> bool {
    match answer {
        Answer::Done(result) => oracle::is_definite(result),
        Answer::Crashed => false,
    }
}

/// Run `schedule` against `store` (a fresh one, or a shared one under a
/// namespace of its own) and check it.
pub async fn run_schedule(
    store: Arc<dyn Store>,
    schedule: &Schedule,
    timing: Timing,
    namespace: Namespace,
) -> ScheduleReport {
    let sim = Arc::new(Sim::new(store.clone(), timing, namespace));
    sim.world.event(format!("schedule {}", schedule.seed));
    let mut tally = Tally::default();
    let mut next_worker = 0;
    let mut worker = |fault, latency, world: &Arc<World>| {
        next_worker += 1;
        Arc::new(Worker::new(
            next_worker,
            fault,
            latency,
            world.clone(),
            sim.volatile.clone(),
        ))
    };

    // Live: every worker of every call, each in its own task.
    let mut tasks = Vec::new();
    for (c, call) in schedule.calls.iter().enumerate() {
        for planned in &call.workers {
            let w = worker(planned.fault, planned.latency, &sim.world);
            sim.world.event(format!(
                "plan w{} {} at {}ms: {}{}",
                w.id,
                call.label(),
                planned.at.as_millis(),
                planned.fault,
                if planned.replay { ", replaying" } else { "" }
            ));
            let (sim, planned) = (sim.clone(), *planned);
            let call = call.clone();
            tasks.push((
                c,
                tokio::spawn(async move {
                    tokio::time::sleep(planned.at).await;
                    sim.answered(w, &call, planned.replay).await
                }),
            ));
        }
    }
    for (c, task) in tasks {
        let answer = task
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        tally.note(&schedule.calls[c], &answer);
    }

    // Settle: past every lease left behind, the model re-runs the run.
    tokio::time::sleep(timing.lease * 2).await;
    let mut unsettled = 0;
    for call in &schedule.calls {
        let mut settled = false;
        for _ in 0..8 {
            let w = worker(Fault::None, timing.of_lease(0.05), &sim.world);
            let answer = sim.answered(w, call, false).await;
            tally.note(call, &answer);
            if is_definite(&answer) {
                settled = true;
                break;
            }
            tokio::time::sleep(timing.lease).await;
        }
        if !settled {
            unsettled += 1;
            sim.world.event(format!("{} UNSETTLED", call.label()));
        }
    }

    // Replay the run from its checkpoint: nothing may run.
    for call in &schedule.calls {
        let w = worker(Fault::None, Duration::ZERO, &sim.world);
        let answer = sim.answered(w, call, true).await;
        tally.note(call, &answer);
    }

    check(&sim.world, store.as_ref(), schedule, &tally, unsettled).await
}

/// The checks, after the schedule.
async fn check(
    world: &World,
    store: &dyn Store,
    schedule: &Schedule,
    tally: &Tally,
    unsettled: u64,
) -> ScheduleReport {
    let ledger = world.ledger();
    let duplicate_effects = oracle::duplicate_effects(&ledger);
    let lost_results = oracle::lost_results(store, &tally.acked, &ledger).await;
    let refused_but_applied = oracle::refused_but_applied(store, &ledger).await;
    for problem in duplicate_effects
        .iter()
        .chain(&lost_results)
        .chain(&refused_but_applied)
    {
        world.event(format!("CHECK FAILED {problem}"));
    }
    let (trace, trace_hash) = world.trace();
    ScheduleReport {
        seed: schedule.seed,
        duplicate_effects,
        lost_results,
        refused_but_applied,
        stale_writes_rejected: world.counters.stale_writes_rejected.load(Ordering::Relaxed),
        unknown_outcomes: tally.unknown,
        reconciled: world.counters.reconciled.load(Ordering::Relaxed),
        power_cuts: world.counters.power_cuts.load(Ordering::Relaxed),
        claims_undone: world.counters.claims_undone.load(Ordering::Relaxed),
        unsettled,
        trace_hash,
        trace,
    }
}
