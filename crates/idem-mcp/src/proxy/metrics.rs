//! `/metrics` on the proxy's HTTP side (`--listen`): the executor's
//! OpenTelemetry instruments (`docs/telemetry.md`), read through
//! OpenTelemetry's Prometheus exporter and written in Prometheus's text
//! format on every scrape. Calls by tool, class and outcome are the
//! counts of `gen_ai_execute_tool_duration_seconds` by `gen_ai_tool_name`,
//! `idem_class` and `idem_outcome` (`deduplicated`: answered from a
//! record); unknown outcomes, takeovers, approvals and store errors are
//! idem's counters; `idem_store_duration_seconds` times every store
//! operation. The gauges `idem_approvals_pending`,
//! `idem_unknown_outcomes_open` and `idem_calls_in_flight` count the
//! store's open records (every instance's), read at a scrape at most
//! every [`REFRESH`]. No label holds a key, an argument or a principal.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::operator::Operator;
use idem_runtime::record::Status;
use idem_runtime::store::intercept::{Interceptor, Timed};
use idem_runtime::store::Store;
use opentelemetry::metrics::{Gauge, MeterProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder as _, TextEncoder};

use super::options::ProxyError;

/// The open records are read again by a scrape at most this often, so
/// that a flood of scrapes costs the store one read per period.
const REFRESH: Duration = Duration::from_secs(5);

/// How long a scrape waits for the store's open records before it
/// answers with the counts it had.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(2);

/// The meter the executor records with, and what a scrape reads.
pub(super) struct Metrics {
    registry: prometheus::Registry,
    provider: SdkMeterProvider,
}

/// The gauges of the store's open records, and when they were last read.
struct OpenRecords {
    operator: Operator,
    pending: Gauge<u64>,
    unknown: Gauge<u64>,
    in_flight: Gauge<u64>,
    /// When the store was last read, successfully or not.
    read_at: tokio::sync::Mutex<Option<Instant>>,
}

impl OpenRecords {
    /// Read the store's open records again if the last read is older than
    /// [`REFRESH`]; concurrent scrapes wait for one read.
    async fn refresh(&self) {
        let mut read_at = self.read_at.lock().await;
        if read_at.is_some_and(|at| at.elapsed() < REFRESH) {
            return;
        }
        *read_at = Some(Instant::now());
        match tokio::time::timeout(REFRESH_TIMEOUT, self.operator.open_counts()).await {
            Ok(Ok(counts)) => self.set(&counts),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "metrics: the store's open records could not be read");
            }
            Err(_) => tracing::warn!(
                "metrics: the store's open records were not read within {REFRESH_TIMEOUT:?}"
            ),
        }
    }

    fn set(&self, counts: &BTreeMap<Status, u64>) {
        let count = |status| counts.get(&status).copied().unwrap_or(0);
        self.pending.record(count(Status::AwaitingApproval), &[]);
        self.unknown.record(count(Status::Unknown), &[]);
        self.in_flight.record(count(Status::InFlight), &[]);
    }
}

impl Metrics {
    /// A meter provider of its own (not the global one), read by a
    /// Prometheus registry of its own.
    pub(super) fn new() -> Result<Self, ProxyError> {
        let registry = prometheus::Registry::new();
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .without_target_info()
            .scope_info_enabled(false)
            .build()
            .map_err(|e| ProxyError::Config(format!("the metrics exporter: {e}")))?;
        let provider = SdkMeterProvider::builder().with_reader(exporter).build();
        Ok(Metrics { registry, provider })
    }

    /// The meter idem's instruments are made with.
    pub(super) fn meter(&self) -> opentelemetry::metrics::Meter {
        self.provider.meter(idem_runtime::executor::OTEL_SCOPE)
    }

    /// `store`, with every operation timed in `idem.store.duration`.
    pub(super) fn timed(&self, store: Arc<dyn Store>) -> Arc<dyn Store> {
        Arc::new(Interceptor::new(store, Timed::new(&self.meter())))
    }

    /// `GET /metrics`: the instruments as they are now, and the open
    /// records of `store` (read at most every [`REFRESH`]), in
    /// Prometheus's text format.
    pub(super) fn router(&self, store: Arc<dyn Store>) -> axum::Router {
        let meter = self.meter();
        let gauge = |name: &'static str, description: &'static str| {
            meter
                .u64_gauge(name)
                .with_unit("{call}")
                .with_description(description)
                .build()
        };
        let open = Arc::new(OpenRecords {
            operator: Operator::new(store),
            pending: gauge(
                "idem.approvals.pending",
                "Calls waiting for a person's decision, on the store.",
            ),
            unknown: gauge(
                "idem.unknown_outcomes.open",
                "Calls whose outcome is unknown and not yet settled by an operator, on the store.",
            ),
            in_flight: gauge(
                "idem.calls.in_flight",
                "Calls in flight on the store, every instance's.",
            ),
            read_at: tokio::sync::Mutex::new(None),
        });
        let registry = self.registry.clone();
        axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let registry = registry.clone();
                let open = open.clone();
                async move {
                    open.refresh().await;
                    scrape(&registry)
                }
            }),
        )
    }
}

/// The text of one scrape.
fn scrape(registry: &prometheus::Registry) -> axum::response::Response {
    use axum::http::{header, StatusCode};
    use axum::response::IntoResponse as _;
    let encoder = TextEncoder::new();
    let mut text = Vec::new();
    match encoder.encode(&registry.gather(), &mut text) {
        Ok(()) => (
            [(header::CONTENT_TYPE, encoder.format_type().to_owned())],
            text,
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: a scrape could not be written");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}
