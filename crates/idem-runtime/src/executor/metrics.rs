//! Counters readable at any time with [`Executor::metrics`](super::Executor::metrics).

use std::sync::atomic::{AtomicU64, Ordering};

/// The live counters of one executor (and, with the `otel` feature, its
/// OpenTelemetry instruments).
#[derive(Debug)]
#[cfg_attr(not(feature = "otel"), derive(Default))]
pub(super) struct Metrics {
    pub(super) takeovers: AtomicU64,
    pub(super) unknown_outcomes: AtomicU64,
    pub(super) approvals_granted: AtomicU64,
    pub(super) store_errors: AtomicU64,
    pub(super) executions: AtomicU64,
    pub(super) dedup_hits: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) refusals: AtomicU64,
    pub(super) approvals_requested: AtomicU64,
    pub(super) approvals_denied: AtomicU64,
    pub(super) approvals_pending: AtomicU64,
    #[cfg(feature = "otel")]
    pub(super) otel: super::instruments::Instruments,
}

/// A snapshot of the executor's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Tool bodies run (each attempt counts).
    pub executions: u64,
    /// Calls answered from a record.
    pub dedup_hits: u64,
    /// Attempts after the first.
    pub retries: u64,
    /// Calls refused without running (key reused, in flight, unknown
    /// outcome, not recorded, approval denied or missing).
    pub refusals: u64,
    /// Approvals asked of a policy or given by value.
    pub approvals_requested: u64,
    /// Approvals denied.
    pub approvals_denied: u64,
    /// Calls left awaiting a person's approval.
    pub approvals_pending: u64,
    /// Approvals granted (given with the call, or by the policy).
    pub approvals_granted: u64,
    /// Calls that took a key over from an owner that vanished.
    pub takeovers: u64,
    /// Calls whose outcome could not be known (recorded as unknown, or the
    /// reconcile hook of a takeover failed).
    pub unknown_outcomes: u64,
    /// Store operations that failed (the store unreachable, or a lease
    /// lost to another owner).
    pub store_errors: u64,
}

impl Metrics {
    /// Counters at zero, and the instruments that back them.
    #[cfg(feature = "otel")]
    pub(super) fn new(otel: super::instruments::Instruments) -> Self {
        let zero = || AtomicU64::new(0);
        Metrics {
            takeovers: zero(),
            unknown_outcomes: zero(),
            approvals_granted: zero(),
            store_errors: zero(),
            executions: zero(),
            dedup_hits: zero(),
            retries: zero(),
            refusals: zero(),
            approvals_requested: zero(),
            approvals_denied: zero(),
            approvals_pending: zero(),
            otel,
        }
    }

    pub(super) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> MetricsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            executions: get(&self.executions),
            dedup_hits: get(&self.dedup_hits),
            retries: get(&self.retries),
            refusals: get(&self.refusals),
            approvals_requested: get(&self.approvals_requested),
            approvals_denied: get(&self.approvals_denied),
            approvals_pending: get(&self.approvals_pending),
            approvals_granted: get(&self.approvals_granted),
            takeovers: get(&self.takeovers),
            unknown_outcomes: get(&self.unknown_outcomes),
            store_errors: get(&self.store_errors),
        }
    }
}
