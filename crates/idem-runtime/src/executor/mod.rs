//! The executor: claims the key, runs the tool, records the outcome.
//!
//! ```text
//! read ─────────────────────────────► run (retries) ─► output      (no store traffic)
//! write ─► key ─► claim ─┬─ acquired ─► [approval] ─► run ─► complete / release
//!                        ├─ completed ─► recorded output (deduplicated)
//!                        ├─ in flight ─► wait for it (or reject: InFlight)
//!                        └─ key reused ─► KeyReused (nothing runs)
//! ```
//!
//! # The phases, in order
//!
//! A keyed call goes through these phases and no other order: each one may
//! end the call, and none may run before the one above it has succeeded.
//! That order *is* the safety rule — nothing runs unless the key is owned,
//! nothing irreversible runs unless an approval is recorded under the key.
//!
//! | phase | file | needs the tool's type |
//! |---|---|---|
//! | 1. derive the key from the call id, run and step, or the tool's natural or custom key material | `key.rs` | no |
//! | 2. claim the key: own it, or wait for its owner, or answer from its record | `claim.rs` | no (parsing a recorded output does) |
//! | 3. as the owner, settle a takeover of a vanished owner (reconcile) | `owner.rs` | the reconcile hook |
//! | 4. obtain and record an approval (`irreversible` only) | `approval.rs` | no |
//! | 5. run attempts, with timeouts, retries and lease extensions | `attempts.rs` | the tool body |
//! | 6. record the outcome: complete, release, or record it as unknown | `owner.rs` | serializing the output |
//!
//! What does not need the tool's type is written once, against
//! [`ToolSpec`] and [`ClassKind`], so it is compiled once rather than for
//! every tool. Counters live in `metrics.rs`; the typed call being set up
//! (`CallBuilder`) and its result (`CallOutput`) in `call.rs`; the
//! executor being set up (`ExecutorBuilder`, `ExecutorConfig`) in
//! `builder.rs`; the phases strung together in their order (a read's
//! attempts, a keyed call's claim, ownership and wait for a pending
//! approval) in `phases.rs`.
//!
//! What happens to the key after a failure depends on what the failure says
//! about the effect:
//!
#![doc = include_str!("../doc/failures.md")]
//!
//! A denied approval is recorded like a permanent failure. When the store
//! cannot be reached, nothing runs (fail closed); when the outcome cannot be
//! recorded, the record stays in flight and the lease decides: an
//! `idempotent_write` is taken over and re-run with the same key, the others
//! reconcile or are refused as unknown.

mod approval;
mod attempts;
mod builder;
mod call;
mod claim;
mod claimed;
mod flight;
mod key;
mod metrics;
mod owner;
mod phases;
mod telemetry;
mod window;

use std::borrow::Borrow;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::approval::{Approval, ApprovalPolicy};
use crate::class::{ClassKind, NeedsApproval, NoApprovalNeeded};
use crate::clock::Clock;
use crate::error::{IdemError, ToolError};
use crate::key::Namespace;
use crate::retry::RetryPolicy;
use crate::store::{Store, StoreError};
use crate::tool::{Tool, ToolSpec};

pub use builder::{ExecutorBuilder, ExecutorConfig, InFlightPolicy, DEFAULT_LEASE};
pub use call::{CallBuilder, CallFuture, CallMeta, CallOutput, RepeatWindow, RunContext};
pub use claimed::ClaimedKey;
pub use metrics::MetricsSnapshot;
use telemetry::Progress;
#[cfg(feature = "otel")]
pub use telemetry::{Meter, OTEL_SCOPE};

use metrics::Metrics;

pub use crate::record::{APPROVAL_STEP, ATTEMPT_STEP};

/// Where an irreversible call's approval comes from.
#[derive(Debug, Clone)]
enum ApprovalSource {
    /// Given with the call ([`Executor::call_approved`]). Boxed: every
    /// call's environment carries the source, and only irreversible calls
    /// carry an approval.
    Given(Box<Approval>),
    /// Asked of the executor's policy (dispatch by name).
    Policy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Live,
    Replay,
}

/// Everything an executor shares that does not depend on its state type.
struct Core {
    store: Arc<dyn Store>,
    config: ExecutorConfig,
    approvals: Option<Arc<dyn ApprovalPolicy>>,
    clock: Arc<dyn Clock>,
    metrics: Metrics,
    /// Keys this executor is claiming now (in-process single-flight).
    flights: flight::Flights,
}

struct Inner<S> {
    core: Core,
    state: S,
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
            .field("store", &self.inner.core.store.describe())
            .field("mode", &self.mode)
            .field("config", &self.inner.core.config)
            .finish_non_exhaustive()
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
        CallBuilder::new(self, tool, args, ApprovalSource::Given(Box::new(approval)))
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

