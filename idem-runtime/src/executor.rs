//! The executor: claims the key, runs the tool, records the outcome.
//!
//! ```text
//! read ─────────────────────────────► run (retries) ─► output      (no store traffic)
//! write ─► key ─► claim ─┬─ acquired ─► [approval] ─► run ─► complete / release
//!                        ├─ completed ─► recorded output (deduplicated)
//!                        ├─ in flight ─► wait for it (or reject: InProgress)
//!                        └─ key reused ─► KeyReused (nothing runs)
//! ```
//!
//! What happens to the key after a failure depends on what the failure says
//! about the effect:
//!
//! | error kind | `read` / `idempotent_write` | `non_idempotent_write` / `irreversible` |
//! |---|---|---|
//! | transient (known not applied) | retried; if attempts run out the key is **released** | not retried; key **released** (a later call may run) |
//! | ambiguous (timeouts) | retried with the same key; if attempts run out the key is **released** (re-running with the same key is safe) | not retried; the reconcile hook decides; without one the outcome is **recorded as unknown** and refused forever after |
//! | permanent | **recorded**: duplicates get the same error | **recorded** |
//!
//! A denied approval is recorded like a permanent failure. When the store
//! cannot be reached, nothing runs (fail closed); when the outcome cannot be
//! recorded, the record stays in flight and the lease decides: an
//! `idempotent_write` is taken over and re-run with the same key, the others
//! reconcile or are refused as unknown.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tracing::Instrument;

use crate::approval::{Approval, ApprovalDecision, ApprovalPolicy, ApprovalRequest};
use crate::class::{Class, ClassKind, NeedsApproval, NoApprovalNeeded, RetrySafe};
use crate::clock::{Clock, SystemClock};
use crate::ctx::{StepLog, ToolCtx};
use crate::error::{ErrorKind, IdemError, ToolError};
use crate::key::{self, CanonicalArgs, IdempotencyKey, KeyError, KeyInput, KeySource, Namespace};
use crate::record::{Fence, Outcome, OutputJson, Record, StoredFailure, DEFAULT_TTL};
use crate::retry::{may_retry, RetryPolicy};
use crate::store::{Claim, ClaimRequest, Store, StoreError, Takeover};
use crate::tool::{KeyMaterial, KeySpec, Reconciled, Tool, ToolDef};

/// The step name under which an approval decision is recorded.
pub const APPROVAL_STEP: &str = "idem:approval";
/// The step name under which the next attempt number is recorded (it also
/// extends the lease before a retry).
pub const ATTEMPT_STEP: &str = "idem:attempt";

/// What to do when a duplicate arrives while the first call is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlightPolicy {
    /// Wait up to this long for the first call's result (the default, 5
    /// minutes), then fail with [`IdemError::InProgress`].
    Wait(Duration),
    /// Fail at once with [`IdemError::InProgress`].
    Reject,
}

/// Executor-wide defaults; tools override them per tool.
#[derive(Debug, Clone)]
pub struct ExecutorConfig {
    /// How long completed records are kept (24 h).
    pub ttl: Duration,
    /// Per-attempt timeout (30 s). A timeout is an ambiguous error.
    pub timeout: Duration,
    /// Retries for retry-safe classes.
    pub retry: RetryPolicy,
    /// Duplicates of a running call.
    pub in_flight: InFlightPolicy,
    /// Namespace of calls that do not name one.
    pub namespace: Namespace,
    /// Added to the timeout to make the lease: how long past its deadline an
    /// owner is still presumed alive (10 s).
    pub lease_margin: Duration,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            ttl: DEFAULT_TTL,
            timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            in_flight: InFlightPolicy::Wait(Duration::from_secs(300)),
            namespace: Namespace::default(),
            lease_margin: Duration::from_secs(10),
        }
    }
}

/// Counters readable at any time with [`Executor::metrics`].
#[derive(Debug, Default)]
struct Metrics {
    executions: AtomicU64,
    dedup_hits: AtomicU64,
    retries: AtomicU64,
    refusals: AtomicU64,
    approvals_requested: AtomicU64,
    approvals_denied: AtomicU64,
}

