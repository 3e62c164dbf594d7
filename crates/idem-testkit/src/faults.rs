//! Faults, and where they strike.
//!
//! Each call a worker makes carries at most one [`Fault`], drawn from the
//! schedule's seed. The worker is known to the code that injects faults
//! through a tokio task-local ([`WORKER`]), because that code — the hook
//! [`Faults`] on the store's [`Interceptor`], the simulated tools, the
//! approval policy — is called from deep inside the executor, which knows
//! nothing of workers.
//! Everything a call does, lease renewals included, runs inside the call's
//! future and so sees its worker.
//!
//! A crash is simulated the way a process dies: the worker's call future is
//! dropped where it stands. The fault site signals the crash and then never
//! finishes; the worker's driver, racing the call against that signal,
//! drops the call. Whatever the store holds stays as it was — an in-flight
//! record whose lease nobody renews — and the lease decides.
//!
//! The claim on the caller's thread ([`FastPath::claim_local`](idem_runtime::store::FastPath::claim_local): the memory
//! store's every claim, SQLite's duplicates of completed calls) goes
//! through [`Hook::around_local`], so that the fast path users run is the
//! one under faults. It cannot await: a store fault strikes there as it
//! does anywhere (refused: the error is the answer; applied: the claim is
//! made, then the error is the answer), but a crash or a pause right after
//! a claim won there is only marked on the worker, and strikes at its next
//! fault site — the next store operation, the tool's start, the approval
//! policy, a reconcile hook — each of which first waits out a freeze and
//! dies of a marked crash ([`Worker::halt`]). Between the claim and that
//! site the executor does nothing anyone can see (no store write, no
//! effect), so the world is then exactly as a crash or a pause right after
//! the claim leaves it: claimed, nothing else happened; a freeze is
//! measured from the claim itself.

use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use idem_runtime::ctx::INTENT_STEP;
use idem_runtime::executor::ATTEMPT_STEP;

use idem_runtime::store::intercept::{Answer, Hook, Interceptor, OpKind, Operation};
use idem_runtime::store::{ClaimOutcome, ClaimRequest, LocalClaim, WaitFor};
use idem_runtime::{Record, Store, StoreError};
use tokio::sync::Notify;

use crate::volatile::Volatile;
use crate::world::{lock, short, World};

/// A point between claim and record where a worker can crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// The claim was written; nothing else.
    AfterClaim,
    /// The executor recorded that attempt 1 is starting (`idem:attempt`).
    AfterStarted,
    /// The tool recorded its intent (`ctx.intent`), before calling the
    /// provider.
    AfterIntent,
    /// The provider applied the effect; the tool has not returned.
    AfterProvider,
    /// The outcome is about to be recorded and is not.
    BeforeRecord,
    /// The outcome was recorded; the caller never hears of it.
    AfterRecord,
}

/// The store operations a fault can strike (the others pass untouched).
pub const FAULTY_OPS: [OpKind; 7] = {
    use OpKind::*;
    [Claim, Checkpoint, Renew, Complete, Release, Get, Wait]
};

/// Where a worker freezes, as a process stopped by the scheduler or a
/// garbage collector: its tool and its store traffic (lease renewals
/// included) stand still.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PausePoint {
    /// Just after the claim acquired the key, before anything else.
    AfterClaim,
    /// As the tool body starts, before its intent is recorded.
    ToolStart,
    /// Just before the outcome is recorded.
    BeforeRecord,
}

