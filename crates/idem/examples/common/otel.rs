//! OTLP export for the examples (feature `otel`): spans through
//! `tracing-opentelemetry` and the executor's instruments through the
//! global meter provider, over OTLP/HTTP to `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (`http://localhost:4318` for a local collector or Jaeger). Unset, nothing
//! is installed and nothing is printed.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{MetricExporter, SpanExporter};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::layer::SubscriberExt as _;

/// The installed pipeline; dropping it flushes and shuts it down.
pub struct Telemetry {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
}

/// Export to `OTEL_EXPORTER_OTLP_ENDPOINT` when it is set, as `service`.
/// Call it before building executors (they take their meter from the
/// global provider when they are built).
pub fn init(service: &'static str) -> Result<Option<Telemetry>, Box<dyn std::error::Error>> {
    if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_none() {
        return Ok(None);
    }
    let resource = Resource::builder().with_service_name(service).build();
    let tracer = SdkTracerProvider::builder()
        .with_resource(resource.clone())
        .with_batch_exporter(SpanExporter::builder().with_http().build()?)
        .build();
    let meter = SdkMeterProvider::builder()
        .with_resource(resource)
        .with_reader(
            PeriodicReader::builder(MetricExporter::builder().with_http().build()?).build(),
        )
        .build();
    opentelemetry::global::set_meter_provider(meter.clone());
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(tracer.tracer(service)));
    tracing::subscriber::set_global_default(subscriber)?;
    Ok(Some(Telemetry { tracer, meter }))
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        // Errors here would only say the collector went away; the
        // example's own output is what matters.
        let _ = self.tracer.shutdown();
        let _ = self.meter.shutdown();
    }
}