/// A snapshot of the executor's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MetricsSnapshot {
    /// Tool bodies run (each attempt counts).
    pub executions: u64,
    /// Calls answered from a record.
    pub dedup_hits: u64,
    /// Attempts after the first.
    pub retries: u64,
    /// Calls refused without running (key reused, in progress, unknown
    /// outcome, not recorded, approval denied or missing).
    pub refusals: u64,
    /// Approvals asked of a policy or given by value.
    pub approvals_requested: u64,
    /// Approvals denied.
    pub approvals_denied: u64,
}

impl Metrics {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> MetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            executions: get(&self.executions),
            dedup_hits: get(&self.dedup_hits),
            retries: get(&self.retries),
            refusals: get(&self.refusals),
            approvals_requested: get(&self.approvals_requested),
            approvals_denied: get(&self.approvals_denied),
        }
    }
}

/// What a successful call returns: the output and how it was obtained.
#[derive(Debug, Clone, PartialEq)]
pub struct Called<T> {
    /// The tool's output (recorded output for a duplicate).
    pub output: T,
    /// How it was obtained.
    pub meta: CallMeta,
}

/// How a call was carried out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CallMeta {
    /// The tool.
    pub tool: &'static str,
    /// Its class.
    pub class: ClassKind,
    /// The idempotency key (`None` for reads).
    pub key: Option<IdempotencyKey>,
    /// The output is an earlier call's recorded result; the tool did not run.
    pub deduplicated: bool,
    /// Attempts made by this call (0 when deduplicated).
    pub attempts: u32,
}

/// Identity of a call: where its key comes from and whose it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallInfo {
    /// The provider's tool-call id.
    pub call_id: Option<String>,
    /// The run and step that made the call (the key source without a call
    /// id).
    pub run: Option<(String, u64)>,
    /// The tenant / principal (the executor's default when `None`).
    pub namespace: Option<Namespace>,
}

#[derive(Debug, Clone)]
enum ApprovalSource {
    Given(Approval),
    Policy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Live,
    Replay,
}

struct Inner<S> {
    store: Arc<dyn Store>,
    state: S,
    config: ExecutorConfig,
    approvals: Option<Arc<dyn ApprovalPolicy>>,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
}

/// Runs tools with the guarantees of their class. Cheap to clone.
///
/// See the [module docs](self) for what happens on each path.
pub struct Executor<S = ()> {
    inner: Arc<Inner<S>>,
    mode: Mode,
}

impl<S> Clone for Executor<S> {
    fn clone(&self) -> Self {
        Executor {
            inner: self.inner.clone(),
            mode: self.mode,
        }
    }
}

impl<S> std::fmt::Debug for Executor<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("store", &self.inner.store.describe())
            .field("mode", &self.mode)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Builds an [`Executor`].
pub struct ExecutorBuilder<S> {
    store: Arc<dyn Store>,
    state: S,
    config: ExecutorConfig,
    approvals: Option<Arc<dyn ApprovalPolicy>>,
    clock: Arc<dyn Clock>,
}

impl Executor<()> {
    /// Start building an executor on `store`.
    pub fn builder(store: impl Store) -> ExecutorBuilder<()> {
        Self::builder_shared(Arc::new(store))
    }

    /// Start building an executor on a shared store (`store::connect`
    /// returns one).
    pub fn builder_shared(store: Arc<dyn Store>) -> ExecutorBuilder<()> {
        ExecutorBuilder {
            store,
            state: (),
            config: ExecutorConfig::default(),
            approvals: None,
            clock: Arc::new(SystemClock),
        }
    }
}

impl<S> ExecutorBuilder<S> {
    /// The application state tools receive through `State<T>`.
    pub fn state<S2>(self, state: S2) -> ExecutorBuilder<S2> {
        ExecutorBuilder {
            store: self.store,
            state,
            config: self.config,
            approvals: self.approvals,
            clock: self.clock,
        }
    }

