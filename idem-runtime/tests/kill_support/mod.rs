//! Worker processes killed with SIGKILL in the middle of calls, shared by
//! every durable store's test in `kill.rs`: the simulated providers (the
//! effect ledgers), the worker that runs in each child process, the rounds
//! of kills and restarts, and the checks of the ledgers against what the
//! executor answered.
//!
//! The scenario, on one store:
//!
//! 1. Several rounds: worker processes (this test binary, re-run through
//!    [`WORKER_ENV`]) make the keyed calls given out so far (each round adds
//!    a slice of fresh ones) in a random order, several at a time, with a
//!    short lease, tool bodies that take random short times and a store
//!    that answers a little late; each worker is killed with SIGKILL at a
//!    random instant, most often in the middle of a call.
//! 2. The state of every `charge_card` record is read from the store.
//! 3. A final worker, never killed, makes every call (the last slice for
//!    the first time) until each has a definite answer.
//! 4. The providers' ledgers, which no kill can touch, must show what the
//!    classes promise (see [`check`]).
//!
//! Both providers keep their ledger in an append-only file: one line per
//! request they receive, written with a single `write` on a file opened
//! with `O_APPEND`, then fsynced. A killed worker either wrote the whole
//! line or nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::class::{IdempotentWrite, NonIdempotentWrite};
use idem_runtime::executor::{InFlightPolicy, ATTEMPT_STEP};
use idem_runtime::key::{derive_key, KeyInput, KeySource, DEFAULT_KEY_VERSION};
use idem_runtime::record::{Fence, Outcome, Record, RecordState};
use idem_runtime::store::{ClaimOutcome, ClaimRequest};
use idem_runtime::{
    Executor, IdemError, IdempotencyKey, Namespace, Store, StoreError, Tool, ToolCtx, ToolDef,
    ToolError, ToolSpec,
};
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The environment variable that makes the test binary a worker: the
/// [`WorkerSpec`] as JSON.
pub const WORKER_ENV: &str = "IDEM_KILL_WORKER";

/// Calls of each tool: `send-00`…, `charge-00`….
const CALLS_PER_TOOL: usize = 50;
/// Rounds of workers that are killed.
const KILL_ROUNDS: usize = 8;
/// Worker processes per round.
const WORKERS: usize = 3;
/// Calls each worker makes at a time.
const TASKS: usize = 4;
/// Each worker of a kill round is killed this long after it starts.
const KILL_AFTER_MS: std::ops::Range<u64> = 100..900;
/// The lease: short, so that a killed owner's keys are taken over within
/// the next round.
const LEASE: Duration = Duration::from_millis(300);
/// A tool body waits up to this long before and again after its effect, so
/// that kills land before, between and after effects.
const BODY_PAUSE_MS: u64 = 120;
/// A won claim reaches the worker, and a checkpoint reaches the store, up
/// to this long late (a slow network), so that kills also land between a
/// claim and the mark that the attempt started.
const LATENCY_MS: u64 = 40;
/// How long the final worker may take to get a definite answer for every
/// call.
const FINAL_LIMIT: Duration = Duration::from_secs(15);

/// What a worker is told through [`WORKER_ENV`].
#[derive(Debug, Serialize, Deserialize)]
struct WorkerSpec {
    /// The store's URL.
    url: String,
    /// The directory of the ledgers.
    dir: PathBuf,
    /// The worker's own results file.
    results: PathBuf,
    /// How many of the fixed calls (the first ones of [`calls`]) it makes.
    calls: usize,
    /// The final round: call every key until its answer is definite.
    until_definite: bool,
}

/// The simulated providers, as a worker's tools see them.
struct Providers {
    /// Honours idempotency keys: applies a request only under a key it has
    /// not seen (so its effects are the distinct keys of its ledger).
    honouring: Ledger,
    /// Ignores keys: every request it receives is an effect.
    plain: Ledger,
}

/// A provider's append-only log of requests, in a file the kills cannot
/// touch.
struct Ledger {
    file: File,
}

impl Ledger {
    fn open(path: &Path) -> Ledger {
        Ledger {
            file: append_to(path),
        }
    }

