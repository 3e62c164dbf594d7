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
//! `pipeline.rs` strings them together, top to bottom; each phase is a
//! function that takes what the one before it handed on:
//!
//! | phase | file | hands on | needs the tool's type |
//! |---|---|---|---|
//! | 1. derive the key from the call id, run and step, or the tool's natural or custom key material | `key.rs` | the key | no |
//! | 2. claim the key: own it, or wait for its owner, or answer from its record | `claim.rs` (`window.rs` for a repeat window, `flight.rs` in one process) | an owner | no (parsing a recorded output does) |
//! | 3. as the owner, settle a takeover of a vanished owner (reconcile) | `takeover.rs` | the owner, settled | the reconcile hook |
//! | 4. obtain and record an approval (`irreversible` only) | `approval.rs` | the owner, approved | no |
//! | 5. mark the attempt as started (classes never re-run) | `record.rs` | the owner, started | no |
//! | 6. run attempts, with timeouts, retries and lease extensions | `attempts.rs` | what they gave | the tool body |
//! | 7. record the outcome: complete, release, or record it as unknown | `record.rs` | the answer | serializing the output |
//!
//! What does not need the tool's type is written once, against
//! [`ToolSpec`] and [`ClassKind`], so it is compiled once rather than for
//! every tool. What every phase reads about the call — its tool, class,
//! key source, retry policy, span and the executor's settings — is one
//! value, `CallEnv` (`env.rs`); what an owner carries from phase to
//! phase, and the lease it keeps alive, is in `owner.rs`. The errors a
//! phase ends a call with are made in `errors.rs`, a duplicate's answer in
//! `answer.rs`, and what is told on the call's span in `telemetry.rs`;
//! counters live in `metrics.rs`. The typed call being set up
//! (`CallBuilder`) and its result (`CallOutput`) are in `call.rs`; the
//! executor being set up (`ExecutorBuilder`, `ExecutorConfig`) in
//! `builder.rs`.
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

mod answer;
mod approval;
mod attempts;
mod builder;
mod call;
mod claim;
mod claimed;
mod config;
mod context;
mod edited;
mod env;
mod errors;
mod flight;
#[cfg(feature = "otel")]
mod instruments;
mod key;
mod metrics;
mod output;
mod owner;
mod parked;
mod pipeline;
mod record;
mod rules;
mod rules_cache;
mod takeover;
mod telemetry;
mod timers;
mod window;

use std::borrow::Borrow;
use std::sync::Arc;

use crate::approval::Approval;
#[cfg(doc)]
use crate::class::ClassKind;
use crate::class::{NeedsApproval, NoApprovalNeeded};
use crate::error::IdemError;
use crate::key::Namespace;
use crate::store::Store;
use crate::tool::Tool;
#[cfg(doc)]
use crate::tool::ToolSpec;

pub use builder::ExecutorBuilder;
pub use call::{CallBuilder, CallFuture};
pub use claimed::ClaimedKey;
pub use config::{ExecutorConfig, InFlightPolicy, DEFAULT_LEASE};
pub use context::{RepeatWindow, RunContext};
#[cfg(feature = "otel")]
pub use instruments::{Meter, OTEL_SCOPE};
pub use metrics::MetricsSnapshot;
pub use output::{CallMeta, CallOutput, Edit};

use env::{ApprovalSource, Core, Mode};

pub use crate::record::{APPROVAL_STEP, ATTEMPT_STEP};

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
        let options = context::CallOptions::default();
        match self.start(tool, args, call_id, run, options, ApprovalSource::Policy) {
            pipeline::Begun::Done(result) => result,
            pipeline::Begun::Running(rest) => self.finish::<T, _>(tool, rest).await,
        }
    }

    /// What a call can do without awaiting ([`pipeline::start`]).
    fn start<T: Tool<S>>(
        &self,
        tool: &T,
        args: T::Args,
        call_id: Option<String>,
        run: RunContext,
        options: context::CallOptions,
        approval: ApprovalSource,
    ) -> pipeline::Begun<'_, T::Args, T::Output> {
        let core = &self.inner.core;
        pipeline::start(core, self.mode, tool, args, call_id, run, options, approval)
    }

    /// The phases that await ([`pipeline::finish`]).
    fn finish<'a, T, R>(
        &'a self,
        tool: R,
        rest: pipeline::Rest<'a, T::Args>,
    ) -> pipeline::BoxedCall<'a, T::Output>
    where
        T: Tool<S>,
        R: Borrow<T> + Send + Sync + 'a,
    {
        pipeline::finish::<S, T, R>(&self.inner.state, tool, rest)
    }
}