    /// The tenant a call is keyed in when it names none
    /// ([`ExecutorBuilder::namespace`], `default` unless set).
    pub fn default_namespace(&self) -> &Namespace {
        &self.inner.core.config.namespace
    }

    /// The counters.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.core.metrics.snapshot()
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.core.store
    }

    /// The application state.
    pub fn state(&self) -> &S {
        &self.inner.state
    }

    /// The configuration.
    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.core.config
    }

    /// The entry point of the dispatcher: irreversible tools go through the
    /// approval policy.
    pub(crate) async fn execute_dispatched<T: Tool<S>>(
        &self,
        tool: &T,
        args: T::Args,
        call_id: Option<String>,
        run: RunContext,
    ) -> Result<CallOutput<T::Output>, IdemError> {
        let options = call::CallOptions::default();
        self.execute(tool, args, call_id, run, options, ApprovalSource::Policy)
            .await
    }

    async fn execute<T: Tool<S>>(
        &self,
        tool: &T,
        args: T::Args,
        call_id: Option<String>,
        run: RunContext,
        options: call::CallOptions,
        approval: ApprovalSource,
    ) -> Result<CallOutput<T::Output>, IdemError> {
        match self.start(tool, args, call_id, run, options, approval) {
            Started::Done(result) => result,
            Started::Running(rest) => self.finish::<T, _>(tool, rest).await,
        }
    }

    /// What a call can do without awaiting: phase 1 (the key) and, when
    /// the store answers on this thread, phase 2 (the claim). A duplicate
    /// on the in-memory store is answered here, without a future, a task
    /// switch or an allocation beyond its key.
    fn start<T: Tool<S>>(
        &self,
        tool: &T,
        args: T::Args,
        call_id: Option<String>,
        run: RunContext,
        options: call::CallOptions,
        approval: ApprovalSource,
    ) -> Started<'_, T::Args, T::Output> {
        let class = tool.runtime_class();
        let spec = tool.runtime_spec();
        // Not entered here: entering costs a subscriber's layers on every
        // call, and what happens before the call awaits emits no event
        // but a refusal's, which enters it (`CallEnv::refuse`). The
        // phases that await run inside it (`Executor::finish`).
        let span = self.span(spec, class, call_id.as_deref(), &run);
        let env = CallEnv {
            core: &self.inner.core,
            mode: self.mode,
            spec,
            class,
            call_id,
            run,
            policy: match options.retry {
                Some(policy) => CallPolicy::Given(policy),
                None => CallPolicy::Configured {
                    policy: &self.inner.core.config.retry,
                    max_attempts: spec.max_attempts,
                },
            },
            approval_wait: options
                .approval_wait
                .unwrap_or(self.inner.core.config.approval_wait),
            approval,
            span,
            #[cfg(feature = "otel")]
            started: std::time::Instant::now(),
        };
        if !class.is_keyed() {
            return Started::Running(Rest {
                env,
                args,
                key: None,
            });
        }
        let result = env.key(&args, tool.runtime_key_material(&args)).map(|key| {
            // A store that answers on this thread (memory; SQLite for a
            // duplicate) needs no flight: its answer is as quick as the
            // flight's, and a flight would cost every call a map entry.
            // A key already in flight here is followed instead: the burst
            // of calls behind one first call waits for its outcome in
            // memory rather than each reading the store.
            // A window's key is claimed with reads of its neighbours, which
            // only the usual claim makes.
            let local = match env.mode {
                Mode::Live if key.window.is_none() && !env.core.flights.contains(&key.key) => {
                    env.claim_local(&key)
                }
                Mode::Live | Mode::Replay => None,
            };
            (key, local)
        });
        // `idem.key` is recorded with the end of a call answered here (one
        // record instead of two), at once for a call that goes on.
        let (done, key) = match result {
            Err(e) => (Err(e), None),
            Ok((key, Some(Ok(claim::Claimed::Recorded { record, .. })))) => {
                (env.answer(&key.key, &record), Some(key))
            }
            // Refused (the store could not be reached, the key is reused),
            // or an approval pending that the call may not wait for:
            // nothing ran, and nothing will.
            Ok((key, Some(Err(e)))) if !env.waits_for_a_decision(&e) => (Err(e), Some(key)),
            Ok((key, local)) => {
                // A pending approval the call waits for is claimed again
                // the usual way once decided (`claim_and_own`).
                let local = local.and_then(|claimed| match claimed {
                    Ok(claim::Claimed::Owner(owner)) => Some(owner),
                    Err(_) => None,
                    Ok(claim::Claimed::Recorded { .. }) => unreachable!("answered above"),
                });
                match &local {
                    Some(owner) => {
                        env.tell_owner(Some(&key.key), owner.fence, owner.takeover.is_some())
                    }
                    None => env.tell_key(&key.key),
                }
                return Started::Running(Rest {
                    env,
                    args,
                    key: Some((key, local)),
                });
            }
        };
        env.end_keyed(&done, &Progress::default(), key.as_ref().map(|k| &k.key));
        Started::Done(done)
    }

    /// The call's `execute_tool` span, with the fields known at its start
    /// (the OpenTelemetry GenAI names, and idem's own) and those its phases
    /// fill in as they learn them.
    fn span(
        &self,
        spec: &ToolSpec,
        class: ClassKind,
        call_id: Option<&str>,
        run: &RunContext,
    ) -> tracing::Span {
        tracing::info_span!(
            "execute_tool",
            // The span's kind is INTERNAL, the default.
            otel.name = telemetry::span_name(spec.name),
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
            gen_ai.operation.name = telemetry::OPERATION,
            gen_ai.tool.name = spec.name,
            gen_ai.tool.type = "function",
            gen_ai.tool.description = spec.description,
            gen_ai.tool.call.id = call_id,
            error.type = tracing::field::Empty,
            idem.class = class.as_str(),
            idem.namespace = run
                .namespace
                .as_ref()
                .unwrap_or(&self.inner.core.config.namespace)
                .as_str(),
            idem.key = tracing::field::Empty,
            idem.outcome = tracing::field::Empty,
            idem.refusal = tracing::field::Empty,
            idem.attempts = tracing::field::Empty,
            idem.takeover = tracing::field::Empty,
            idem.fence = tracing::field::Empty,
            idem.approver = tracing::field::Empty,
        )
    }

    /// The phases that await: the claim the usual way when the store did
    /// not answer on this thread, then, as the key's owner, the tool.
    ///
    /// One boxed future holds them all, the tool included (`tool` is the
    /// tool or a reference to it): wrapping them in another `async` block
    /// would keep the call's state twice, once captured and once moved
    /// into the awaited future. It runs in the call's span, unless no
    /// subscriber wants the span: then entering it on every poll would
    /// only cost the poll a check.
    fn finish<'a, T, R>(&'a self, tool: R, rest: Rest<'a, T::Args>) -> BoxedCall<'a, T::Output>
    where
        T: Tool<S>,
        R: Borrow<T> + Send + Sync + 'a,
    {
        let span = (!rest.env.span.is_disabled()).then(|| rest.env.span.clone());
        let call = Call {
            env: rest.env,
            tool,
            state: &self.inner.state,
            flight: None,
            progress: Progress::default(),
            of: PhantomData,
        };
        match (rest.key, span) {
            (Some((key, local)), Some(span)) => {
                Box::pin(call.keyed(rest.args, key, local).instrument(span))
            }
            (Some((key, local)), None) => Box::pin(call.keyed(rest.args, key, local)),
            (None, Some(span)) => Box::pin(call.read(rest.args).instrument(span)),
            (None, None) => Box::pin(call.read(rest.args)),
        }
    }
}