/// What goes wrong in one worker's call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Nothing.
    None,
    /// The worker dies at this point.
    Crash(CrashPoint),
    /// The first such operation fails as unreachable, either before the
    /// store saw it (`applied: false`) or after it applied (`applied:
    /// true`: the write happened, the answer was lost).
    StoreFails {
        /// The operation, one of [`FAULTY_OPS`].
        op: OpKind,
        /// Whether the write applied before the error.
        applied: bool,
    },
    /// The worker freezes for this long (more than the lease).
    Pause(PausePoint, Duration),
    /// The provider takes this long (more than the lease, less than the
    /// timeout) before it applies the effect.
    SlowProvider(Duration),
    /// The provider applies the effect, then its answer never arrives: the
    /// call times out after the provider accepted it.
    TimeoutAfterAccept,
    /// The approval policy takes this long (more than the lease).
    SlowApproval(Duration),
    /// The power fails at this point: the store loses the claims it had
    /// not flushed (the non-durable claims made since its last durable
    /// write, of any worker). With `worker_dies`, the worker dies too, as
    /// a crash at that point (an embedded store: the machine lost power);
    /// otherwise it lives on (a store server restarted under it).
    PowerCut {
        /// Where it strikes.
        at: CrashPoint,
        /// Whether the worker dies with the store's unflushed writes.
        worker_dies: bool,
    },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::None => f.write_str("no fault"),
            Fault::Crash(p) => write!(f, "crash {p:?}"),
            Fault::StoreFails { op, applied } => {
                write!(
                    f,
                    "store fails {op:?} {}",
                    if *applied { "after" } else { "before" }
                )
            }
            Fault::Pause(p, d) => write!(f, "pause {p:?} {}ms", d.as_millis()),
            Fault::SlowProvider(d) => write!(f, "slow provider {}ms", d.as_millis()),
            Fault::TimeoutAfterAccept => f.write_str("timeout after accept"),
            Fault::SlowApproval(d) => write!(f, "slow approval {}ms", d.as_millis()),
            Fault::PowerCut { at, worker_dies } => write!(
                f,
                "power cut {at:?}, the worker {}",
                if *worker_dies { "dies" } else { "survives" }
            ),
        }
    }
}

tokio::task_local! {
    /// The worker whose call is running.
    pub(crate) static WORKER: Arc<Worker>;
}

/// One worker making one call (a process, a model repeating itself, an
/// operator's replay).
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) id: usize,
    fault: Fault,
    /// Set once the fault struck: each strikes once.
    struck: AtomicBool,
    /// Set when a crash struck where the worker could not die (a claim on
    /// the caller's thread): it dies at its next fault site.
    crash_marked: AtomicBool,
    /// Set when a power cut struck where it could not be carried out (a
    /// claim on the caller's thread, which cannot await the store): it is
    /// carried out at the worker's next fault site.
    cut_marked: AtomicBool,
    /// What the store has not flushed, which a power cut loses.
    volatile: Arc<Volatile>,
    /// The provider's latency for this worker when nothing is slow.
    latency: Duration,
    /// Signalled when the worker crashes; its driver drops the call.
    pub(crate) crashed: Notify,
    /// While frozen, store operations wait until this instant.
    frozen_until: Mutex<Option<tokio::time::Instant>>,
    world: Arc<World>,
}

impl Worker {
    pub(crate) fn new(
        id: usize,
        fault: Fault,
        latency: Duration,
        world: Arc<World>,
        volatile: Arc<Volatile>,
    ) -> Self {
        Worker {
            id,
            fault,
            struck: AtomicBool::new(false),
            crash_marked: AtomicBool::new(false),
            cut_marked: AtomicBool::new(false),
            volatile,
            latency,
            crashed: Notify::new(),
            frozen_until: Mutex::new(None),
            world,
        }
    }

    /// The fault, if `pick` selects it and it has not struck yet; it
    /// strikes now.
    fn strike<T>(&self, pick: impl FnOnce(&Fault) -> Option<T>) -> Option<T> {
        let found = pick(&self.fault)?;
        if self.struck.swap(true, Ordering::SeqCst) {
            return None;
        }
        self.world
            .event(format!("w{} FAULT {}", self.id, self.fault));
        Some(found)
    }

    /// Die here: signal the driver, which drops the call, and never finish.
    async fn crash<T>(&self) -> T {
        self.crashed.notify_one();
        let never = std::future::pending::<Infallible>().await;
        match never {}
    }

    /// Crash if the fault is a crash at `point`; cut the power (and die,
    /// if the worker dies with it) if it is a power cut there.
    async fn crash_at(&self, point: CrashPoint) {
        if self
            .strike(|f| (*f == Fault::Crash(point)).then_some(()))
            .is_some()
        {
            self.crash::<()>().await;
        }
        if self.power_cut_at(point) {
            self.cut_power().await;
        }
    }

    /// Whether the fault is a power cut at `point` (it strikes now).
    fn power_cut_at(&self, point: CrashPoint) -> bool {
        self.strike(|f| match f {
            Fault::PowerCut { at, .. } if *at == point => Some(()),
            _ => None,
        })
        .is_some()
    }

    /// The power cut of this worker's fault, which has struck: the store
    /// loses what it had not flushed; the worker dies too if it is to.
    async fn cut_power(&self) {
        self.volatile.cut(self.id, &self.world).await;
        if matches!(
            self.fault,
            Fault::PowerCut {
                worker_dies: true,
                ..
            }
        ) {
            self.crash::<()>().await;
        }
    }

