//! Counters readable at any time with [`Executor::metrics`](super::Executor::metrics).

use std::sync::atomic::{AtomicU64, Ordering};

/// The live counters of one executor.
#[derive(Debug, Default)]
pub(super) struct Metrics {
    pub(super) executions: AtomicU64,
    pub(super) dedup_hits: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) refusals: AtomicU64,
    pub(super) approvals_requested: AtomicU64,
    pub(super) approvals_denied: AtomicU64,
    pub(super) approvals_pending: AtomicU64,
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
    /// Calls refused without running (key reused, in flight, unknown
    /// outcome, not recorded, approval denied or missing).
    pub refusals: u64,
    /// Approvals asked of a policy or given by value.
    pub approvals_requested: u64,
    /// Approvals denied.
    pub approvals_denied: u64,
    /// Calls left awaiting a person's approval.
    pub approvals_pending: u64,
}

impl Metrics {
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
        }
    }
}
