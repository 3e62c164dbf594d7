//! What a running tool knows about its call.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::class::ClassKind;
use crate::error::ToolError;
use crate::key::{IdempotencyKey, Namespace};
use crate::record::{Fence, RESERVED_STEP_PREFIX};
use crate::store::Store;
use crate::store::StoreExt;

mod lease;

/// The context handed to every tool call: its key (to pass downstream),
/// attempt number, identity, and durable step checkpoints.
///
/// Cloning is cheap: everything but the attempt number is shared. A clone
/// changed with the `with_…` builders (a context handed to a sub-task)
/// is a context of its own that still follows the call's lease:
/// [`ToolCtx::is_superseded`] answers for it as for the original.
#[derive(Debug, Clone)]
pub struct ToolCtx {
    call: Arc<Shared>,
    attempt: u32,
}

/// What every attempt of one call shares: for a keyed call's owner, one
/// allocation holds the context, the step log and the lease's state.
#[derive(Debug)]
struct Shared {
    tool: &'static str,
    class: ClassKind,
    namespace: Namespace,
    key: Option<IdempotencyKey>,
    call_id: Option<String>,
    steps: Option<StepLog>,
    /// Whether this call still owns its key (keyed owners only).
    lease: Lease,
    /// Whether the arguments are an approver's edit
    /// ([`ToolCtx::arguments_edited`]).
    edited: std::sync::atomic::AtomicBool,
}

/// The lease a context watches.
#[derive(Debug)]
enum Lease {
    /// None: not a keyed owner's context.
    None,
    /// The owner's, renewed by the executor.
    Own(LeaseWatch),
    /// The one `Shared` it was copied from watches: a context changed
    /// after it was cloned (the public `with_…` builders) still follows
    /// its call's lease, renewals and loss alike.
    Of(Arc<Shared>),
}

impl Shared {
    /// [`ToolCtx::arguments_edited`].
    fn arguments_edited_flag(&self) -> bool {
        self.edited.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The lease this context follows, if any.
    fn lease(&self) -> Option<&LeaseWatch> {
        match &self.lease {
            Lease::None => None,
            Lease::Own(watch) => Some(watch),
            Lease::Of(from) => from.lease(),
        }
    }
}

pub use crate::record::INTENT_STEP;

/// Tells a running tool that its call no longer owns its key: a renewal
/// found a newer owner or could not reach the store, or the lease's
/// deadline passed without a renewal (the process was paused, starved of
/// CPU, or a renewal hung) — the deadline is read by the tool itself, so it
/// holds even when the renewal loop could not run. It lives in the owner's
/// context ([`ToolCtx::owner`]), which the owner and its tool share.
#[derive(Debug)]
pub(crate) struct LeaseWatch {
    lost: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
    /// The deadline is `base` plus this many nanoseconds.
    held_until: std::sync::atomic::AtomicU64,
    base: tokio::time::Instant,
}

impl LeaseWatch {
    /// A lease held until `until` unless extended, measured from `now`.
    fn new(until: tokio::time::Instant, now: tokio::time::Instant) -> Self {
        let watch = LeaseWatch {
            lost: std::sync::atomic::AtomicBool::new(false),
            notify: tokio::sync::Notify::new(),
            held_until: std::sync::atomic::AtomicU64::new(0),
            base: now,
        };
        watch.extend(until);
        watch
    }

    /// Until when the store is known to keep the lease.
    pub(crate) fn held_until(&self) -> tokio::time::Instant {
        let nanos = self.held_until.load(std::sync::atomic::Ordering::Acquire);
        self.base + std::time::Duration::from_nanos(nanos)
    }

    /// A renewal moved the deadline to `until`.
    pub(crate) fn extend(&self, until: tokio::time::Instant) {
        let nanos = until.saturating_duration_since(self.base).as_nanos();
        self.held_until.store(
            u64::try_from(nanos).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Release,
        );
    }

    /// Mark the lease lost and wake everyone awaiting it.
    pub(crate) fn lose(&self) {
        self.lost.store(true, std::sync::atomic::Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Whether the lease was lost, or its deadline passed.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::Acquire)
            || tokio::time::Instant::now() >= self.held_until()
    }

    /// Resolves once the lease is lost or its deadline passes.
    async fn lost(&self) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before the flag is read, so a `lose` between the
            // read and the await still wakes this waiter.
            notified.as_mut().enable();
            if self.is_lost() {
                return;
            }
            // Woken by a loss, or at the deadline (re-read: a renewal may
            // have moved it meanwhile).
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(self.held_until()) => {}
            }
        }
    }
}

/// Where a keyed call's step results are checkpointed.
#[derive(Debug)]
pub(crate) struct StepLog {
    store: Arc<dyn Store>,
    key: IdempotencyKey,
    fence: Fence,
    lease: Duration,
    done: Mutex<BTreeMap<String, Value>>,
}

