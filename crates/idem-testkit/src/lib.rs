//! The test kit of the idem workspace (not published):
//!
//! - [`servers`]: real `redis-server`, Redis Cluster and PostgreSQL
//!   processes on loopback ports, temporary directories, the loud [`skip`]
//!   of a test whose server is missing, and the harness and multi-process
//!   helpers of the store tests;
//! - [`stores`] and [`on_every_store!`]: one test run on every store;
//! - [`tls_cases`]: the TLS refusals and CA files of the Redis and
//!   PostgreSQL stores' tests;
//! - [`power_cut`] (feature `sqlite`): a SQLite VFS that counts fsyncs
//!   and, when the power is cut, leaves of the files what was synced;
//! - the deterministic fault simulation below, which `examples/chaos.rs`
//!   drives.
//!
//! # Fault simulation
//!
//! Deterministic fault simulation of idem, in the spirit of FoundationDB's
//! simulation testing and TigerBeetle's VOPR.
//!
//! A seed draws a [`Schedule`]: a few tool calls of an agent run, each made
//! by several workers (concurrent duplicates, the model repeating itself,
//! operator replays), and a fault for many of them — a crash at every point
//! between claim and record, a timeout after the provider accepted, a
//! pause longer than the lease, a store error whose write may or may not
//! have applied, a provider or an approval slower than the lease, a power
//! cut that makes the store lose the claims it had not flushed. The
//! schedule runs against a real store through the real executor, with
//! simulated providers that write every request they receive to a
//! [`ledger`]. Afterwards the checks ([`oracle`]) look for a **duplicate
//! effect** (a key whose effect the ledger holds twice), a **lost result**
//! (an output acknowledged to a caller whose record or effect is missing)
//! and a call **refused but applied** (recorded as failed, its effect in
//! the ledger).
//!
//! The store every worker uses is the real one behind a hook on
//! [`Interceptor`](idem_runtime::store::intercept::Interceptor), so that
//! every method reaches it — the caller's-thread claim
//! ([`FastPath::claim_local`](idem_runtime::store::FastPath::claim_local): every claim on the memory store, duplicates of
//! completed calls on SQLite) included, under the same faults.
//!
//! On the memory store a schedule runs on a current-thread tokio runtime
//! whose clock is paused, and the store reads that clock ([`TokioClock`]):
//! time jumps from timer to timer, a schedule of many virtual seconds takes
//! microseconds, and the same seed gives the same trace, whose hash
//! ([`ScheduleReport::trace_hash`]) shows it. On durable stores time is
//! real: leases are short ([`Timing::real_time`]) and each schedule gets
//! its own key namespace.
//!
//! [`broken`] holds stores with one rule of the contract broken, to show
//! that the checks catch what they claim to.
//!
//! [`process`] is the other driver of the same world, tools and checks:
//! worker processes killed with SIGKILL mid-call on a durable store,
//! sharing a ledger in a file (`tests/faults/kill.rs`).

use std::sync::Arc;

use idem_runtime::store::MemoryStore;
use idem_runtime::{Namespace, Store};

pub mod broken;
pub mod claims;
pub mod clock;
mod faults;
pub mod ledger;
pub mod oracle;
#[cfg(feature = "sqlite")]
pub mod power_cut;
pub mod process;
mod schedule;
pub mod servers;
pub mod store_cases;
pub mod stores;
pub mod tls_cases;
mod tools;
mod volatile;
mod world;

pub use clock::TokioClock;
pub use faults::{CrashPoint, Fault, PausePoint, FAULTY_OPS};
pub use schedule::{run_schedule, Schedule, ScheduleReport, Timing};
pub use servers::{
    python_mcp, run_python_clients, skip, workspace_root, PostgresServer, RedisCluster,
    RedisServer, TempDir,
};
pub use stores::TestStore;
pub use world::World;

/// Run schedule `seed` on a fresh memory store, in paused time.
pub fn run_memory(seed: u64) -> ScheduleReport {
    run_memory_with(seed, |store| store)
}

/// Run schedule `seed` on a fresh memory store wrapped by `wrap` (a
/// [`broken::BrokenStore`], say), in paused time: deterministic.
pub fn run_memory_with(
    seed: u64,
    wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
) -> ScheduleReport {
    run_memory_schedule(&Schedule::draw(seed, &Timing::virtual_time()), wrap)
}