    /// Default record TTL (24 h).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.config.ttl = ttl;
        self
    }

    /// Default per-attempt timeout (30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = timeout;
        self
    }

    /// Default retry policy of retry-safe tools.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.config.retry = policy;
        self
    }

    /// What duplicates of a running call do.
    pub fn on_in_flight(mut self, policy: InFlightPolicy) -> Self {
        self.config.in_flight = policy;
        self
    }

    /// Namespace of calls that do not name one.
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.config.namespace = namespace;
        self
    }

    /// How long past its timeout an owner is presumed alive.
    pub fn lease_margin(mut self, margin: Duration) -> Self {
        self.config.lease_margin = margin;
        self
    }

    /// The approval policy for irreversible tools dispatched by name.
    pub fn approvals(mut self, policy: impl ApprovalPolicy) -> Self {
        self.approvals = Some(Arc::new(policy));
        self
    }

    /// The clock used for natural-key time windows.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Finish.
    pub fn build(self) -> Executor<S> {
        Executor {
            inner: Arc::new(Inner {
                store: self.store,
                state: self.state,
                config: self.config,
                approvals: self.approvals,
                clock: self.clock,
                metrics: Metrics::default(),
            }),
            mode: Mode::Live,
        }
    }
}

impl<S: Send + Sync + 'static> Executor<S> {
    /// Call `tool` with `args`. Await the returned builder, after naming the
    /// call's key source (`.call_id(…)` or `.run(…)`) for write tools.
    ///
    /// Irreversible tools need [`Executor::call_approved`]; asking for
    /// retries is possible only on retry-safe classes
    /// ([`CallBuilder::retry`]).
    pub fn call<T>(&self, tool: T, args: T::Args) -> CallBuilder<'_, S, T>
    where
        T: Tool<S>,
        T::Class: NoApprovalNeeded,
    {
        CallBuilder::new(self, tool, args, ApprovalSource::Policy)
    }

    /// Call an irreversible tool with an approval. The approval is recorded
    /// under the key before the tool runs.
    pub fn call_approved<T>(
        &self,
        tool: T,
        args: T::Args,
        approval: Approval,
    ) -> CallBuilder<'_, S, T>
    where
        T: Tool<S>,
        T::Class: NeedsApproval,
    {
        CallBuilder::new(self, tool, args, ApprovalSource::Given(approval))
    }

    /// An executor on the same store and state that performs no side
    /// effects: reads run, writes return their recorded results or fail with
    /// [`IdemError::NotRecorded`].
    pub fn replaying(&self) -> Executor<S> {
        Executor {
            inner: self.inner.clone(),
            mode: Mode::Replay,
        }
    }

    /// Whether this executor replays.
    pub fn is_replaying(&self) -> bool {
        self.mode == Mode::Replay
    }

    /// The counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The application state.
    pub fn state(&self) -> &S {
        &self.inner.state
    }

    /// The configuration.
    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.config
    }

    /// The entry point of the dispatcher: irreversible tools go through the
    /// approval policy.
    pub(crate) async fn execute_dispatched<T: Tool<S>>(
        &self,
        tool: &T,
        args: T::Args,
        info: CallInfo,
    ) -> Result<Called<T::Output>, IdemError> {
        self.execute(tool, args, info, None, ApprovalSource::Policy)
            .await
    }

    async fn execute<T: Tool<S>>(
        &self,
        tool: &T,
        args: T::Args,
        info: CallInfo,
        retry: Option<RetryPolicy>,
        approval: ApprovalSource,
    ) -> Result<Called<T::Output>, IdemError> {
        let class = <T::Class as Class>::KIND;
        let span = tracing::info_span!(
            "idem.call",
            tool = T::SPEC.name,
            class = class.as_str(),
            key = tracing::field::Empty,
            attempts = tracing::field::Empty,
            deduplicated = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let result = async {
            let call = Call {
                exec: self,
                tool,
                info,
                policy: self.policy_for::<T>(retry),
                approval,
                span: span.clone(),
            };
            if class.is_keyed() {
                Box::pin(call.keyed(args)).await
            } else {
                Box::pin(call.read(args)).await
            }
        }
        .instrument(span.clone())
        .await;
        match &result {
            Ok(c) => {
                span.record("attempts", c.meta.attempts);
                span.record("deduplicated", c.meta.deduplicated);
                span.record("outcome", "ok");
            }
            Err(e) => {
                span.record("deduplicated", e.is_deduplicated());
                span.record("outcome", e.code());
            }
        }
        result
    }

    fn policy_for<T: ToolDef>(&self, explicit: Option<RetryPolicy>) -> RetryPolicy {
        match (explicit, T::SPEC.max_attempts) {
            (Some(p), _) => p,
            (None, Some(n)) => self.inner.config.retry.clone().max_attempts(n),
            (None, None) => self.inner.config.retry.clone(),
        }
    }
}

