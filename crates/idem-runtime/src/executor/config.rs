//! The executor-wide defaults: [`ExecutorConfig`], [`InFlightPolicy`],
//! [`DEFAULT_LEASE`]. What every call reads, below every phase.

use std::time::Duration;

use crate::key::Namespace;
use crate::record::DEFAULT_TTL;
use crate::retry::RetryPolicy;
#[cfg(doc)]
use {super::CallBuilder, super::ExecutorBuilder, crate::error::IdemError};

/// The default lease: 15 s, renewed every 5 s while the owner works.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// What to do when a duplicate arrives while the first call is in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlightPolicy {
    /// Wait up to this long for the first call's result (the default, 5
    /// minutes), then fail with [`IdemError::InFlight`].
    Wait(Duration),
    /// Fail at once with [`IdemError::InFlight`].
    Reject,
}

/// Executor-wide defaults; tools override them per tool.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ExecutorConfig {
    /// How long completed records are kept (24 h).
    pub ttl: Duration,
    /// Per-attempt timeout (30 s). A timeout is an ambiguous error.
    pub timeout: Duration,
    /// Retries for retry-safe classes.
    pub retry: RetryPolicy,
    /// Duplicates of a call in flight.
    pub in_flight: InFlightPolicy,
    /// Namespace of calls that do not name one.
    pub namespace: Namespace,
    /// How long an owner that stopped renewing is presumed alive (15 s).
    /// The executor renews the lease every third of it while the owner
    /// works, so a crashed owner is found within this, whatever the tool's
    /// timeout.
    pub lease: Duration,
    /// How long a call awaiting a person's approval stays recorded
    /// unanswered (24 h); afterwards it lapses and a later call asks again.
    pub approval_ttl: Duration,
    /// How long a call that finds its approval pending waits for the
    /// decision before returning [`IdemError::ApprovalPending`] (zero: not
    /// at all, the default).
    pub approval_wait: Duration,
    /// This worker's name, recorded on the keys it claims so that an
    /// operator sees who held a call (`host:pid` unless set).
    pub worker: String,
}

/// `host:pid`, the default [`ExecutorConfig::worker`].
fn default_worker() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            ttl: DEFAULT_TTL,
            timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            in_flight: InFlightPolicy::Wait(Duration::from_secs(300)),
            namespace: Namespace::default(),
            lease: DEFAULT_LEASE,
            approval_ttl: DEFAULT_TTL,
            approval_wait: Duration::ZERO,
            worker: default_worker(),
        }
    }
}