impl Clone for StepLog {
    fn clone(&self) -> Self {
        StepLog {
            store: self.store.clone(),
            key: self.key.clone(),
            fence: self.fence,
            lease: self.lease,
            done: Mutex::new(self.done.lock().unwrap_or_else(|p| p.into_inner()).clone()),
        }
    }
}

impl StepLog {
    /// A log for the owner `fence` of `key`, starting from the steps a
    /// previous owner completed.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        key: IdempotencyKey,
        fence: Fence,
        lease: Duration,
        done: BTreeMap<String, Value>,
    ) -> Self {
        StepLog {
            store,
            key,
            fence,
            lease,
            done: Mutex::new(done),
        }
    }

    /// The stored value of step `name`, if it completed.
    fn get(&self, name: &str) -> Option<Value> {
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Checkpoint step `name` with `value` (fenced), then remember it.
    async fn record(&self, name: &str, value: Value) -> Result<(), crate::store::StoreError> {
        self.store
            .checkpoint(&self.key, self.fence, name, &value, self.lease)
            .await?;
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), value);
        Ok(())
    }
}

impl ToolCtx {
    /// A context for one attempt of a call. The executor builds these; tests
    /// of a tool function can too.
    pub fn new(tool: &'static str, class: ClassKind) -> Self {
        ToolCtx {
            call: Arc::new(Shared {
                tool,
                class,
                namespace: Namespace::default(),
                key: None,
                call_id: None,
                steps: None,
                lease: Lease::None,
                edited: Default::default(),
            }),
            attempt: 1,
        }
    }

    /// Set the key.
    pub fn with_key(mut self, key: IdempotencyKey) -> Self {
        self.call_mut().key = Some(key);
        self
    }

    /// Set the namespace.
    pub fn with_namespace(mut self, namespace: Namespace) -> Self {
        self.call_mut().namespace = namespace;
        self
    }

    /// Set the provider's call id.
    pub fn with_call_id(mut self, call_id: Option<String>) -> Self {
        self.call_mut().call_id = call_id;
        self
    }

    /// What this context shares, to change: its own if nothing else
    /// holds it, else a copy of it (as clone-on-write would make), which
    /// keeps the steps it had and follows the same lease.
    fn call_mut(&mut self) -> &mut Shared {
        if Arc::get_mut(&mut self.call).is_none() {
            let from = &self.call;
            let copy = Shared {
                tool: from.tool,
                class: from.class,
                namespace: from.namespace.clone(),
                key: from.key.clone(),
                call_id: from.call_id.clone(),
                steps: from.steps.clone(),
                lease: match from.lease() {
                    Some(_) => Lease::Of(from.clone()),
                    None => Lease::None,
                },
                edited: from.arguments_edited_flag().into(),
            };
            self.call = Arc::new(copy);
        }
        Arc::get_mut(&mut self.call).expect("a context no other clone holds")
    }

    /// Set the attempt number (1 for the first).
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// The context of the owner of a keyed call, made once its claim is
    /// won: its key, namespace and call id, the steps `log` checkpoints
    /// into, and its lease, held until `until` (by the clock at `now`)
    /// unless extended — in one allocation.
    pub(crate) fn owner(
        tool: &'static str,
        class: ClassKind,
        namespace: Namespace,
        call_id: Option<String>,
        log: StepLog,
        until: tokio::time::Instant,
        now: tokio::time::Instant,
    ) -> Self {
        ToolCtx {
            call: Arc::new(Shared {
                tool,
                class,
                namespace,
                key: Some(log.key.clone()),
                call_id,
                steps: Some(log),
                lease: Lease::Own(LeaseWatch::new(until, now)),
                edited: Default::default(),
            }),
            attempt: 1,
        }
    }

