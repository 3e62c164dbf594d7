//! The second driver: worker processes killed with SIGKILL in the middle of
//! calls, then restarted, on a durable store. The same world as the
//! schedules' ([`World`](crate::World)), with its ledger in a file that
//! every worker shares, the same tools, the same checks
//! ([`oracle`](crate::oracle)), and the checks only kills can make.
//!
//! The scenario, on one store:
//!
//! 1. Several rounds: worker processes (the test binary that calls
//!    [`kill_workers_mid_call`], re-run through [`WORKER_ENV`]) make the
//!    keyed calls given out so far (each round adds a slice of fresh ones)
//!    in a random order, several at a time, with a short lease, tool bodies
//!    that take random short times and a store that answers a little late;
//!    each worker is killed with SIGKILL at a random instant, most often in
//!    the middle of a call.
//! 2. The state of every `delete_account` record is read from the store.
//! 3. A final worker, never killed, makes every call (the last slice for
//!    the first time) until each has a definite answer
//!    ([`oracle::is_definite`](crate::oracle::is_definite)).
//! 4. The providers' ledger, which no kill can touch, must show what the
//!    classes promise: the shared checks (no duplicate effect, no lost
//!    result, nothing refused but applied); every `charge` applied exactly
//!    once, under its own key; every `delete_account` at most once, a
//!    started one whose owner vanished answered `outcome_unknown` and never
//!    re-run, one nobody started run exactly once.
//!
//! The calls are `charge-NN` (`charge`, an idempotent write: the payment
//! provider honours its key) and `delete-NN` (`delete_account`,
//! irreversible: the account service takes no key, and the tool has no
//! reconcile hook, so a call whose owner vanished after starting it must
//! end `outcome_unknown`, never run again).

mod check;
mod worker;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idem_runtime::key::{derive_key, KeyInput, KeySource, DEFAULT_KEY_VERSION};
use idem_runtime::{IdempotencyKey, Namespace, ToolDef};
use serde::{Deserialize, Serialize};

use crate::ledger;
use crate::oracle::Acked;
use crate::tools::{Charge, DeleteAccount};

use idem_runtime::store::StoreExt;
pub use worker::run_worker;

/// The environment variable that makes the test binary a worker: what it
/// is to do, as JSON.
pub const WORKER_ENV: &str = "IDEM_KILL_WORKER";

/// Calls of each tool: `charge-00`…, `delete-00`….
const CALLS_PER_TOOL: usize = 50;
/// Rounds of workers that are killed.
const KILL_ROUNDS: usize = 8;
/// Worker processes per round.
const WORKERS: usize = 3;
/// Each worker of a kill round is killed this long after it starts.
const KILL_AFTER_MS: std::ops::Range<u64> = 100..900;

/// What a worker is told through [`WORKER_ENV`].
#[derive(Debug, Serialize, Deserialize)]
struct WorkerSpec {
    /// The store's URL.
    url: String,
    /// The providers' ledger.
    ledger: PathBuf,
    /// The worker's own results file.
    results: PathBuf,
    /// How many of the fixed calls (the first ones of [`calls`]) it makes.
    calls: usize,
    /// The final round: call every key until its answer is definite.
    until_definite: bool,
}

/// The fixed calls: `charge-NN` and `delete-NN`.
fn calls() -> Vec<String> {
    (0..CALLS_PER_TOOL)
        .flat_map(|i| [format!("charge-{i:02}"), format!("delete-{i:02}")])
        .collect()
}

/// Whether `call` is one of the irreversible ones.
fn is_delete(call: &str) -> bool {
    call.starts_with("delete-")
}

/// The key the executor derives for `call` (default namespace, call id).
fn key_of(call: &str) -> IdempotencyKey {
    let tool = if is_delete(call) {
        DeleteAccount::SPEC.name
    } else {
        Charge::SPEC.name
    };
    derive_key(&KeyInput {
        version: DEFAULT_KEY_VERSION,
        namespace: &Namespace::default(),
        tool,
        source: KeySource::CallId(call),
    })
    .expect("a valid key")
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
    /// Claims answered on the caller's thread
    /// ([`FastPath::claim_local`](idem_runtime::store::FastPath::claim_local)): on
    /// SQLite, duplicates of decided calls.
    pub claims_local: usize,
    /// Claims that took a key over from a killed owner.
    pub takeovers: usize,
    /// Of them, claims won on the caller's thread.
    pub takeovers_local: usize,
    /// Takeovers of `delete_account` calls whose killed owner had started
    /// the tool: each must end `outcome_unknown`, never re-run.
    pub takeovers_started: usize,
    /// Requests the payment provider received (re-runs included).
    pub charge_requests: usize,
    /// Charges the payment provider applied (one per key).
    pub charges: usize,
    /// Deletions of the account service (every request).
    pub deletions: usize,
    /// `delete_account` calls answered `outcome_unknown` in the final round.
    pub unknown_surfaced: usize,
    /// Of them, calls whose deletion had in fact happened.
    pub unknown_with_effect: usize,
    /// Takeovers of `delete_account` calls whose killed owner had not
    /// started the tool: the call simply runs (at most one deletion all
    /// the same).
    pub never_started_reruns: usize,
    /// `delete_account` calls claimed by a killed owner that had not
    /// started the tool when the kill rounds ended; the final round must
    /// run each exactly once.
    pub not_started_before_final: usize,
    /// `delete_account` calls nobody had claimed when the kill rounds
    /// ended; the final round must run each exactly once.
    pub never_claimed: usize,
    /// Seconds the whole scenario took.
    pub seconds: f64,
}

