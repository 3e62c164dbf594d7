//! Keeping an owner's lease while its tool works: the renewal loop the
//! executor races against the tool's future ([`ToolCtx::keep_lease`]),
//! and the keeper of a body that blocks its thread
//! ([`ToolCtx::run_blocking`]), which the executor cannot race.
//!
//! A blocking body is registered with one keeper thread of the process
//! (a lock and a map entry, no wake-up: the keeper ticks on its own).
//! Only a body still running a sixth of the lease after it started gets
//! the renewal loop, spawned on the runtime the call runs in, so a body
//! that returns sooner — most — costs no task and no thread switch.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::task::AbortHandle;

use crate::store::{StoreError, StoreExt};

use super::ToolCtx;

impl ToolCtx {
    /// Renew the owner's lease every third of it, the first time `first`
    /// from now, for as long as the owner works (the caller drops this
    /// future, or aborts its task, when the work ends). When a renewal
    /// finds a newer fence, or the store stays unreachable until the
    /// lease would have run out, the lease is marked lost: the tool sees
    /// it ([`ToolCtx::is_superseded`]), no retry starts, and nothing this
    /// owner writes is accepted as its outcome. A context that is not a
    /// keyed owner's holds no lease: nothing to renew, it waits forever.
    pub(crate) async fn keep_lease(&self, first: Duration) -> Infallible {
        let (Some(log), Some(lost)) = (self.call.steps.as_ref(), self.lease()) else {
            return std::future::pending().await;
        };
        let lease = log.lease;
        let every = lease / 3;
        let mut next = first;
        loop {
            tokio::time::sleep(next).await;
            // The deadline is measured from before each request (and from
            // before the claim), so it is never later than the store's.
            let sent = tokio::time::Instant::now();
            let left = lost.held_until().saturating_duration_since(sent);
            let renewal = log.store.renew(&log.key, log.fence, lease);
            match tokio::time::timeout(left, renewal).await {
                Ok(Ok(())) => {
                    lost.extend(sent + lease);
                    next = every;
                }
                Ok(Err(e @ StoreError::StaleFence { .. })) => {
                    tracing::warn!(error = %e, "lease taken over by another owner; stopping");
                    break;
                }
                Ok(Err(e)) => {
                    let left = lost
                        .held_until()
                        .saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        tracing::warn!(error = %e, "could not renew the lease before it ran out; stopping");
                        break;
                    }
                    tracing::warn!(error = %e, "could not renew the lease; trying again");
                    // Again soon, and at the latest when the lease runs out.
                    next = left.min(every);
                }
                Err(_) => {
                    tracing::warn!("the lease ran out while a renewal was unanswered; stopping");
                    break;
                }
            }
        }
        lost.lose();
        std::future::pending().await
    }

    /// Run `body`, which blocks this thread until it returns (a function
    /// of another language called in place, a blocking client), as this
    /// call's tool body, and return what it returns.
    ///
    /// The executor renews a keyed owner's lease while its tool's future
    /// is pending; a body that blocks the thread inside one poll leaves it
    /// no chance to. Inside `run_blocking` the lease is renewed from the
    /// runtime's other threads instead, every third of it, so a long body
    /// is not taken over by another caller, and a lost lease is told as
    /// usual ([`ToolCtx::is_superseded`]). The fence, the intent mark and
    /// the outcome's recording are the executor's, unchanged.
    ///
    /// Call it from the tool's `call`, which the executor polls inside a
    /// tokio runtime. A context that holds no lease (a `read`'s), or a
    /// thread outside any runtime, just runs `body`. The tool's timeout
    /// cannot cut a blocking body short: a body that returns is the
    /// attempt's result, however long it took.
    ///
    /// ```
    /// # use idem_runtime::{ToolCtx, ToolError};
    /// # fn blocking_send() -> &'static str { "sent" }
    /// # async fn send(ctx: &ToolCtx) -> Result<&'static str, ToolError> {
    /// Ok(ctx.run_blocking(blocking_send))
    /// # }
    /// ```
    pub fn run_blocking<R>(&self, body: impl FnOnce() -> R) -> R {
        let kept = Kept::register(self);
        let out = body();
        drop(kept);
        out
    }
}