    /// Mark the call's arguments as an approver's edit (the executor, for
    /// the edited call a call as made goes on as).
    pub(crate) fn mark_edited(&self) {
        self.call
            .edited
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the arguments this call runs with are an approver's edit
    /// of those it was made with (edit, then approve:
    /// [`Operator::edit_record`](crate::operator::Operator::edit_record)).
    /// The `args` a tool is handed are then the edited ones, read back
    /// from the edited call's record: a tool that keeps its arguments
    /// anywhere else than `args` (a binding that holds the caller's own
    /// objects) must take them from `args` instead.
    pub fn arguments_edited(&self) -> bool {
        self.call.arguments_edited_flag()
    }

    /// The owner's lease, as the executor renews it (keyed owners only).
    pub(crate) fn lease(&self) -> Option<&LeaseWatch> {
        self.call.lease()
    }

    /// Whether this call has lost its key: its lease ran out (renewals
    /// failed, or the process was paused past it) and another caller may
    /// have taken the key over. Whatever the tool does from here on is not
    /// recorded; it should stop before its next side effect.
    ///
    /// Always `false` for `read` tools, which hold no key.
    pub fn is_superseded(&self) -> bool {
        self.call.lease().is_some_and(LeaseWatch::is_lost)
    }

    /// Resolves when this call loses its key (see
    /// [`ToolCtx::is_superseded`]); never, for a call that keeps it. A tool
    /// doing slow work races it to stop early:
    ///
    /// ```
    /// # use idem_runtime::{ToolCtx, ToolError};
    /// # async fn send_slowly(ctx: &ToolCtx) -> Result<&'static str, ToolError> {
    /// // Stands for a slow provider call.
    /// let sending = async {
    ///     tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    ///     Ok("sent")
    /// };
    /// tokio::select! {
    ///     sent = sending => sent,
    ///     () = ctx.superseded() => Err(ToolError::transient("superseded before sending")),
    /// }
    /// # }
    /// ```
    pub async fn superseded(&self) {
        match self.call.lease() {
            Some(lease) => lease.lost().await,
            None => std::future::pending().await,
        }
    }

    /// Record what this call is about to do, before it does it: a generated
    /// Message-ID, an order reference, the request sent to a provider. It is
    /// stored under the key (one round trip) before this returns, so that if
    /// the call's owner vanishes, the next owner's reconcile hook reads it
    /// back with [`ToolCtx::recorded_intent`] and can look the effect up.
    ///
    /// A later `intent` replaces an earlier one. For `read` tools (no key)
    /// this does nothing.
    pub async fn intent<T: Serialize>(&self, intent: &T) -> Result<(), ToolError> {
        let Some(log) = &self.call.steps else {
            return Ok(());
        };
        let value = serde_json::to_value(intent).map_err(|e| {
            ToolError::permanent(format!("the intent could not be serialized: {e}"))
        })?;
        log.record(INTENT_STEP, value).await.map_err(|e| {
            // Nothing was done yet: the provider was not called.
            ToolError::transient(format!("the intent could not be recorded: {e}"))
        })
    }

    /// The intent recorded with [`ToolCtx::intent`] by this call or by a
    /// previous owner of its key, if any. Reconcile hooks read it to find
    /// out whether the effect happened.
    pub fn recorded_intent<T: DeserializeOwned>(&self) -> Option<Result<T, ToolError>> {
        let log = self.call.steps.as_ref()?;
        let value = log.get(INTENT_STEP)?;
        Some(serde_json::from_value(value).map_err(|e| {
            ToolError::permanent(format!(
                "the recorded intent does not match the type asked for: {e}"
            ))
        }))
    }

    /// The tool's name.
    pub fn tool(&self) -> &'static str {
        self.call.tool
    }

    /// The tool's class.
    pub fn class(&self) -> ClassKind {
        self.call.class
    }

    /// The tenant / principal namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.call.namespace
    }

    /// The idempotency key: pass it downstream (`Idempotency-Key` header,
    /// Message-ID) so the provider deduplicates too. `None` for `read` tools.
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.call.key.as_ref()
    }

    /// A stable sub-key for one of several downstream requests.
    pub fn sub_key(&self, label: &str) -> Option<IdempotencyKey> {
        self.call.key.as_ref().map(|k| k.sub(label))
    }

    /// The provider's tool-call id, when the call came with one.
    pub fn call_id(&self) -> Option<&str> {
        self.call.call_id.as_deref()
    }

    /// Which attempt this is, from 1. Always 1 for classes that are never
    /// retried.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Run a step of a multi-step tool at most once per key.
    ///
    /// If a previous attempt (or a previous owner, before a crash) completed
    /// step `name`, its stored result is returned and `f` does not run;
    /// otherwise `f` runs and its result is checkpointed in the store before
    /// this returns. A replay thus resumes after the last completed step.
    ///
    /// For `read` tools (no key, no store) `f` simply runs. Names starting
    /// with `idem:` are reserved for idem's own records (the approval, the
    /// attempt number) and are refused.
    pub async fn step<T, F, Fut>(&self, name: &str, f: F) -> Result<T, ToolError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, ToolError>>,
    {
        if name.starts_with(RESERVED_STEP_PREFIX) {
            return Err(ToolError::permanent(format!(
                "step name `{name}` is reserved: names starting with \
                 `{RESERVED_STEP_PREFIX}` belong to idem"
            )));
        }
        let Some(log) = &self.call.steps else {
            return f().await;
        };
        if let Some(value) = log.get(name) {
            return serde_json::from_value(value).map_err(|e| {
                ToolError::permanent(format!(
                    "stored result of step `{name}` does not match its type: {e}"
                ))
            });
        }
        let out = f().await?;
        let value = serde_json::to_value(&out).map_err(|e| {
            ToolError::ambiguous(format!(
                "step `{name}` ran but its result could not be serialized for the checkpoint: {e}"
            ))
        })?;
        log.record(name, value).await.map_err(|e| {
            ToolError::ambiguous(format!(
                "step `{name}` ran but its checkpoint could not be stored: {e}"
            ))
        })?;
        Ok(out)
    }
}