    /// Freeze for `d`: the caller sleeps, and every fault site this worker
    /// reaches meanwhile (a lease renewal's store operation, say) waits
    /// until the end ([`Worker::halt`]).
    async fn freeze(&self, d: Duration) {
        let until = tokio::time::Instant::now() + d;
        *lock(&self.frozen_until) = Some(until);
        tokio::time::sleep_until(until).await;
    }

    /// Freeze if the fault is a pause at `point`.
    async fn pause_at(&self, point: PausePoint) {
        let pause = self.strike(|f| match f {
            Fault::Pause(p, d) if *p == point => Some(*d),
            _ => None,
        });
        if let Some(d) = pause {
            self.freeze(d).await;
        }
    }

    /// Wait out a freeze in progress.
    async fn thawed(&self) {
        let until = *lock(&self.frozen_until);
        if let Some(until) = until.filter(|u| *u > tokio::time::Instant::now()) {
            tokio::time::sleep_until(until).await;
        }
    }

    /// Whether the worker must wait or die before it does anything more:
    /// frozen, or marked to crash or to cut the power.
    fn halted(&self) -> bool {
        self.crash_marked.load(Ordering::SeqCst)
            || self.cut_marked.load(Ordering::SeqCst)
            || lock(&self.frozen_until).is_some_and(|u| u > tokio::time::Instant::now())
    }

    /// At a fault site: die of a crash marked on the caller's thread,
    /// carry out a power cut marked there, and wait out a freeze.
    async fn halt(&self) {
        if self.crash_marked.load(Ordering::SeqCst) {
            self.crash::<()>().await;
        }
        if self.cut_marked.swap(false, Ordering::SeqCst) {
            self.cut_power().await;
        }
        self.thawed().await;
    }
}

/// The worker of the running call, if any.
fn current() -> Option<Arc<Worker>> {
    WORKER.try_with(Arc::clone).ok()
}

/// Where a tool body starts: a pause may strike (after a freeze or a
/// crash marked earlier).
pub(crate) async fn tool_starts() {
    if let Some(w) = current() {
        w.halt().await;
        w.pause_at(PausePoint::ToolStart).await;
    }
}

/// Where a reconcile hook starts: a freeze or a crash marked earlier
/// strikes first.
pub(crate) async fn reconcile_starts() {
    if let Some(w) = current() {
        w.halt().await;
    }
}

/// The provider's latency for the running call: the worker's usual one,
/// or a slow one when that is its fault.
pub(crate) async fn provider_latency() {
    delay(|f| match f {
        Fault::SlowProvider(d) => Some(*d),
        _ => None,
    })
    .await
}

/// Sleep the running worker's usual latency, or the slow delay `slow`
/// picks from its fault.
async fn delay(slow: fn(&Fault) -> Option<Duration>) {
    let Some(w) = current() else { return };
    w.halt().await;
    let slow = w.strike(slow);
    tokio::time::sleep(slow.unwrap_or(w.latency)).await;
}

/// The provider applied the effect: the worker may crash before the tool
/// returns, or the answer may be lost (the call then times out).
pub(crate) async fn provider_applied() {
    let Some(w) = current() else { return };
    w.crash_at(CrashPoint::AfterProvider).await;
    if w.strike(|f| (*f == Fault::TimeoutAfterAccept).then_some(()))
        .is_some()
    {
        // Far beyond any timeout: the executor gives up first.
        tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    }
}

/// The approval policy's delay for the running call.
pub(crate) async fn approval_delay() {
    delay(|f| match f {
        Fault::SlowApproval(d) => Some(*d),
        _ => None,
    })
    .await
}

/// How a store answer shows in the trace.
fn show(answer: &Answer) -> String {
    match answer {
        Answer::Claim(outcome) => show_claim(outcome),
        Answer::Record(None) => "absent".into(),
        Answer::Record(Some(r)) => show_record(r),
        Answer::Done => "ok".into(),
        other => format!("{other:?}"),
    }
}

