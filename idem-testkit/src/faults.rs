//! Faults, and where they strike.
//!
//! Each call a worker makes carries at most one [`Fault`], drawn from the
//! schedule's seed. The worker is known to the code that injects faults
//! through a tokio task-local ([`WORKER`]), because that code — the store
//! wrapper [`SimStore`], the simulated tools, the approval policy — is
//! called from deep inside the executor, which knows nothing of workers.
//! Everything a call does, lease renewals included, runs inside the call's
//! future and so sees its worker.
//!
//! A crash is simulated the way a process dies: the worker's call future is
//! dropped where it stands. The fault site signals the crash and then never
//! finishes; the worker's driver, racing the call against that signal,
//! drops the call. Whatever the store holds stays as it was — an in-flight
//! record whose lease nobody renews — and the lease decides.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use idem_runtime::clock::Timestamp;
use idem_runtime::ctx::INTENT_STEP;
use idem_runtime::executor::ATTEMPT_STEP;
use idem_runtime::record::{Fence, Outcome};
use idem_runtime::store::{ClaimOutcome, ClaimRequest};
use idem_runtime::{IdempotencyKey, Record, Store, StoreError};
use serde_json::Value;
use tokio::sync::Notify;

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

/// A store operation, as a fault names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// [`Store::claim`].
    Claim,
    /// [`Store::checkpoint`].
    Checkpoint,
    /// [`Store::renew`].
    Renew,
    /// [`Store::complete`].
    Complete,
    /// [`Store::release`].
    Release,
    /// [`Store::get`].
    Get,
    /// [`Store::wait`].
    Wait,
}

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
        /// The operation.
        op: Op,
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
    /// The provider's latency for this worker when nothing is slow.
    latency: Duration,
    /// Signalled when the worker crashes; its driver drops the call.
    pub(crate) crashed: Notify,
    /// While frozen, store operations wait until this instant.
    frozen_until: Mutex<Option<tokio::time::Instant>>,
    world: Arc<World>,
}

