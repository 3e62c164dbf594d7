//! Setting an executor up: [`ExecutorBuilder`] and the executor-wide
//! defaults it collects ([`ExecutorConfig`], [`InFlightPolicy`]).

use std::sync::Arc;
use std::time::Duration;

use crate::approval::ApprovalPolicy;
use crate::clock::{Clock, SystemClock};
use crate::key::Namespace;
use crate::record::DEFAULT_TTL;
use crate::retry::RetryPolicy;
use crate::store::Store;

use super::env::{Core, Mode};
use super::metrics::Metrics;
use super::{flight, Executor, Inner};
#[cfg(doc)]
use {super::CallBuilder, crate::error::IdemError};

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

/// Builds an [`Executor`].
pub struct ExecutorBuilder<S> {
    store: Arc<dyn Store>,
    state: S,
    config: ExecutorConfig,
    approvals: Option<Arc<dyn ApprovalPolicy>>,
    clock: Arc<dyn Clock>,
    #[cfg(feature = "otel")]
    meter: Option<super::telemetry::Meter>,
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
            #[cfg(feature = "otel")]
            meter: None,
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
            #[cfg(feature = "otel")]
            meter: self.meter,
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

    /// What duplicates of a call in flight do.
    pub fn on_in_flight(mut self, policy: InFlightPolicy) -> Self {
        self.config.in_flight = policy;
        self
    }

    /// Namespace of calls that do not name one.
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.config.namespace = namespace;
        self
    }

    /// How long an owner that stopped renewing its lease is presumed alive
    /// (15 s); the lease is renewed every third of it. Shorter finds a
    /// crashed owner sooner, at the price of more renewals of slow calls.
    /// Zero is taken as one millisecond.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.config.lease = lease.max(Duration::from_millis(1));
        self
    }

    /// How long a call awaiting approval stays recorded unanswered (24 h).
    pub fn approval_ttl(mut self, ttl: Duration) -> Self {
        self.config.approval_ttl = ttl;
        self
    }

    /// How long a call whose approval is pending waits for a person's
    /// decision before returning [`IdemError::ApprovalPending`] (zero, the
    /// default: return at once; the caller calls again later with the same
    /// key). Per call: [`CallBuilder::wait_for_approval`].
    pub fn approval_wait(mut self, wait: Duration) -> Self {
        self.config.approval_wait = wait;
        self
    }

    /// This worker's name, recorded on the keys it claims (`host:pid`).
    pub fn worker(mut self, name: impl Into<String>) -> Self {
        self.config.worker = name.into();
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

    /// The OpenTelemetry meter idem's instruments are made with (feature
    /// `otel`). Without one, the executor takes a meter named `idem` from
    /// the global meter provider as it is when [`build`](Self::build) runs:
    /// install the provider first.
    #[cfg(feature = "otel")]
    pub fn meter(mut self, meter: super::telemetry::Meter) -> Self {
        self.meter = Some(meter);
        self
    }

    /// Finish.
    pub fn build(self) -> Executor<S> {
        Executor {
            inner: Arc::new(Inner {
                core: Core {
                    store: self.store,
                    config: self.config,
                    approvals: self.approvals,
                    clock: self.clock,
                    #[cfg(not(feature = "otel"))]
                    metrics: Metrics::default(),
                    #[cfg(feature = "otel")]
                    metrics: Metrics::new(match &self.meter {
                        Some(meter) => super::telemetry::Instruments::new(meter),
                        None => super::telemetry::Instruments::default(),
                    }),
                    flights: flight::Flights::default(),
                },
                state: self.state,
            }),
            mode: Mode::Live,
        }
    }
}