/// A blocking body registered with the keeper; unregistered when dropped.
struct Kept(Option<u64>);

impl Kept {
    /// Register the body of `ctx`, if it has a lease to keep and runs
    /// inside a runtime.
    fn register(ctx: &ToolCtx) -> Kept {
        let (Some(log), Some(_), Ok(runtime)) =
            (ctx.call.steps.as_ref(), ctx.lease(), Handle::try_current())
        else {
            return Kept(None);
        };
        let after = log.lease / 6;
        let keeper = keeper();
        let mut state = keeper.lock();
        let id = state.next;
        state.next += 1;
        let due = Instant::now() + after;
        state.bodies.insert(
            id,
            Body {
                ctx: ctx.clone(),
                runtime,
                due,
                rest: log.lease / 3 - after,
                renewing: None,
            },
        );
        // The keeper ticks every sixth of the shortest lease it has seen:
        // it is woken only by a body due before its next tick.
        if state.tick.is_none_or(|t| after < t) {
            state.tick = Some(after);
        }
        if state.wakes_at.is_none_or(|at| due < at) {
            keeper.wake.notify_one();
        }
        Kept(Some(id))
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let Some(id) = self.0 else { return };
        let body = keeper().lock().bodies.remove(&id);
        if let Some(renewing) = body.and_then(|b| b.renewing) {
            renewing.abort();
        }
    }
}

/// A blocking body the keeper watches.
struct Body {
    ctx: ToolCtx,
    /// The runtime the call runs in, where its renewals run.
    runtime: Handle,
    /// When its renewals start, if it still runs.
    due: Instant,
    /// From then, the wait before the first renewal.
    rest: Duration,
    /// The renewal loop, once started.
    renewing: Option<AbortHandle>,
}

/// The keeper's state.
#[derive(Default)]
struct State {
    next: u64,
    bodies: HashMap<u64, Body>,
    /// How often the keeper looks at its bodies.
    tick: Option<Duration>,
    /// When the keeper wakes next (`None`: when woken).
    wakes_at: Option<Instant>,
}

/// The process's keeper of blocking bodies: a thread that starts the
/// renewal loop of each body still running when it is due.
struct Keeper {
    state: Mutex<State>,
    wake: Condvar,
}

impl Keeper {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The keeper thread's loop.
    fn run(&self) {
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            for body in state.bodies.values_mut() {
                if body.renewing.is_none() && body.due <= now {
                    let (ctx, rest) = (body.ctx.clone(), body.rest);
                    let task = body
                        .runtime
                        .spawn(async move { ctx.keep_lease(rest).await });
                    body.renewing = Some(task.abort_handle());
                }
            }
            let next_due = state
                .bodies
                .values()
                .filter(|b| b.renewing.is_none())
                .map(|b| b.due)
                .min();
            let next_tick = state.tick.map(|t| now + t);
            state.wakes_at = match (next_due, next_tick) {
                (Some(due), Some(tick)) => Some(due.min(tick)),
                (due, tick) => due.or(tick),
            };
            state = match state.wakes_at {
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    self.wake
                        .wait_timeout(state, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                None => self.wake.wait(state).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

/// The keeper, its thread started by the first blocking body.
fn keeper() -> &'static Keeper {
    static KEEPER: OnceLock<&'static Keeper> = OnceLock::new();
    KEEPER.get_or_init(|| {
        let keeper: &'static Keeper = Box::leak(Box::new(Keeper {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("idem-lease-keeper".into())
            .spawn(move || keeper.run())
            .expect("the lease keeper's thread starts");
        keeper
    })
}