/// Run the scenario on the store at `url`, with the ledger and the
/// workers' results files in `dir`, and check it. The caller is a test
/// binary: `entry` is the name of its (ignored) test that calls
/// [`run_worker`], which the workers run. `store_name` labels the counts,
/// printed on a `KILL-TEST` line.
///
/// # Panics
///
/// When the ledger shows a duplicate effect, a re-run of a started
/// `delete_account` call, a lost result, a call refused whose effect
/// applied, or an unknown outcome not surfaced.
pub async fn kill_workers_mid_call(store_name: &str, entry: &str, url: &str, dir: &Path) -> Counts {
    let started = Instant::now();
    let ledger_path = dir.join("providers.ledger");
    let mut counts = Counts::default();
    let mut kill_rounds = Vec::new();
    for round in 0..KILL_ROUNDS {
        let (entry, url, path) = (entry.to_owned(), url.to_owned(), dir.to_owned());
        let round = tokio::task::spawn_blocking(move || kill_round(&entry, &url, &path, round))
            .await
            .expect("a kill round");
        kill_rounds.push(round);
    }

    // What the killed owners left, before the final round settles it.
    let store = crate::stores::connect(url).await.expect("connect");
    let mut before = BTreeMap::new();
    for call in calls().into_iter().filter(|c| is_delete(c)) {
        let record = store.get(&key_of(&call)).await.expect("read a record");
        before.insert(call, check::before_final(record.as_ref()));
    }
    let deleted_before = check::deletions_per_call(&ledger::read(&ledger_path));

    let (entry, url_owned, path) = (entry.to_owned(), url.to_owned(), dir.to_owned());
    let final_results = tokio::task::spawn_blocking(move || final_round(&entry, &url_owned, &path))
        .await
        .expect("the final round");

    // The final answer of every call: the last one the final worker got.
    let mut answers = BTreeMap::new();
    for line in results_of(&final_results) {
        if let Some(Done { call, code, .. }) = Done::parse(&line) {
            answers.insert(call.to_owned(), code.to_owned());
        }
    }

    // Every round's results.
    let mut acked = Vec::new();
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
            if let Some(done) = Done::parse(line) {
                dones += 1;
                if let Some(output) = done.output {
                    acked.push(Acked {
                        label: format!("{} ({})", done.call, results.display()),
                        key: key_of(done.call),
                        output: serde_json::from_str(output).expect("an output"),
                    });
                }
                continue;
            }
            match line.split(' ').collect::<Vec<_>>()[..] {
                ["start", _] => starts += 1,
                ["local", _] => counts.claims_local += 1,
                ["takeover", key, started, here] => {
                    counts.takeovers += 1;
                    counts.takeovers_local += usize::from(here == "here");
                    let call = &call_of[key];
                    match (is_delete(call), started) {
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

    let ledger = ledger::read(&ledger_path);
    check::check(
        &mut counts,
        store.as_ref(),
        &check::Evidence {
            answers: &answers,
            acked: &acked,
            before: &before,
            deleted_before: &deleted_before,
            ledger: &ledger,
            started_takeovers: &started_takeovers,
        },
    )
    .await;
    store.close().await;
    counts.seconds = started.elapsed().as_secs_f64();
    eprintln!("KILL-TEST {store_name}: {counts:?}");
    counts
}

/// A `done CALL CODE [OUTPUT]` line of a results file.
struct Done<'a> {
    call: &'a str,
    code: &'a str,
    /// The output, as JSON, of an `ok`.
    output: Option<&'a str>,
}

impl<'a> Done<'a> {
    fn parse(line: &'a str) -> Option<Done<'a>> {
        let mut words = line.splitn(4, ' ');
        if words.next()? != "done" {
            return None;
        }
        let (call, code) = (words.next()?, words.next()?);
        Some(Done {
            call,
            code,
            output: words.next(),
        })
    }
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

/// A worker process of one round.
struct Worker {
    child: Child,
    results: PathBuf,
}

/// Start a worker (this test binary, running only its test `entry`) with
/// its own results file.
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
        ledger: dir.join("providers.ledger"),
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