impl Worker {
    pub(crate) fn new(id: usize, fault: Fault, latency: Duration, world: Arc<World>) -> Self {
        Worker {
            id,
            fault,
            struck: AtomicBool::new(false),
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

    /// Crash if the fault is a crash at `point`.
    async fn crash_at(&self, point: CrashPoint) {
        if self
            .strike(|f| (*f == Fault::Crash(point)).then_some(()))
            .is_some()
        {
            self.crash::<()>().await;
        }
    }

    /// Freeze for `d`: the caller sleeps, and every store operation this
    /// worker starts meanwhile waits until the end.
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
        if let Some(until) = until {
            tokio::time::sleep_until(until).await;
        }
    }
}

/// The worker of the running call, if any.
fn current() -> Option<Arc<Worker>> {
    WORKER.try_with(Arc::clone).ok()
}

/// Where a tool body starts: a pause may strike.
pub(crate) async fn tool_starts() {
    if let Some(w) = current() {
        w.pause_at(PausePoint::ToolStart).await;
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

/// How a store answer shows in the trace, and whether it made the caller
/// an owner.
trait Traced {
    fn show(&self) -> String;
    fn acquired(&self) -> bool {
        false
    }
}

impl Traced for ClaimOutcome {
    fn show(&self) -> String {
        match self {
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
    fn acquired(&self) -> bool {
        matches!(self, ClaimOutcome::Acquired { .. })
    }
}

impl Traced for () {
    fn show(&self) -> String {
        "ok".into()
    }
}

impl Traced for Option<Record> {
    fn show(&self) -> String {
        match self {
            None => "absent".into(),
            Some(r) if r.outcome().is_some() => "completed".into(),
            Some(r) => format!("in flight under {}", r.fence()),
        }
    }
}

impl Traced for u64 {
    fn show(&self) -> String {
        self.to_string()
    }
}

impl Traced for Timestamp {
    fn show(&self) -> String {
        "now".into()
    }
}

/// The store every simulated worker uses: it forwards to the real store,
/// traces each operation, counts stale-fence refusals, and injects the
/// running worker's store faults, crashes and freezes.
#[derive(Debug)]
pub(crate) struct SimStore {
    inner: Arc<dyn Store>,
    world: Arc<World>,
}

impl SimStore {
    pub(crate) fn new(inner: Arc<dyn Store>, world: Arc<World>) -> Self {
        SimStore { inner, world }
    }

    fn unreachable(&self, op: Op, applied: bool) -> StoreError {
        StoreError::Unavailable {
            store: self.inner.describe(),
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

    /// Run `op` on `key` (a checkpoint of `step`) through the faults of
    /// the running worker.
    async fn guard<T: Traced>(
        &self,
        op: Op,
        key: &IdempotencyKey,
        step: Option<&str>,
        forward: impl Future<Output = Result<T, StoreError>> + Send,
    ) -> Result<T, StoreError> {
        let worker = current();
        let who = worker.as_ref().map_or(0, |w| w.id);
        let what = format!(
            "w{who} {op:?}{} key={}",
            step.map(|s| format!(" {s}")).unwrap_or_default(),
            short(key.as_str())
        );
        if let Some(w) = &worker {
            w.thawed().await;
            if w.strike(|f| (*f == Fault::StoreFails { op, applied: false }).then_some(()))
                .is_some()
            {
                self.world
                    .event(format!("{what} -> unreachable (not applied)"));
                return Err(self.unreachable(op, false));
            }
            if op == Op::Complete {
                w.crash_at(CrashPoint::BeforeRecord).await;
                w.pause_at(PausePoint::BeforeRecord).await;
            }
        }
        let result = forward.await;
        match &result {
            Ok(answer) => self.world.event(format!("{what} -> {}", answer.show())),
            Err(e @ StoreError::StaleFence { .. }) => {
                self.world
                    .counters
                    .stale_writes_rejected
                    .fetch_add(1, Ordering::Relaxed);
                self.world.event(format!("{what} -> REJECTED {e}"));
            }
            Err(e) => self.world.event(format!("{what} -> error {e}")),
        }
        let Some(w) = worker else { return result };
        let Ok(answer) = &result else { return result };
        if w.strike(|f| (*f == Fault::StoreFails { op, applied: true }).then_some(()))
            .is_some()
        {
            self.world.event(format!("{what} -> unreachable (applied)"));
            return Err(self.unreachable(op, true));
        }
        let point = match (op, step) {
            (Op::Claim, _) if answer.acquired() => Some(CrashPoint::AfterClaim),
            (Op::Checkpoint, Some(ATTEMPT_STEP)) => Some(CrashPoint::AfterStarted),
            (Op::Checkpoint, Some(INTENT_STEP)) => Some(CrashPoint::AfterIntent),
            (Op::Complete, _) => Some(CrashPoint::AfterRecord),
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
}

#[async_trait]
impl Store for SimStore {
    fn describe(&self) -> String {
        format!("sim({})", self.inner.describe())
    }

    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.guard(Op::Claim, req.key, None, self.inner.claim(req))
            .await
    }

    async fn checkpoint(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        step: &str,
        value: &Value,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let forward = self.inner.checkpoint(key, fence, step, value, lease);
        self.guard(Op::Checkpoint, key, Some(step), forward).await
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let forward = self.inner.renew(key, fence, lease);
        self.guard(Op::Renew, key, None, forward).await
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let forward = self.inner.complete(key, fence, outcome, ttl);
        self.guard(Op::Complete, key, None, forward).await
    }

    async fn release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        let forward = self.inner.release(key, fence);
        self.guard(Op::Release, key, None, forward).await
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.guard(Op::Get, key, None, self.inner.get(key)).await
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
        self.guard(Op::Wait, key, None, self.inner.wait(key, timeout))
            .await
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        self.inner.sweep().await
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.inner.now().await
    }

    async fn close(&self) {
        self.inner.close().await
    }
}