/// One call in progress.
struct Call<'a, S, T> {
    exec: &'a Executor<S>,
    tool: &'a T,
    info: CallInfo,
    policy: RetryPolicy,
    approval: ApprovalSource,
    /// The call's `idem.call` span, to record the key into.
    span: tracing::Span,
}

impl<S: Send + Sync + 'static, T: Tool<S>> Call<'_, S, T> {
    fn name(&self) -> &'static str {
        T::SPEC.name
    }

    fn class(&self) -> ClassKind {
        <T::Class as Class>::KIND
    }

    fn metrics(&self) -> &Metrics {
        &self.exec.inner.metrics
    }

    /// The store as a trait object (calling through the `Arc` would box
    /// each operation's future twice).
    fn store(&self) -> &dyn Store {
        &*self.exec.inner.store
    }

    fn timeout(&self) -> Duration {
        T::SPEC.timeout.unwrap_or(self.exec.inner.config.timeout)
    }

    fn lease(&self) -> Duration {
        self.timeout()
            .saturating_add(self.exec.inner.config.lease_margin)
    }

    fn ttl(&self) -> Duration {
        T::SPEC.ttl.unwrap_or(self.exec.inner.config.ttl)
    }

    fn namespace(&self) -> Namespace {
        self.info
            .namespace
            .clone()
            .unwrap_or_else(|| self.exec.inner.config.namespace.clone())
    }

    fn store_err(&self, source: StoreError) -> IdemError {
        IdemError::Store {
            tool: self.name().to_owned(),
            source,
        }
    }

    fn refuse(&self, e: IdemError) -> IdemError {
        Metrics::bump(&self.metrics().refusals);
        tracing::warn!(error = %e, "idem refused a call");
        e
    }

    fn base_ctx(&self) -> ToolCtx {
        ToolCtx::new(self.name(), self.class())
            .with_namespace(self.namespace())
            .with_call_id(self.info.call_id.clone())
    }

    /// `read`: run with retries; no key, no store.
    async fn read(self, args: T::Args) -> Result<Called<T::Output>, IdemError> {
        let (result, attempts) = self.attempts(&args, self.base_ctx(), None).await;
        let meta = CallMeta {
            tool: self.name(),
            class: self.class(),
            key: None,
            deduplicated: false,
            attempts,
        };
        match result {
            Ok(output) => Ok(Called { output, meta }),
            Err(error) => Err(self.tool_failed(error, false)),
        }
    }

    fn tool_failed(&self, error: ToolError, deduplicated: bool) -> IdemError {
        IdemError::Tool {
            tool: self.name().to_owned(),
            error,
            deduplicated,
        }
    }

    /// Run attempts until success, a non-retryable error or the limit.
    /// With `lease` (a keyed owner), the lease is extended before a retry.
    async fn attempts(
        &self,
        args: &T::Args,
        base: ToolCtx,
        lease: Option<(&IdempotencyKey, Fence)>,
    ) -> (Result<T::Output, ToolError>, u32) {
        let timeout = self.timeout();
        let mut attempt = 1;
        loop {
            let ctx = base.clone().with_attempt(attempt);
            Metrics::bump(&self.metrics().executions);
            let run = self.tool.call(args.clone(), &ctx, &self.exec.inner.state);
            let result = match tokio::time::timeout(timeout, run).await {
                Ok(result) => result,
                Err(_) => Err(ToolError::ambiguous(format!(
                    "timed out after {timeout:?}; the effect may or may not have happened"
                ))),
            };
            let error = match result {
                Ok(output) => return (Ok(output), attempt),
                Err(error) => error,
            };
            let retryable = attempt < self.policy.attempts()
                && may_retry(self.class(), error.kind())
                && !self.policy.retry_after_too_long(error.retry_after());
            if !retryable {
                return (Err(error), attempt);
            }
            let pause = self.policy.delay(attempt, error.retry_after());
            if let Some((key, fence)) = lease {
                // Keep ownership through the pause and the next attempt.
                let extend = self
                    .store()
                    .checkpoint(
                        key,
                        fence,
                        ATTEMPT_STEP,
                        &Value::from(attempt + 1),
                        pause.saturating_add(self.lease()),
                    )
                    .await;
                if let Err(e) = extend {
                    tracing::warn!(error = %e, "could not extend the lease; not retrying");
                    return (Err(error), attempt);
                }
            }
            tracing::info!(attempt, kind = %error.kind(), pause_ms = pause.as_millis() as u64, error = %error.message(), "retrying");
            Metrics::bump(&self.metrics().retries);
            tokio::time::sleep(pause).await;
            attempt += 1;
        }
    }

    fn derive_key(
        &self,
        args: &T::Args,
        canonical: &CanonicalArgs,
        namespace: &Namespace,
    ) -> Result<(IdempotencyKey, bool), KeyError> {
        let material = T::key_material(args);
        let window;
        let (source, check_fingerprint) = match (T::SPEC.key, &material) {
            (KeySpec::Natural { window: w, .. }, Some(KeyMaterial::Natural(fields))) => {
                window = w.map(|w| key::window_bucket(self.exec.inner.clock.now().as_millis(), w));
                (KeySource::Natural { fields, window }, false)
            }
            (KeySpec::Custom, Some(KeyMaterial::Custom(text))) => (KeySource::Custom(text), true),
            (KeySpec::Natural { .. }, _) | (KeySpec::Custom, _) => {
                // Never fall back to another derivation: that would key
                // the call differently from its duplicates.
                return Err(KeyError::NoMaterial {
                    tool: self.name().to_owned(),
                    derivation: if matches!(T::SPEC.key, KeySpec::Custom) {
                        "custom"
                    } else {
                        "natural"
                    },
                });
            }
            (KeySpec::Default, _) => match (&self.info.call_id, &self.info.run) {
                (Some(id), _) => (KeySource::CallId(id), true),
                (None, Some((run_id, step))) => (
                    KeySource::Step {
                        run_id,
                        step: *step,
                        args: canonical,
                    },
                    true,
                ),
                (None, None) => {
                    return Err(KeyError::NoSource {
                        tool: self.name().to_owned(),
                    })
                }
            },
        };
        let key = key::derive_key(&KeyInput {
            version: T::SPEC.key_version,
            namespace,
            tool: self.name(),
            source,
        })?;
        Ok((key, check_fingerprint))
    }

    /// A keyed class: claim, then run, wait, or answer from the record.
    async fn keyed(self, args: T::Args) -> Result<Called<T::Output>, IdemError> {
        let canonical =
            CanonicalArgs::from_serialize(&args).map_err(|e| IdemError::InvalidArguments {
                tool: self.name().to_owned(),
                detail: e.to_string(),
            })?;
        let key_err = |source| IdemError::Key {
            tool: self.name().to_owned(),
            source,
        };
        let namespace = self.namespace();
        let (key, check_fingerprint) = self
            .derive_key(&args, &canonical, &namespace)
            .map_err(key_err)?;
        self.span.record("key", key.as_str());

        if self.exec.mode == Mode::Replay {
            return match self
                .store()
                .get(&key)
                .await
                .map_err(|e| self.store_err(e))?
            {
                Some(record) if record.outcome().is_some() => self.answer_from_record(&record),
                _ => Err(self.refuse(IdemError::NotRecorded {
                    tool: self.name().to_owned(),
                    key,
                })),
            };
        }

        let request = ClaimRequest {
            key: &key,
            tool: self.name(),
            fingerprint: &canonical.fingerprint,
            check_fingerprint,
            lease: self.lease(),
        };
        // Set when the first in-flight answer arrives.
        let mut wait_until = None;
        loop {
            match self
                .store()
                .claim(&request)
                .await
                .map_err(|e| self.store_err(e))?
            {
                Claim::Acquired {
                    fence,
                    steps,
                    takeover,
                    ..
                } => {
                    let owner = Owner {
                        key: key.clone(),
                        fence,
                        steps,
                        takeover,
                        namespace,
                    };
                    // Boxed: the owner's path is large and is not taken by
                    // duplicates, whose future stays small and cheap to move.
                    return Box::pin(self.owned(args, owner)).await;
                }
                Claim::Completed(record) => return self.answer_from_record(&record),
                Claim::KeyReused { tool, fingerprint } => {
                    return Err(self.refuse(IdemError::KeyReused {
                        key,
                        stored_tool: tool,
                        stored_fingerprint: fingerprint.to_string(),
                    }))
                }
                Claim::InFlight { .. } => {
                    let max = match self.exec.inner.config.in_flight {
                        InFlightPolicy::Wait(max) => max,
                        InFlightPolicy::Reject => Duration::ZERO,
                    };
                    let until =
                        *wait_until.get_or_insert_with(|| tokio::time::Instant::now() + max);
                    let left = until.saturating_duration_since(tokio::time::Instant::now());
                    if left.is_zero() {
                        return Err(self.refuse(IdemError::InProgress {
                            tool: self.name().to_owned(),
                            key,
                        }));
                    }
                    tracing::debug!("duplicate of a running call; waiting for its result");
                    self.store()
                        .wait(&key, left)
                        .await
                        .map_err(|e| self.store_err(e))?;
                }
            }
        }
    }

    /// Answer from a completed record.
    fn answer_from_record(&self, record: &Record) -> Result<Called<T::Output>, IdemError> {
        Metrics::bump(&self.metrics().dedup_hits);
        match record.outcome() {
            Some(Outcome::Success { output }) => {
                let output =
                    output
                        .parse::<T::Output>()
                        .map_err(|e| IdemError::RecordedOutputMismatch {
                            tool: self.name().to_owned(),
                            detail: e.to_string(),
                        })?;
                Ok(Called {
                    output,
                    meta: CallMeta {
                        tool: self.name(),
                        class: self.class(),
                        key: Some(record.key.clone()),
                        deduplicated: true,
                        attempts: 0,
                    },
                })
            }
            Some(Outcome::Failure { failure }) if failure.code == "approval_denied" => {
                Err(IdemError::ApprovalDenied {
                    tool: self.name().to_owned(),
                    reason: failure.message.clone(),
                    deduplicated: true,
                })
            }
            Some(Outcome::Failure { failure }) => {
                let mut error = ToolError::permanent(&failure.message);
                if let Some(details) = &failure.details {
                    error = error.with_details(details.clone());
                }
                Err(self.tool_failed(error, true))
            }
            Some(Outcome::Unknown { reason }) => Err(self.refuse(IdemError::OutcomeUnknown {
                tool: self.name().to_owned(),
                key: record.key.clone(),
                reason: reason.clone(),
            })),
            None => Err(IdemError::InProgress {
                tool: self.name().to_owned(),
                key: record.key.clone(),
            }),
        }
    }

    async fn complete(&self, owner: &Owner, outcome: Outcome) -> Result<(), IdemError> {
        self.store()
            .complete(&owner.key, owner.fence, &outcome, self.ttl())
            .await
            .map_err(|e| self.store_err(e))
    }

    async fn release(&self, owner: &Owner) -> Result<(), IdemError> {
        self.store()
            .release(&owner.key, owner.fence)
            .await
            .map_err(|e| self.store_err(e))
    }

    async fn succeed(
        &self,
        owner: &Owner,
        output: T::Output,
        attempts: u32,
        deduplicated: bool,
    ) -> Result<Called<T::Output>, IdemError> {
        let text = OutputJson::new(&output).map_err(|e| IdemError::OutputNotSerializable {
            tool: self.name().to_owned(),
            detail: e.to_string(),
        })?;
        self.complete(owner, Outcome::Success { output: text })
            .await?;
        Ok(Called {
            output,
            meta: CallMeta {
                tool: self.name(),
                class: self.class(),
                key: Some(owner.key.clone()),
                deduplicated,
                attempts,
            },
        })
    }

    async fn record_unknown(&self, owner: &Owner, reason: String) -> IdemError {
        if let Err(e) = self
            .complete(
                owner,
                Outcome::Unknown {
                    reason: reason.clone(),
                },
            )
            .await
        {
            return e;
        }
        self.refuse(IdemError::OutcomeUnknown {
            tool: self.name().to_owned(),
            key: owner.key.clone(),
            reason,
        })
    }

    /// We own the key: reconcile a takeover, get an approval, run, record.
    async fn owned(self, args: T::Args, owner: Owner) -> Result<Called<T::Output>, IdemError> {
        let log = StepLog::new(
            self.exec.inner.store.clone(),
            owner.key.clone(),
            owner.fence,
            self.lease(),
            owner.steps.clone(),
        );
        let ctx = self
            .base_ctx()
            .with_namespace(owner.namespace.clone())
            .with_key(owner.key.clone())
            .with_steps(log);
        let state = &self.exec.inner.state;

        if let Some(Takeover { previous }) = owner.takeover {
            if !self.class().may_rerun_unknown_outcome() {
                tracing::warn!(
                    previous = previous.0,
                    "previous owner vanished; reconciling"
                );
                match self.tool.reconcile(&args, &ctx, state).await {
                    Ok(Reconciled::Applied(output)) => {
                        return self.succeed(&owner, output, 0, true).await
                    }
                    Ok(Reconciled::NotApplied) => {}
                    Ok(Reconciled::Unknown) => {
                        let reason = format!(
                            "its owner ({previous}) vanished before recording an outcome{}",
                            if T::SPEC.has_reconcile {
                                " and the reconcile hook could not tell"
                            } else {
                                " and the tool has no reconcile hook"
                            }
                        );
                        return Err(self.record_unknown(&owner, reason).await);
                    }
                    Err(e) => {
                        // Leave the record in flight: when this lease runs
                        // out, the next caller reconciles again.
                        return Err(self.refuse(IdemError::OutcomeUnknown {
                            tool: self.name().to_owned(),
                            key: owner.key.clone(),
                            reason: format!("the reconcile hook failed ({e}); it will be tried again after the lease expires"),
                        }));
                    }
                }
            }
        }

        if self.class().needs_approval() && !owner.steps.contains_key(APPROVAL_STEP) {
            self.approve(&owner, &args).await?;
        }

        let (result, attempts) = self
            .attempts(&args, ctx.clone(), Some((&owner.key, owner.fence)))
            .await;
        let error = match result {
            Ok(output) => return self.succeed(&owner, output, attempts, false).await,
            Err(error) => error,
        };
        match error.kind() {
            ErrorKind::Permanent => {
                let failure = StoredFailure {
                    code: "permanent".into(),
                    message: error.message().to_owned(),
                    details: error.details().cloned(),
                };
                self.complete(&owner, Outcome::Failure { failure }).await?;
                Err(self.tool_failed(error, false))
            }
            ErrorKind::Transient => {
                self.release(&owner).await?;
                Err(self.tool_failed(error, false))
            }
            ErrorKind::Ambiguous if self.class().may_rerun_unknown_outcome() => {
                self.release(&owner).await?;
                Err(self.tool_failed(error, false))
            }
            ErrorKind::Ambiguous => match self.tool.reconcile(&args, &ctx, state).await {
                Ok(Reconciled::Applied(output)) => {
                    self.succeed(&owner, output, attempts, false).await
                }
                Ok(Reconciled::NotApplied) => {
                    self.release(&owner).await?;
                    Err(self.tool_failed(error, false))
                }
                Ok(Reconciled::Unknown) | Err(_) => {
                    let reason = format!("the call failed ambiguously: {}", error.message());
                    Err(self.record_unknown(&owner, reason).await)
                }
            },
        }
    }

    /// Obtain and record an approval, or record the denial.
    async fn approve(&self, owner: &Owner, args: &T::Args) -> Result<(), IdemError> {
        Metrics::bump(&self.metrics().approvals_requested);
        let decision = match &self.approval {
            ApprovalSource::Given(approval) => ApprovalDecision::Approved(approval.clone()),
            ApprovalSource::Policy => {
                let Some(policy) = &self.exec.inner.approvals else {
                    self.release(owner).await?;
                    return Err(self.refuse(IdemError::ApprovalRequired {
                        tool: self.name().to_owned(),
                    }));
                };
                let request = ApprovalRequest {
                    tool: self.name().to_owned(),
                    key: owner.key.clone(),
                    namespace: owner.namespace.clone(),
                    call_id: self.info.call_id.clone(),
                    args: serde_json::to_value(args).unwrap_or(Value::Null),
                };
                match policy.decide(&request).await {
                    Ok(decision) => decision,
                    Err(cause) => {
                        // Undecided is not a denial to remember.
                        self.release(owner).await?;
                        Metrics::bump(&self.metrics().approvals_denied);
                        return Err(self.refuse(IdemError::ApprovalDenied {
                            tool: self.name().to_owned(),
                            reason: format!("the approval policy could not decide: {cause}"),
                            deduplicated: false,
                        }));
                    }
                }
            }
        };
        match decision {
            ApprovalDecision::Approved(approval) => {
                let value = serde_json::to_value(ApprovalDecision::Approved(approval))
                    .expect("an approval serializes");
                self.store()
                    .checkpoint(&owner.key, owner.fence, APPROVAL_STEP, &value, self.lease())
                    .await
                    .map_err(|e| self.store_err(e))
            }
            ApprovalDecision::Denied { reason } => {
                Metrics::bump(&self.metrics().approvals_denied);
                let failure = StoredFailure {
                    code: "approval_denied".into(),
                    message: reason.clone(),
                    details: None,
                };
                self.complete(owner, Outcome::Failure { failure }).await?;
                Err(self.refuse(IdemError::ApprovalDenied {
                    tool: self.name().to_owned(),
                    reason,
                    deduplicated: false,
                }))
            }
        }
    }
}