    /// Receive `call`, sent under `key`: one line, one `write`, fsynced
    /// before the provider answers.
    fn receive(&self, call: &str, key: &str) {
        append_line(
            &self.file,
            &format!("{call} {key} {}\n", std::process::id()),
        );
        self.file.sync_data().expect("fsync the ledger");
    }
}

fn append_to(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// One line in one `write`: with `O_APPEND`, a kill leaves the whole line
/// or none of it, and lines of several processes never interleave.
fn append_line(mut file: &File, line: &str) {
    let written = file.write(line.as_bytes()).expect("append a line");
    assert_eq!(written, line.len(), "a short append");
}

/// `(call, key)` of every line of a ledger.
fn read_ledger(path: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let mut words = line.split(' ');
            let call = words.next().expect("a call").to_owned();
            let key = words.next().expect("a key").to_owned();
            (call, key)
        })
        .collect()
}

/// The arguments of both tools: which of the fixed calls this is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
struct Order {
    call: String,
}

/// What both tools return: which process applied the effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    pid: u32,
}

/// A random pause of a tool body, up to [`BODY_PAUSE_MS`].
async fn pause() {
    let ms = rand::random_range(0..=BODY_PAUSE_MS);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// A tool that, after a random pause, sends its call to one provider
/// under the call's key, then pauses again before it returns: a kill can
/// land before the effect, or after it but before the outcome is recorded.
macro_rules! provider_tool {
    ($(#[$doc:meta])* $ty:ident, $class:ty, $name:literal, $provider:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        struct $ty;

        impl ToolDef for $ty {
            type Class = $class;
            type Args = Order;
            type Output = Receipt;
            const SPEC: ToolSpec = ToolSpec::new($name, stringify!($provider));
        }

        impl Tool<Arc<Providers>> for $ty {
            fn call(
                &self,
                args: Order,
                ctx: &ToolCtx,
                providers: &Arc<Providers>,
            ) -> impl Future<Output = Result<Receipt, ToolError>> + Send {
                let (providers, key) = (providers.clone(), ctx.key().cloned());
                async move {
                    let key = key.expect("a keyed call");
                    pause().await;
                    providers.$provider.receive(&args.call, key.as_str());
                    pause().await;
                    Ok(Receipt {
                        pid: std::process::id(),
                    })
                }
            }
        }
    };
}

provider_tool!(
    /// Sends an email through the provider that honours keys: safe to
    /// re-run after a takeover, since the re-run carries the same key.
    SendEmail,
    IdempotentWrite,
    "send_email",
    honouring
);

provider_tool!(
    /// Charges a card through the provider that ignores keys: every run is
    /// a charge, so a call whose outcome is unknown must never run again.
    ChargeCard,
    NonIdempotentWrite,
    "charge_card",
    plain
);

/// The fixed calls: `send-NN` and `charge-NN`.
fn calls() -> Vec<String> {
    (0..CALLS_PER_TOOL)
        .flat_map(|i| [format!("send-{i:02}"), format!("charge-{i:02}")])
        .collect()
}

fn is_charge(call: &str) -> bool {
    call.starts_with("charge-")
}

/// The key the executor derives for `call` (default namespace, call id).
fn key_of(call: &str) -> IdempotencyKey {
    let tool = if is_charge(call) {
        ChargeCard::SPEC.name
    } else {
        SendEmail::SPEC.name
    };
    derive_key(&KeyInput {
        version: DEFAULT_KEY_VERSION,
        namespace: &Namespace::default(),
        tool,
        source: KeySource::CallId(call),
    })
    .expect("a valid key")
}

/// A random network delay, up to [`LATENCY_MS`].
async fn latency() {
    let ms = rand::random_range(0..=LATENCY_MS);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// The store of a worker, which notes each takeover its claims win in the
/// worker's results file (`takeover KEY started|not-started`), delivers
/// won claims and checkpoints late (up to [`LATENCY_MS`]), and otherwise
/// does what the real store does.
#[derive(Debug)]
struct Watched {
    inner: Arc<dyn Store>,
    results: Arc<File>,
}

#[async_trait::async_trait]
impl Store for Watched {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let outcome = self.inner.claim(req).await?;
        if let ClaimOutcome::Acquired {
            takeover: Some(_),
            steps,
            ..
        } = &outcome
        {
            let started = if steps.contains_key(ATTEMPT_STEP) {
                "started"
            } else {
                "not-started"
            };
            append_line(&self.results, &format!("takeover {} {started}\n", req.key));
        }
        if matches!(outcome, ClaimOutcome::Acquired { .. }) {
            latency().await;
        }
        Ok(outcome)
    }
    async fn checkpoint(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        step: &str,
        value: &Value,
        lease: Duration,
    ) -> Result<(), StoreError> {
        latency().await;
        self.inner.checkpoint(key, fence, step, value, lease).await
    }
    async fn renew(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        self.inner.renew(key, fence, lease).await
    }
    async fn complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.inner.complete(key, fence, outcome, ttl).await
    }
    async fn release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        self.inner.release(key, fence).await
    }
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }
    async fn replace(
        &self,
        key: &IdempotencyKey,
        expected: idem_runtime::store::Expected,
        new: Option<&Record>,
        audit: Option<&idem_runtime::audit::AuditEvent>,
    ) -> Result<Option<Fence>, StoreError> {
        self.inner.replace(key, expected, new, audit).await
    }
    async fn append_audit(
        &self,
        event: &idem_runtime::audit::AuditEvent,
    ) -> Result<u64, StoreError> {
        self.inner.append_audit(event).await
    }
    async fn audit(
        &self,
        query: &idem_runtime::audit::AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<idem_runtime::audit::AuditPage, StoreError> {
        self.inner.audit(query, cursor, limit).await
    }
    async fn scan(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<idem_runtime::store::ScanPage, StoreError> {
        self.inner.scan(cursor, limit).await
    }
    async fn wait(
        &self,
        key: &IdempotencyKey,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.inner.wait(key, timeout).await
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        self.inner.sweep().await
    }
    async fn now(&self) -> Result<idem_runtime::clock::Timestamp, StoreError> {
        self.inner.now().await
    }
    async fn close(&self) {
        self.inner.close().await
    }
}

/// The body of the worker entry point: in a worker process, make the calls
/// and note each one in the results file as it goes (`start CALL`, then
/// `done CALL CODE`, `ok` for a success); outside one, do nothing.
pub async fn run_worker() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let spec: WorkerSpec = serde_json::from_str(&spec).expect("a worker spec");
    let results = Arc::new(append_to(&spec.results));
    let store = idem_runtime::store::connect(&spec.url)
        .await
        .expect("connect to the store");
    let providers = Arc::new(Providers {
        honouring: Ledger::open(&spec.dir.join("honouring.ledger")),
        plain: Ledger::open(&spec.dir.join("plain.ledger")),
    });
    let exec = Executor::builder(Watched {
        inner: store,
        results: results.clone(),
    })
    .state(providers)
    .lease(LEASE)
    // Above any tool body here; a takeover of a started charge waits this
    // long before it reconciles.
    .timeout(Duration::from_secs(1))
    // A duplicate of a killed owner's call waits for its lease to run out.
    .on_in_flight(InFlightPolicy::Wait(Duration::from_secs(10)))
    .build();
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (exec, results, next) = (exec.clone(), results.clone(), next.clone());
            let (until_definite, count) = (spec.until_definite, spec.calls);
            tokio::spawn(async move {
                if until_definite {
                    // Share the calls out; each until its answer is definite.
                    let calls = &calls()[..count];
                    while let Some(call) = calls.get(next.fetch_add(1, Ordering::SeqCst)) {
                        let deadline = Instant::now() + FINAL_LIMIT;
                        while !is_definite(&call_once(&exec, &results, call).await) {
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
                        call_once(&exec, &results, call).await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a worker task");
    }
}

/// Make `call` once, noting its start and its answer; returns the answer.
async fn call_once(exec: &Executor<Arc<Providers>>, results: &File, call: &str) -> String {
    append_line(results, &format!("start {call}\n"));
    let order = Order {
        call: call.to_owned(),
    };
    let answer: Result<_, IdemError> = if is_charge(call) {
        exec.call(ChargeCard, order).call_id(call).await
    } else {
        exec.call(SendEmail, order).call_id(call).await
    };
    let code = match answer {
        Ok(_) => "ok".to_owned(),
        Err(e) => e.code().as_str().to_owned(),
    };
    append_line(results, &format!("done {call} {code}\n"));
    code
}

/// Whether an answer settles the call: anything but a refusal that a later
/// call may not get (another owner in flight, a lost lease, a store out of
/// reach).
fn is_definite(code: &str) -> bool {
    !matches!(code, "in_flight" | "superseded" | "store_unavailable")
}

/// What the store held for a `charge_card` call after the kill rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Before {
    /// Nobody had claimed the key.
    NeverClaimed,
    /// A killed owner had claimed it but not marked the attempt started.
    ClaimedNotStarted,
    /// A killed owner had marked the attempt started, with no outcome.
    StartedNoOutcome,
    /// A takeover had already recorded the outcome as unknown.
    RecordedUnknown,
    /// It had succeeded.
    Succeeded,
}

fn before_final(record: Option<&Record>) -> Before {
    let Some(record) = record else {
        return Before::NeverClaimed;
    };
    match &record.state {
        RecordState::InFlight { .. } if record.steps.contains_key(ATTEMPT_STEP) => {
            Before::StartedNoOutcome
        }
        RecordState::InFlight { .. } => Before::ClaimedNotStarted,
        RecordState::Completed {
            outcome: Outcome::Unknown { .. },
            ..
        } => Before::RecordedUnknown,
        RecordState::Completed {
            outcome: Outcome::Success { .. },
            ..
        } => Before::Succeeded,
        RecordState::Completed { outcome, .. } => {
            panic!("{}: a failure nobody caused: {outcome:?}", record.key)
        }
        RecordState::AwaitingApproval { .. } => {
            panic!("{}: no tool here asks for an approval", record.key)
        }
    }
}

/// A worker process of one round.
struct Worker {
    child: Child,
    results: PathBuf,
}

/// Start a worker with its own results file.
fn spawn_worker(
    entry: &str,
    url: &str,
    dir: &Path,
    name: &str,
    calls: usize,
    until_definite: bool,
) -> Worker {
    let results = dir.join(format!("{name}.results"));
    let spec = WorkerSpec {
        url: url.to_owned(),
        dir: dir.to_owned(),
        results: results.clone(),
        calls,
        until_definite,
    };
    let child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--ignored",
            "--exact",
            entry,
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(WORKER_ENV, serde_json::to_string(&spec).expect("spec"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a worker");
    Worker { child, results }
}

/// The lines of a results file.
fn results_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Counts from one store's run, printed so they can be quoted.
#[derive(Debug, Default)]
pub struct Counts {
    /// Calls started, over every round.
    pub calls: usize,
    /// Calls answered (the others were cut by a kill).
    pub answered: usize,
    /// Workers killed while still running.
    pub kills: usize,
    /// Calls in progress in a worker when it was killed.
    pub calls_cut: usize,
    /// Claims that took a key over from a killed owner.
    pub takeovers: usize,
    /// Takeovers of `charge_card` calls whose killed owner had started the
    /// tool: each must end `outcome_unknown`, never re-run.
    pub takeovers_started: usize,
    /// Requests the honouring provider received (re-runs included).
    pub email_requests: usize,
    /// Effects the honouring provider applied (distinct keys).
    pub email_effects: usize,
    /// Effects of the provider that ignores keys (every request).
    pub charge_effects: usize,
    /// `charge_card` calls answered `outcome_unknown` in the final round.
    pub unknown_surfaced: usize,
    /// Of them, calls whose charge had in fact happened.
    pub unknown_with_effect: usize,
    /// Takeovers of `charge_card` calls whose killed owner had not started
    /// the tool: the call simply runs (at most one charge all the same).
    pub never_started_reruns: usize,
    /// `charge_card` calls claimed by a killed owner that had not started
    /// the tool when the kill rounds ended; the final round must run each
    /// exactly once.
    pub not_started_before_final: usize,
    /// `charge_card` calls nobody had claimed when the kill rounds ended;
    /// the final round must run each exactly once.
    pub never_claimed: usize,
    /// Seconds the whole scenario took.
    pub seconds: f64,
}

/// Run the scenario on the store at `url` and check it. `entry` is the
/// name of the (ignored) test that calls [`run_worker`]; `store_name`
/// labels the printed counts.
///
/// # Panics
///
/// When a ledger shows a duplicate effect, a re-run of a started
/// `charge_card` call, a lost result, or an unknown outcome not surfaced.
pub async fn kill_workers_mid_call(store_name: &str, entry: &str, url: &str) -> Counts {
    let started = Instant::now();
    let dir = idem_testkit::TempDir::new("idem-kill").expect("a temporary directory");
    let mut counts = Counts::default();
    let mut kill_rounds = Vec::new();
    for round in 0..KILL_ROUNDS {
        let (entry, url, path) = (entry.to_owned(), url.to_owned(), dir.path().to_owned());
        let round = tokio::task::spawn_blocking(move || kill_round(&entry, &url, &path, round))
            .await
            .expect("a kill round");
        kill_rounds.push(round);
    }

    // What the killed owners left, before the final round settles it.
    let store = idem_runtime::store::connect(url).await.expect("connect");
    let mut before = BTreeMap::new();
    for call in calls().into_iter().filter(|c| is_charge(c)) {
        let record = store.get(&key_of(&call)).await.expect("read a record");
        before.insert(call, before_final(record.as_ref()));
    }
    let charged_before = effects_per_call(&read_ledger(&dir.path().join("plain.ledger")));

    let (entry, url_owned, path) = (entry.to_owned(), url.to_owned(), dir.path().to_owned());
    let final_results = tokio::task::spawn_blocking(move || final_round(&entry, &url_owned, &path))
        .await
        .expect("the final round");

    // The final answer of every call: the last one the final worker got.
    let mut answers = BTreeMap::new();
    for line in results_of(&final_results) {
        if let ["done", call, code] = words(&line)[..] {
            answers.insert(call.to_string(), code.to_string());
        }
    }
    let mut after = BTreeMap::new();
    for call in calls().into_iter().filter(|c| is_charge(c)) {
        let record = store.get(&key_of(&call)).await.expect("read a record");
        after.insert(call, record);
    }
    store.close().await;

    // Every round's results.
    let mut every_answer = Vec::new();
    let call_of: BTreeMap<String, String> = calls()
        .into_iter()
        .map(|c| (key_of(&c).to_string(), c))
        .collect();
    let mut started_takeovers = BTreeSet::new();
    for (killed, results) in kill_rounds
        .iter()
        .flatten()
        .chain([&(false, final_results)])
    {
        let lines = results_of(results);
        let (mut starts, mut dones) = (0, 0);
        for line in &lines {
            match words(line)[..] {
                ["start", _] => starts += 1,
                ["done", call, code] => {
                    dones += 1;
                    every_answer.push((call.to_string(), code.to_string()));
                }
                ["takeover", key, started] => {
                    counts.takeovers += 1;
                    let call = &call_of[key];
                    match (is_charge(call), started) {
                        (true, "started") => {
                            counts.takeovers_started += 1;
                            started_takeovers.insert(call.clone());
                        }
                        (true, _) => counts.never_started_reruns += 1,
                        (false, _) => {}
                    }
                }
                _ => panic!("a malformed results line: {line:?}"),
            }
        }
        counts.calls += starts;
        counts.answered += dones;
        if *killed {
            counts.kills += 1;
            counts.calls_cut += starts - dones;
        }
    }

    let emails = read_ledger(&dir.path().join("honouring.ledger"));
    let charges = read_ledger(&dir.path().join("plain.ledger"));
    counts.email_requests = emails.len();
    check(
        &mut counts,
        &Evidence {
            answers: &answers,
            every_answer: &every_answer,
            before: &before,
            charged_before: &charged_before,
            after: &after,
            emails: &emails,
            charges: &charges,
            started_takeovers: &started_takeovers,
        },
    );
    counts.seconds = started.elapsed().as_secs_f64();
    eprintln!("KILL-TEST {store_name}: {counts:?}");
    counts
}

/// The words of a results line.
fn words(line: &str) -> Vec<&str> {
    line.split(' ').collect()
}

/// One round: start the workers, kill each at a random instant (unless it
/// finished first), wait for all. Returns, per worker, whether it was
/// killed and its results file.
///
/// The calls come in slices: round `r` makes the first `r + 1` of
/// `KILL_ROUNDS + 1` slices, so that every round has fresh calls for the
/// kills to cut, and the last slice is left to the final round (calls no
/// crash reached).
fn kill_round(entry: &str, url: &str, dir: &Path, round: usize) -> Vec<(bool, PathBuf)> {
    let calls = 2 * CALLS_PER_TOOL * (round + 1) / (KILL_ROUNDS + 1);
    let begun = Instant::now();
    let mut workers: Vec<(Duration, Worker)> = (0..WORKERS)
        .map(|i| {
            let after = Duration::from_millis(rand::random_range(KILL_AFTER_MS));
            let name = format!("round-{round}-worker-{i}");
            (after, spawn_worker(entry, url, dir, &name, calls, false))
        })
        .collect();
    workers.sort_by_key(|(after, _)| *after);
    let mut out = Vec::new();
    for (after, mut worker) in workers {
        std::thread::sleep(after.saturating_sub(begun.elapsed()));
        let killed = match worker.child.try_wait().expect("a worker's status") {
            // It finished every call before its kill came.
            Some(status) => {
                assert!(
                    status.success(),
                    "worker failed: {}",
                    stderr_of(worker.child)
                );
                false
            }
            None => {
                // SIGKILL: no destructor, no flush, no goodbye to the store.
                worker.child.kill().expect("SIGKILL a worker");
                worker.child.wait().expect("reap a worker");
                true
            }
        };
        out.push((killed, worker.results));
    }
    out
}

/// The final round: one worker, never killed, until every call has a
/// definite answer. Returns its results file.
fn final_round(entry: &str, url: &str, dir: &Path) -> PathBuf {
    let worker = spawn_worker(entry, url, dir, "final", 2 * CALLS_PER_TOOL, true);
    let results = worker.results.clone();
    let out = worker.child.wait_with_output().expect("the final worker");
    assert!(
        out.status.success(),
        "the final worker failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    results
}

fn stderr_of(child: Child) -> String {
    let out = child.wait_with_output().expect("a worker's output");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Effects per call of the provider that ignores keys.
fn effects_per_call(ledger: &[(String, String)]) -> BTreeMap<String, usize> {
    let mut effects = BTreeMap::new();
    for (call, _) in ledger {
        *effects.entry(call.clone()).or_default() += 1;
    }
    effects
}

/// Everything the checks compare.
struct Evidence<'a> {
    /// The final round's answer per call.
    answers: &'a BTreeMap<String, String>,
    /// Every answer of every round, `(call, code)`.
    every_answer: &'a [(String, String)],
    /// Each `charge_card` record after the kill rounds.
    before: &'a BTreeMap<String, Before>,
    /// Charges per call after the kill rounds.
    charged_before: &'a BTreeMap<String, usize>,
    /// Each `charge_card` record at the end.
    after: &'a BTreeMap<String, Option<Record>>,
    /// The honouring provider's ledger.
    emails: &'a [(String, String)],
    /// The ledger of the provider that ignores keys.
    charges: &'a [(String, String)],
    /// `charge_card` calls taken over from an owner that had started them.
    started_takeovers: &'a BTreeSet<String>,
}

/// The promises of the classes, against the ledgers:
///
/// * `send_email` (idempotent write): every call ends `ok`, and the
///   provider applied it exactly once — re-runs after takeovers carried the
///   same key, so no duplicate effect and no lost one.
/// * `charge_card` (non-idempotent write): at most one charge per call,
///   ever; a call whose owner had started the tool and vanished without an
///   outcome is answered `outcome_unknown` and never re-run; a call no
///   owner had started, and that no charge shows, ends charged exactly
///   once; a call taken over from an owner that had started it ends
///   `outcome_unknown` (had it run again, a charge that the killed owner
///   never made could pass for its own); an `ok` answer, in any round, means a charge happened; and no
///   charge happened without the attempt being marked started first.
fn check(counts: &mut Counts, ev: &Evidence<'_>) {
    let calls = calls();
    let mut failures = Vec::new();
    for call in &calls {
        let answer = ev.answers.get(call).map(String::as_str);
        if !is_charge(call) {
            let keys: BTreeSet<&str> = ev
                .emails
                .iter()
                .filter(|(c, _)| c == call)
                .map(|(_, k)| k.as_str())
                .collect();
            counts.email_effects += keys.len();
            if answer != Some("ok") {
                failures.push(format!("{call}: final answer {answer:?}, not ok"));
            }
            if keys.len() != 1 {
                failures.push(format!(
                    "{call}: applied under {} keys: {keys:?}",
                    keys.len()
                ));
            }
            if keys.iter().any(|k| *k != key_of(call).as_str()) {
                failures.push(format!("{call}: sent under a key not its own: {keys:?}"));
            }
            continue;
        }
        let charged = ev.charges.iter().filter(|(c, _)| c == call).count();
        let charged_before = ev.charged_before.get(call).copied().unwrap_or(0);
        counts.charge_effects += charged;
        if charged > 1 {
            failures.push(format!("{call}: charged {charged} times"));
        }
        let before = ev.before[call];
        if charged_before > 0 && before < Before::StartedNoOutcome {
            failures.push(format!(
                "{call}: charged, but its record ({before:?}) shows no started attempt"
            ));
        }
        match before {
            Before::NeverClaimed | Before::ClaimedNotStarted => {
                if before == Before::NeverClaimed {
                    counts.never_claimed += 1;
                } else {
                    counts.not_started_before_final += 1;
                }
                if answer != Some("ok") || charged != 1 {
                    failures.push(format!(
                        "{call}: never started ({before:?}), then answered {answer:?} with {charged} charges; \
                         it should have run exactly once"
                    ));
                }
            }
            Before::StartedNoOutcome | Before::RecordedUnknown => {
                if answer != Some("outcome_unknown") {
                    failures.push(format!(
                        "{call}: started by a killed owner ({before:?}), answered {answer:?}, not outcome_unknown"
                    ));
                }
                if charged != charged_before {
                    failures.push(format!(
                        "{call}: re-run after its outcome became unknown ({charged_before} → {charged} charges)"
                    ));
                }
            }
            Before::Succeeded => {
                if answer != Some("ok") || charged != 1 {
                    failures.push(format!(
                        "{call}: succeeded, then answered {answer:?} with {charged} charges"
                    ));
                }
            }
        }
        if ev.started_takeovers.contains(call) && answer != Some("outcome_unknown") {
            failures.push(format!(
                "{call}: taken over from an owner that had started it, then answered {answer:?}"
            ));
        }
        if answer == Some("outcome_unknown") {
            counts.unknown_surfaced += 1;
            counts.unknown_with_effect += usize::from(charged > 0);
            let marked = ev.after[call]
                .as_ref()
                .is_some_and(|r| r.steps.contains_key(ATTEMPT_STEP));
            if !marked {
                failures.push(format!(
                    "{call}: outcome_unknown, but its record never marked an attempt started"
                ));
            }
        }
    }
    // An `ok` in any round is a result someone was given: its effect must
    // be in the ledger.
    for (call, code) in ev.every_answer {
        if code != "ok" {
            continue;
        }
        let effects = if is_charge(call) {
            ev.charges.iter().filter(|(c, _)| c == call).count()
        } else {
            ev.emails.iter().filter(|(c, _)| c == call).count()
        };
        if effects == 0 {
            failures.push(format!(
                "{call}: answered ok, but the provider never saw it"
            ));
        }
    }
    failures.dedup();
    assert!(
        failures.is_empty(),
        "{} broken promise(s):\n{}\n{counts:?}",
        failures.len(),
        failures.join("\n")
    );
}