/// The remaining phases of a call, boxed.
type BoxedCall<'a, O> = Pin<Box<dyn Future<Output = Result<CallOutput<O>, IdemError>> + Send + 'a>>;

/// A call after [`Executor::start`].
// Returned once and taken apart at once, never stored: boxing the large
// variant would cost the first call an allocation for nothing.
#[allow(clippy::large_enum_variant)]
enum Started<'a, A, O> {
    /// Answered (a duplicate on a store that answers on this thread), or
    /// refused before anything ran.
    Done(Result<CallOutput<O>, IdemError>),
    /// Still to await.
    Running(Rest<'a, A>),
}

/// What [`Executor::finish`] goes on with.
struct Rest<'a, A> {
    env: CallEnv<'a>,
    args: A,
    /// For a keyed class: the key, and the claim if the store answered it
    /// on this thread.
    key: Option<(key::CallKey, Option<claim::Owner<'static>>)>,
}

/// A call's retry policy: the executor's, with the tool's own limit of
/// attempts, or one given with the call. The executor's is borrowed, not
/// copied into every call's future.
enum CallPolicy<'a> {
    /// The executor's policy, and the tool's `max_attempts` if it has one.
    Configured {
        policy: &'a RetryPolicy,
        max_attempts: Option<u32>,
    },
    /// Given with the call ([`CallBuilder::retry`]).
    Given(Box<RetryPolicy>),
}

impl CallPolicy<'_> {
    fn policy(&self) -> &RetryPolicy {
        match self {
            CallPolicy::Configured { policy, .. } => policy,
            CallPolicy::Given(policy) => policy,
        }
    }

    /// Attempts in all (see [`RetryPolicy::attempts`]).
    fn attempts(&self) -> u32 {
        match self {
            CallPolicy::Configured {
                max_attempts: Some(n),
                ..
            } => (*n).max(1),
            _ => self.policy().attempts(),
        }
    }

    /// See [`RetryPolicy::delay`].
    fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        self.policy().delay(attempt, retry_after)
    }

    /// See [`RetryPolicy::retry_after_too_long`].
    fn retry_after_too_long(&self, retry_after: Option<Duration>) -> bool {
        self.policy().retry_after_too_long(retry_after)
    }
}