/// What an owner of a key carries.
struct Owner {
    key: IdempotencyKey,
    fence: Fence,
    steps: std::collections::BTreeMap<String, Value>,
    takeover: Option<Takeover>,
    namespace: Namespace,
}

/// A typed call being set up; `.await` it.
#[must_use = "a call does nothing until awaited"]
pub struct CallBuilder<'e, S, T: ToolDef> {
    exec: &'e Executor<S>,
    tool: T,
    args: T::Args,
    info: CallInfo,
    retry: Option<RetryPolicy>,
    approval: ApprovalSource,
}

impl<'e, S: Send + Sync + 'static, T: Tool<S>> CallBuilder<'e, S, T> {
    fn new(exec: &'e Executor<S>, tool: T, args: T::Args, approval: ApprovalSource) -> Self {
        CallBuilder {
            exec,
            tool,
            args,
            info: CallInfo::default(),
            retry: None,
            approval,
        }
    }

    /// The provider's tool-call id: the key source.
    pub fn call_id(mut self, id: impl Into<String>) -> Self {
        self.info.call_id = Some(id.into());
        self
    }

    /// The run and step that make this call: the key source when there is no
    /// call id.
    pub fn run(mut self, run_id: impl Into<String>, step: u64) -> Self {
        self.info.run = Some((run_id.into(), step));
        self
    }

    /// The tenant / principal.
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.info.namespace = Some(namespace);
        self
    }

    /// Every identity field at once.
    pub fn info(mut self, info: CallInfo) -> Self {
        self.info = info;
        self
    }

    /// Retry with this policy. Only retry-safe classes (`read`,
    /// `idempotent_write`) may be retried.
    pub fn retry(mut self, policy: RetryPolicy) -> Self
    where
        T::Class: RetrySafe,
    {
        self.retry = Some(policy);
        self
    }
}

impl<'e, S: Send + Sync + 'static, T: Tool<S>> IntoFuture for CallBuilder<'e, S, T> {
    type Output = Result<Called<T::Output>, IdemError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'e>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            self.exec
                .execute(&self.tool, self.args, self.info, self.retry, self.approval)
                .await
        })
    }
}
