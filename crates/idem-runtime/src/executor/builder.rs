//! Setting an executor up: [`ExecutorBuilder`], which collects the
//! executor-wide defaults ([`ExecutorConfig`](super::ExecutorConfig)).

use std::sync::Arc;
use std::time::Duration;

use crate::approval::ApprovalPolicy;
use crate::clock::{Clock, SystemClock};
use crate::key::Namespace;
use crate::retry::RetryPolicy;
use crate::store::Store;

use super::config::{ExecutorConfig, InFlightPolicy};
use super::env::{Core, Mode};
use super::metrics::Metrics;
use super::{flight, Executor, Inner};
#[cfg(doc)]
use {super::CallBuilder, crate::error::IdemError};

/// Builds an [`Executor`].
pub struct ExecutorBuilder<S> {
    store: Arc<dyn Store>,
    state: S,
    config: ExecutorConfig,
    approvals: Option<Arc<dyn ApprovalPolicy>>,
    clock: Arc<dyn Clock>,
    #[cfg(feature = "otel")]
    meter: Option<super::instruments::Meter>,
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
    pub fn meter(mut self, meter: super::instruments::Meter) -> Self {
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
                    rules: Default::default(),
                    #[cfg(not(feature = "otel"))]
                    metrics: Metrics::default(),
                    #[cfg(feature = "otel")]
                    metrics: Metrics::new(match &self.meter {
                        Some(meter) => super::instruments::Instruments::new(meter),
                        None => super::instruments::Instruments::default(),
                    }),
                    flights: flight::Flights::default(),
                },
                state: self.state,
            }),
            mode: Mode::Live,
        }
    }
}