fn show_claim(outcome: &ClaimOutcome) -> String {
    match outcome {
        ClaimOutcome::Acquired {
            fence, takeover, ..
        } => match takeover {
            Some(t) => format!("acquired {fence} taking over from {}", t.previous),
            None => format!("acquired {fence}"),
        },
        ClaimOutcome::InFlight { fence, .. } => format!("in flight under {fence}"),
        ClaimOutcome::Completed(_) => "completed".into(),
        ClaimOutcome::KeyReused { .. } => "key reused".into(),
        ClaimOutcome::AwaitingApproval(_) => "awaiting approval".into(),
    }
}

fn show_local_claim(answer: &LocalClaim) -> String {
    match answer {
        LocalClaim::Claim(outcome) => show_claim(outcome),
        LocalClaim::Completed(_) => "completed".into(),
    }
}

fn show_record(r: &Record) -> String {
    if r.outcome().is_some() {
        "completed".into()
    } else {
        format!("in flight under {}", r.fence())
    }
}

/// The store every simulated worker uses: the real store behind
/// [`Faults`].
pub(crate) type SimStore = Interceptor<Faults>;

/// `inner` behind the simulation's faults, tracing into `world`, keeping
/// what it has not flushed in `volatile`.
pub(crate) fn sim_store(
    inner: Arc<dyn Store>,
    world: Arc<World>,
    volatile: Arc<Volatile>,
) -> SimStore {
    Interceptor::new(inner, Faults { world, volatile })
}

/// The hook of the simulation's store: it traces each operation, counts
/// stale-fence refusals, keeps what the store has not flushed, and
/// injects the running worker's store faults, crashes, power cuts and
/// freezes.
#[derive(Debug)]
pub(crate) struct Faults {
    world: Arc<World>,
    volatile: Arc<Volatile>,
}

impl Faults {
    fn unreachable(&self, store: &dyn Store, op: OpKind, applied: bool) -> StoreError {
        StoreError::Unavailable {
            store: store.describe(),
            cause: format!(
                "simulated: {op:?} {}",
                if applied {
                    "applied, then the connection dropped"
                } else {
                    "refused, connection reset"
                }
            )
            .into(),
        }
    }

    /// Trace what a store answered `what`, counting stale-fence refusals.
    fn trace<T>(&self, what: &str, result: &Result<T, StoreError>, show: impl Fn(&T) -> String) {
        match result {
            Ok(answer) => self.world.event(format!("{what} -> {}", show(answer))),
            Err(e @ StoreError::StaleFence { .. }) => {
                self.world
                    .counters
                    .stale_writes_rejected
                    .fetch_add(1, Ordering::Relaxed);
                self.world.event(format!("{what} -> REJECTED {e}"));
            }
            Err(e) => self.world.event(format!("{what} -> error {e}")),
        }
    }
}

/// What the trace calls operation `kind` of worker `who` on `key` (a
/// checkpoint of `step`).
fn label(who: usize, kind: &str, key: &str, step: Option<&str>) -> String {
    format!(
        "w{who} {kind}{} key={}",
        step.map(|s| format!(" {s}")).unwrap_or_default(),
        short(key)
    )
}

