//! `/metrics` on the proxy's HTTP side (`--listen`): the executor's
//! OpenTelemetry instruments (`docs/telemetry.md`), read through
//! OpenTelemetry's Prometheus exporter and written in Prometheus's text
//! format on every scrape. Calls by tool, class and outcome are the
//! counts of `gen_ai_execute_tool_duration_seconds` by `gen_ai_tool_name`,
//! `idem_class` and `idem_outcome` (`deduplicated`: answered from a
//! record); unknown outcomes, takeovers, approvals and store errors are
//! idem's counters. No label holds a key, an argument or a principal.

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder as _, TextEncoder};

use super::options::ProxyError;

/// The meter the executor records with, and what a scrape reads.
pub(super) struct Metrics {
    registry: prometheus::Registry,
    provider: SdkMeterProvider,
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

    /// `GET /metrics`: the instruments as they are now, in Prometheus's
    /// text format.
    pub(super) fn router(&self) -> axum::Router {
        let registry = self.registry.clone();
        axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let registry = registry.clone();
                async move { scrape(&registry) }
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
