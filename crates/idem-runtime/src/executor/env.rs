//! What one call is configured with, set when it starts and never changed:
//! [`CallEnv`], read by every phase, and what it is made from (the
//! executor's [`Core`], the call's [`CallPolicy`] and [`ApprovalSource`]).
//! [`Call`] adds the tool and the application state, which only the phases
//! that run tool code need.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::approval::{Approval, ApprovalPolicy};
use crate::class::ClassKind;
use crate::clock::Clock;
use crate::key::Namespace;
use crate::retry::RetryPolicy;
use crate::store::Store;
use crate::tool::{Tool, ToolSpec};

use super::config::{ExecutorConfig, InFlightPolicy};
use super::context::RunContext;
use super::flight::{FlightGuard, Flights};
use super::metrics::Metrics;

/// Where an irreversible call's approval comes from.
#[derive(Debug, Clone)]
pub(super) enum ApprovalSource {
    /// Given with the call ([`Executor::call_approved`](super::Executor::call_approved)).
    /// Boxed: every call's environment carries the source, and only
    /// irreversible calls carry an approval.
    Given(Box<Approval>),
    /// Asked of the executor's policy (dispatch by name).
    Policy,
}

/// Whether calls have effects, or only read what was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Live,
    Replay,
}

/// Everything an executor shares that does not depend on its state type.
pub(super) struct Core {
    pub(super) store: Arc<dyn Store>,
    pub(super) config: ExecutorConfig,
    pub(super) approvals: Option<Arc<dyn ApprovalPolicy>>,
    pub(super) clock: Arc<dyn Clock>,
    /// The approval rules in force on the store, as last read.
    pub(super) rules: super::rules_cache::RulesCache,
    pub(super) metrics: Metrics,
    /// Keys this executor is claiming now (in-process single-flight).
    pub(super) flights: Flights,
}

/// A call's retry policy: the executor's, with the tool's own limit of
/// attempts, or one given with the call. The executor's is borrowed, not
/// copied into every call's future.
pub(super) enum CallPolicy<'a> {
    /// The executor's policy, and the tool's `max_attempts` if it has one.
    Configured {
        policy: &'a RetryPolicy,
        max_attempts: Option<u32>,
    },
    /// Given with the call ([`CallBuilder::retry`](super::CallBuilder::retry)).
    Given(Box<RetryPolicy>),
}

impl CallPolicy<'_> {
    /// The policy itself.
    pub(super) fn policy(&self) -> &RetryPolicy {
        match self {
            CallPolicy::Configured { policy, .. } => policy,
            CallPolicy::Given(policy) => policy,
        }
    }

    /// Attempts in all (see [`RetryPolicy::attempts`]).
    pub(super) fn attempts(&self) -> u32 {
        match self {
            CallPolicy::Configured {
                max_attempts: Some(n),
                ..
            } => (*n).max(1),
            _ => self.policy().attempts(),
        }
    }
}

/// What one call is, set when it starts and never changed: the executor's
/// core, the tool's spec and class, where its key comes from, how it may be
/// retried, and the span it is told on. Every phase that can be written
/// without the tool's type takes this; what a call has done so far is not
/// here but in the values the phases hand on (the claim's
/// the owner, the leader's flight) and in its
/// [`Progress`].
pub(super) struct CallEnv<'a> {
    pub(super) core: &'a Core,
    pub(super) mode: Mode,
    /// By reference: a call's phases carry this environment in their
    /// future, which is smaller without a copy of the spec.
    pub(super) spec: &'static ToolSpec,
    pub(super) class: ClassKind,
    /// The provider's tool-call id.
    pub(super) call_id: Option<String>,
    /// The run and step, and the tenant.
    pub(super) run: RunContext,
    pub(super) policy: CallPolicy<'a>,
    /// How long to wait for a pending approval's decision.
    pub(super) approval_wait: Duration,
    pub(super) approval: ApprovalSource,
    /// The call's `execute_tool` span, to record what the phases learn
    /// into.
    pub(super) span: tracing::Span,
    /// When the call started, for `gen_ai.execute_tool.duration`.
    #[cfg(feature = "otel")]
    pub(super) started: std::time::Instant,
}