#[async_trait]
impl Hook for Faults {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        let worker = current();
        if let Some(w) = &worker {
            w.halt().await;
        }
        let kind = op.kind();
        let decision = matches!(
            op,
            Operation::Wait {
                until: WaitFor::Decision,
                ..
            }
        );
        let Some(sim_op) = Some(kind).filter(|k| FAULTY_OPS.contains(k) && !decision) else {
            // Waits for a decision are traced; the rest (audit, scans,
            // replacements, the clock) pass untouched, but for what their
            // writes flush.
            if !decision {
                let result = op.run(store).await;
                if result.is_ok() && kind.writes() {
                    self.volatile.flushed();
                }
                return result;
            }
            let who = worker.as_ref().map_or(0, |w| w.id);
            let key = op.key().map_or("", |k| k.as_str());
            let what = label(who, "WaitForDecision", key, None);
            let result = op.run(store).await;
            self.trace(&what, &result, show);
            return result;
        };
        let step = match op {
            Operation::Checkpoint { step, .. } => Some(step),
            _ => None,
        };
        let who = worker.as_ref().map_or(0, |w| w.id);
        let what = label(
            who,
            &format!("{sim_op:?}"),
            op.key().map_or("", |k| k.as_str()),
            step,
        );
        if let Some(w) = &worker {
            let refused = Fault::StoreFails {
                op: sim_op,
                applied: false,
            };
            if w.strike(|f| (*f == refused).then_some(())).is_some() {
                self.world
                    .event(format!("{what} -> unreachable (not applied)"));
                return Err(self.unreachable(store, sim_op, false));
            }
            if sim_op == OpKind::Complete {
                w.crash_at(CrashPoint::BeforeRecord).await;
                w.pause_at(PausePoint::BeforeRecord).await;
            }
        }
        let result = op.run(store).await;
        self.trace(&what, &result, show);
        match (&op, &result) {
            (Operation::Claim(req), Ok(Answer::Claim(outcome))) => {
                self.volatile.claimed(req, outcome)
            }
            (_, Ok(_)) if kind.writes() => self.volatile.flushed(),
            _ => {}
        }
        let Some(w) = worker else { return result };
        let Ok(answer) = &result else { return result };
        let lost = Fault::StoreFails {
            op: sim_op,
            applied: true,
        };
        if w.strike(|f| (*f == lost).then_some(())).is_some() {
            self.world.event(format!("{what} -> unreachable (applied)"));
            return Err(self.unreachable(store, sim_op, true));
        }
        let acquired = matches!(answer, Answer::Claim(ClaimOutcome::Acquired { .. }));
        let point = match (sim_op, step) {
            (OpKind::Claim, _) if acquired => Some(CrashPoint::AfterClaim),
            (OpKind::Checkpoint, Some(ATTEMPT_STEP)) => Some(CrashPoint::AfterStarted),
            (OpKind::Checkpoint, Some(INTENT_STEP)) => Some(CrashPoint::AfterIntent),
            (OpKind::Complete, _) => Some(CrashPoint::AfterRecord),
            _ => None,
        };
        if let Some(point) = point {
            w.crash_at(point).await;
        }
        if point == Some(CrashPoint::AfterClaim) {
            w.pause_at(PausePoint::AfterClaim).await;
        }
        result
    }

    /// The claim on the caller's thread, under the same faults as the
    /// usual one (see the [module docs](self) for crashes and pauses,
    /// which strike at the worker's next fault site).
    fn around_local(
        &self,
        req: &ClaimRequest<'_>,
        store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        let Some(w) = current() else {
            let result = store.fast_path().and_then(|fast| fast.claim_local(req));
            if let Some(Ok(LocalClaim::Claim(outcome))) = &result {
                self.volatile.claimed(req, outcome);
            }
            return result;
        };
        // A frozen worker, or one marked to crash, must not claim before
        // it waits or dies: the usual claim's `around` does both.
        if w.halted() {
            return None;
        }
        let what = label(w.id, "ClaimLocal", req.key.as_str(), None);
        let refused = Fault::StoreFails {
            op: OpKind::Claim,
            applied: false,
        };
        if w.strike(|f| (*f == refused).then_some(())).is_some() {
            self.world
                .event(format!("{what} -> unreachable (not applied)"));
            return Some(Err(self.unreachable(store, OpKind::Claim, false)));
        }
        // `None`: the store answers this claim the usual way, where the
        // worker's claim faults strike instead.
        let result = store.fast_path()?.claim_local(req)?;
        self.trace(&what, &result, show_local_claim);
        let Ok(outcome) = &result else {
            return Some(result);
        };
        if let LocalClaim::Claim(outcome) = outcome {
            self.volatile.claimed(req, outcome);
        }
        let lost = Fault::StoreFails {
            op: OpKind::Claim,
            applied: true,
        };
        if w.strike(|f| (*f == lost).then_some(())).is_some() {
            self.world.event(format!("{what} -> unreachable (applied)"));
            return Some(Err(self.unreachable(store, OpKind::Claim, true)));
        }
        if matches!(outcome, LocalClaim::Claim(ClaimOutcome::Acquired { .. })) {
            let crash = Fault::Crash(CrashPoint::AfterClaim);
            if w.strike(|f| (*f == crash).then_some(())).is_some() {
                w.crash_marked.store(true, Ordering::SeqCst);
            } else if w.power_cut_at(CrashPoint::AfterClaim) {
                w.cut_marked.store(true, Ordering::SeqCst);
            } else if let Some(d) = w.strike(|f| match f {
                Fault::Pause(PausePoint::AfterClaim, d) => Some(*d),
                _ => None,
            }) {
                *lock(&w.frozen_until) = Some(tokio::time::Instant::now() + d);
            }
        }
        Some(result)
    }

    fn describe(&self, inner: String) -> String {
        format!("sim({inner})")
    }
}
