//! The logs of the commands that serve (`idem proxy`, `idem serve`), on
//! stderr through `tracing-subscriber`: what to show (`--log-level`, else
//! `RUST_LOG`, else `info`) and how (`--log-format text|json`, one line
//! per event). idem's own events are shown at the level asked (the
//! executor's warnings, each call's `idem::access` line, sign-ins and
//! refusals); the libraries below it (rmcp, hyper, the store drivers) only
//! from a warning (rmcp an error) up, unless `RUST_LOG` names them.
//!
//! What a line holds is what idem's events carry: names, keys, classes,
//! outcomes, durations, store URLs with their password hidden; never a
//! token, a password, or a call's arguments or result.
//!
//! With `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! set, the spans go out over OTLP/HTTP as well: each call's `execute_tool`
//! span (`docs/telemetry.md`), batched by OpenTelemetry's SDK (its
//! `OTEL_BSP_*` variables apply) and flushed when the command ends. The
//! exporter's client speaks plain HTTP, to a collector beside the service.

use clap::{Args, ValueEnum};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// The libraries whose events are shown only from a level up, whatever
/// `--log-level` says: their lines are about their own workings, and
/// rmcp's carry whole messages, arguments included (its warnings are every
/// error answer to a client, such as a protocol version it does not speak:
/// the client's business, not the operator's).
const QUIET: &[(&str, &str)] = &[
    ("rmcp", "error"),
    ("hyper", "warn"),
    ("hyper_util", "warn"),
    ("h2", "warn"),
    ("tokio_postgres", "warn"),
    ("redis", "warn"),
    ("rustls", "warn"),
];

/// `--log-level` and `--log-format`.
#[derive(Debug, Args)]
pub(crate) struct LogArgs {
    /// What to log on stderr: error, warn, info (each call's access line,
    /// the executor's warnings), debug or trace. By default `RUST_LOG`
    /// (tracing's filter syntax, such as `info,idem_runtime=debug`), else
    /// info.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<Level>,
    /// How each log line is written: text, or json (one object a line,
    /// for a log collector).
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    pub log_format: Format,
}

/// A `--log-level`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Level {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

/// A `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// `2026-12-07T13:52:01.123Z  INFO idem::access: call tool=… key=…`
    Text,
    /// `{"timestamp":…,"level":"INFO","fields":{…},"target":"idem::access"}`
    Json,
}

impl LogArgs {
    /// Log on stderr as these arguments say, from now on, and export the
    /// spans over OTLP when the environment names an endpoint: until the
    /// returned value is dropped, which flushes them.
    #[must_use = "dropping it stops the spans' export"]
    pub(crate) fn init(&self, service: &'static str) -> Traces {
        let filter = match (self.log_level, std::env::var("RUST_LOG")) {
            (Some(level), _) => quiet(level.as_str()),
            (None, Ok(given)) if !given.trim().is_empty() => EnvFilter::try_new(&given)
                .unwrap_or_else(|e| {
                    eprintln!("idem: RUST_LOG={given:?} is not a filter ({e}); logging at info");
                    quiet("info")
                }),
            (None, _) => quiet("info"),
        };
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false);
        let provider = otlp_endpoint().and_then(|endpoint| traces(&endpoint, service));
        let otlp = provider.as_ref().map(|provider| {
            use opentelemetry::trace::TracerProvider as _;
            tracing_opentelemetry::layer().with_tracer(provider.tracer("idem"))
        });
        let registry = tracing_subscriber::registry().with(filter).with(otlp);
        let _ = match self.log_format {
            Format::Text => registry.with(fmt).try_init(),
            Format::Json => registry.with(fmt.json().flatten_event(true)).try_init(),
        };
        Traces(provider)
    }
}

/// The spans' export over OTLP, if any: flushed and stopped when dropped.
#[derive(Debug)]
pub(crate) struct Traces(Option<opentelemetry_sdk::trace::SdkTracerProvider>);

impl Drop for Traces {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take() {
            if let Err(e) = provider.shutdown() {
                eprintln!("idem: OTLP: the last spans were not sent: {e}");
            }
        }
    }
}

/// The endpoint the OpenTelemetry variables name for traces, if any.
fn otlp_endpoint() -> Option<String> {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .into_iter()
    .filter_map(|name| std::env::var(name).ok())
    .find(|value| !value.trim().is_empty())
}

/// A tracer provider exporting to `endpoint` (the exporter reads it from
/// the environment itself), as `service`; `None`, said on stderr, when it
/// cannot be built.
fn traces(
    endpoint: &str,
    service: &'static str,
) -> Option<opentelemetry_sdk::trace::SdkTracerProvider> {
    if !endpoint.trim_start().starts_with("http://") {
        eprintln!(
            "idem: OTEL_EXPORTER_OTLP_ENDPOINT={endpoint:?}: spans are sent over plain HTTP only \
             (http://…, to a collector beside the service); none will be sent"
        );
        return None;
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build();
    match exporter {
        Ok(exporter) => {
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name(service)
                .build();
            Some(
                opentelemetry_sdk::trace::SdkTracerProvider::builder()
                    .with_resource(resource)
                    .with_batch_exporter(exporter)
                    .build(),
            )
        }
        Err(e) => {
            eprintln!("idem: OTLP: {e}; no spans will be sent");
            None
        }
    }
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
            Level::Trace => "trace",
        }
    }
}

/// `level` for idem, [`QUIET`]'s libraries at theirs (or at `level`, if
/// quieter).
fn quiet(level: &str) -> EnvFilter {
    let mut directives = level.to_owned();
    for (target, theirs) in QUIET {
        let library = if level == "error" { "error" } else { theirs };
        directives.push_str(&format!(",{target}={library}"));
    }
    EnvFilter::new(directives)
}