impl CallEnv<'_> {
    /// The tool's name.
    pub(super) fn name(&self) -> &'static str {
        self.spec.name
    }

    /// The executor's counters.
    pub(super) fn metrics(&self) -> &Metrics {
        &self.core.metrics
    }

    /// The store as a trait object (calling through the `Arc` would box
    /// each operation's future twice).
    pub(super) fn store(&self) -> &dyn Store {
        &*self.core.store
    }

    /// The clock of natural-key and repeat windows.
    pub(super) fn clock(&self) -> &dyn Clock {
        &*self.core.clock
    }

    /// One attempt's timeout: the tool's, else the executor's.
    pub(super) fn timeout(&self) -> Duration {
        self.spec.timeout.unwrap_or(self.core.config.timeout)
    }

    /// The lease an owner holds, renewed every third of it.
    pub(super) fn lease(&self) -> Duration {
        self.core.config.lease
    }

    /// How long the outcome is kept: the tool's TTL, else the executor's.
    pub(super) fn ttl(&self) -> Duration {
        self.spec.ttl.unwrap_or(self.core.config.ttl)
    }

    /// The tenant: the call's, else the executor's default.
    pub(super) fn namespace(&self) -> Namespace {
        self.run
            .namespace
            .clone()
            .unwrap_or_else(|| self.core.config.namespace.clone())
    }

    /// This worker's name, recorded on the keys it claims.
    pub(super) fn worker(&self) -> &str {
        &self.core.config.worker
    }

    /// How long a duplicate waits for a call of its key in flight (zero:
    /// it is refused at once).
    pub(super) fn in_flight_wait(&self) -> Duration {
        match self.core.config.in_flight {
            InFlightPolicy::Wait(max) => max,
            InFlightPolicy::Reject => Duration::ZERO,
        }
    }
}

/// One call of tool `T` in progress: the type-independent [`CallEnv`] plus
/// the tool and the executor's state, which only the phases that run tool
/// code need.
///
/// `R` is the tool or a reference to it: an awaited `CallBuilder` owns its
/// tool, a dispatched call borrows it from the registry.
pub(super) struct Call<'a, S, T, R> {
    pub(super) env: CallEnv<'a>,
    pub(super) tool: R,
    pub(super) state: &'a S,
    /// Set when this call leads the in-process flight of its key: the
    /// owner publishes its outcome to the calls that follow it.
    pub(super) flight: Option<FlightGuard<'a>>,
    /// What the call has done so far, told when it ends.
    pub(super) progress: Progress,
    pub(super) of: PhantomData<fn() -> T>,
}

impl<S, T: Tool<S>, R: Borrow<T>> Call<'_, S, T, R> {
    /// The tool.
    pub(super) fn tool(&self) -> &T {
        self.tool.borrow()
    }
}

/// The two facts about a call that its phases gather on the way and that
/// only its end tells: how many attempts of the tool body it made, and
/// whether it answered from another call of its key in flight. Atomics,
/// because the phases that learn them hold the call by shared reference.
#[derive(Debug, Default)]
pub(super) struct Progress {
    /// Attempts of the tool body this call made (0: it never ran).
    pub(super) attempts: AtomicU32,
    /// Set when this call waited for another call of its key in flight
    /// (in this process or another) and answers from its outcome.
    pub(super) joined: AtomicBool,
}

impl Progress {
    /// The tool body has run `attempts` times.
    pub(super) fn attempted(&self, attempts: u32) {
        self.attempts.store(attempts, Ordering::Relaxed);
    }

    /// The call answers from another call of its key.
    pub(super) fn joined(&self) {
        self.joined.store(true, Ordering::Relaxed);
    }
}