/// Run `schedule` (drawn for [`Timing::virtual_time`], or
/// [`Schedule::scripted`] with it) on a fresh memory store wrapped by
/// `wrap`, in paused time: deterministic.
pub fn run_memory_schedule(
    schedule: &Schedule,
    wrap: impl FnOnce(Arc<dyn Store>) -> Arc<dyn Store>,
) -> ScheduleReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(async {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(TokioClock::new())));
        run_schedule(
            wrap(store),
            schedule,
            Timing::virtual_time(),
            Namespace::default(),
        )
        .await
    })
}

/// Run schedule `seed` on a shared durable `store` in real time, under a
/// namespace made of `run_tag` and the seed, so that schedules, and runs
/// against the same server, do not share keys. Needs a tokio runtime with
/// time enabled (and I/O for Redis and PostgreSQL).
///
/// In real time a lease means what it says: a process starved of CPU for
/// longer than the lease while its provider call is in flight is a pause
/// past the lease that no store can see, so `timing` must leave the
/// machine room (many schedules at once on a loaded machine need a longer
/// lease than [`Timing::real_time`]).
pub async fn run_durable(
    store: Arc<dyn Store>,
    seed: u64,
    run_tag: &str,
    timing: Timing,
) -> ScheduleReport {
    let schedule = Schedule::draw(seed, &timing);
    let namespace =
        Namespace::new(format!("chaos-{run_tag}-{seed}")).expect("a short namespace is valid");
    run_schedule(store, &schedule, timing, namespace).await
}

/// The totals over many schedules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Schedules run.
    pub schedules: u64,
    /// Keys whose effect applied more than once.
    pub duplicate_effects: u64,
    /// Acknowledged outputs whose record or effect is missing.
    pub lost_results: u64,
    /// Keys whose effect applied while their record says the call failed.
    pub refused_but_applied: u64,
    /// Writes refused for a stale fence.
    pub stale_writes_rejected: u64,
    /// `OutcomeUnknown` errors returned to callers.
    pub unknown_outcomes: u64,
    /// Reconcile hooks that answered Applied or NotApplied.
    pub reconciled: u64,
    /// Power cuts that struck.
    pub power_cuts: u64,
    /// Non-durable claims the power cuts made the store lose.
    pub claims_undone: u64,
    /// Calls with no definite answer after the settle phase (a liveness
    /// measure, not a safety failure).
    pub unsettled: u64,
    /// Seeds of the schedules that found a duplicate, a lost result or a
    /// call refused whose effect applied.
    pub failing_seeds: Vec<u64>,
}

impl Summary {
    /// Add one schedule's report.
    pub fn add(&mut self, report: &ScheduleReport) {
        self.schedules += 1;
        self.duplicate_effects += report.duplicate_effects.len() as u64;
        self.lost_results += report.lost_results.len() as u64;
        self.refused_but_applied += report.refused_but_applied.len() as u64;
        self.stale_writes_rejected += report.stale_writes_rejected;
        self.unknown_outcomes += report.unknown_outcomes;
        self.reconciled += report.reconciled;
        self.power_cuts += report.power_cuts;
        self.claims_undone += report.claims_undone;
        self.unsettled += report.unsettled;
        if report.failed() {
            self.failing_seeds.push(report.seed);
        }
    }

    /// Whether no schedule found a duplicate, a lost result or a call
    /// refused whose effect applied.
    pub fn passed(&self) -> bool {
        self.duplicate_effects == 0 && self.lost_results == 0 && self.refused_but_applied == 0
    }

    /// The one-line summary the `chaos` example ends with.
    pub fn line(&self) -> String {
        format!(
            "schedules: {}, duplicate effects: {}, lost results: {}, refused but applied: {}, stale writes rejected: {}, unknown outcomes surfaced: {}, reconciled: {}, power cuts: {}, claims lost to them: {}",
            self.schedules,
            self.duplicate_effects,
            self.lost_results,
            self.refused_but_applied,
            self.stale_writes_rejected,
            self.unknown_outcomes,
            self.reconciled,
            self.power_cuts,
            self.claims_undone
        )
    }
}