/// What one call is, set when it starts and never changed: the executor's
/// core, the tool's spec and class, where its key comes from, how it may be
/// retried, and the span it is told on. Every phase that can be written
/// without the tool's type takes this; what a call has done so far is not
/// here but in the values the phases hand on (the claim's [`claim::Owner`],
/// the leader's flight) and in its [`Progress`].
struct CallEnv<'a> {
    core: &'a Core,
    mode: Mode,
    /// By reference: a call's phases carry this environment in their
    /// future, which is smaller without a copy of the spec.
    spec: &'static ToolSpec,
    class: ClassKind,
    /// The provider's tool-call id.
    call_id: Option<String>,
    /// The run and step, and the tenant.
    run: RunContext,
    policy: CallPolicy<'a>,
    /// How long to wait for a pending approval's decision.
    approval_wait: Duration,
    approval: ApprovalSource,
    /// The call's `execute_tool` span, to record what the phases learn
    /// into.
    span: tracing::Span,
    /// When the call started, for `gen_ai.execute_tool.duration`.
    #[cfg(feature = "otel")]
    started: std::time::Instant,
}

impl CallEnv<'_> {
    fn name(&self) -> &'static str {
        self.spec.name
    }

    fn metrics(&self) -> &Metrics {
        &self.core.metrics
    }

    /// The store as a trait object (calling through the `Arc` would box
    /// each operation's future twice).
    fn store(&self) -> &dyn Store {
        &*self.core.store
    }

    fn timeout(&self) -> Duration {
        self.spec.timeout.unwrap_or(self.core.config.timeout)
    }

    fn lease(&self) -> Duration {
        self.core.config.lease
    }

    fn ttl(&self) -> Duration {
        self.spec.ttl.unwrap_or(self.core.config.ttl)
    }

    fn namespace(&self) -> Namespace {
        self.run
            .namespace
            .clone()
            .unwrap_or_else(|| self.core.config.namespace.clone())
    }

    /// A store failure, as the caller sees it: a stale fence means another
    /// owner took the key over, which is not the store being unavailable.
    fn store_err(&self, source: StoreError) -> IdemError {
        self.count(telemetry::Count::StoreError);
        match source {
            StoreError::StaleFence { ref key, .. } => IdemError::Superseded {
                tool: self.name().to_owned(),
                key: key.clone(),
                source: Some(source),
            },
            source => IdemError::Store {
                tool: self.name().to_owned(),
                source,
            },
        }
    }

    /// Whether `e` says the call's approval is pending and the call may
    /// wait for a person's decision ([`CallBuilder::wait_for_approval`]).
    fn waits_for_a_decision(&self, e: &IdemError) -> bool {
        matches!(e, IdemError::ApprovalPending { .. }) && !self.approval_wait.is_zero()
    }

    fn refuse(&self, e: IdemError) -> IdemError {
        Metrics::bump(&self.metrics().refusals);
        // In the call's span, which a refusal before the call awaits is
        // not yet in.
        let _in = self.span.enter();
        tracing::warn!(error = %e, "idem refused a call");
        e
    }

    fn tool_failed(&self, error: ToolError, deduplicated: bool) -> IdemError {
        IdemError::Tool {
            tool: self.name().to_owned(),
            error,
            deduplicated,
        }
    }

    fn meta(
        &self,
        key: Option<crate::key::IdempotencyKey>,
        deduplicated: bool,
        attempts: u32,
    ) -> CallMeta {
        CallMeta {
            tool: self.name(),
            class: self.class,
            key,
            deduplicated,
            attempts,
        }
    }
}

/// One call of tool `T` in progress: the type-independent [`CallEnv`] plus
/// the tool and the executor's state, which only the phases that run tool
/// code need.
///
/// `R` is the tool or a reference to it: an awaited `CallBuilder` owns its
/// tool, a dispatched call borrows it from the registry.
struct Call<'a, S, T, R> {
    env: CallEnv<'a>,
    tool: R,
    state: &'a S,
    /// Set when this call leads the in-process flight of its key: the
    /// owner publishes its outcome to the calls that follow it.
    flight: Option<flight::FlightGuard<'a>>,
    /// What the call has done so far, told when it ends.
    progress: Progress,
    of: PhantomData<fn() -> T>,
}

impl<S, T: Tool<S>, R: Borrow<T>> Call<'_, S, T, R> {
    fn tool(&self) -> &T {
        self.tool.borrow()
    }
}
