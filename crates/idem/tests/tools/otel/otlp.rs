//! Telemetry over the wire: spans and metrics exported over OTLP/HTTP
//! arrive at a receiver on loopback, from a program and from the demo.

use super::*;

/// A runtime of one worker, and a receiver started on it.
fn receiving() -> (tokio::runtime::Runtime, receiver::Receiver) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let receiver = rt.block_on(receiver::Receiver::start());
    (rt, receiver)
}

/// An OTLP/HTTP receiver on loopback: what the exporters sent, by path.
mod receiver {
    use std::sync::{Arc, Mutex};

    use axum::body::Bytes;
    use axum::extract::State;
    use axum::http::Uri;
    use axum::routing::post;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::Metric;
    use opentelemetry_proto::tonic::trace::v1::Span;
    use prost::Message;

    type Received = Arc<Mutex<Vec<(String, Bytes)>>>;

    pub struct Receiver {
        pub url: String,
        received: Received,
    }

    async fn receive(State(received): State<Received>, uri: Uri, body: Bytes) -> &'static str {
        received.lock().unwrap().push((uri.path().to_owned(), body));
        // An empty Export…ServiceResponse: everything accepted.
        ""
    }

    impl Receiver {
        pub async fn start() -> Self {
            let received = Received::default();
            let app = axum::Router::new()
                .route("/v1/traces", post(receive))
                .route("/v1/metrics", post(receive))
                .with_state(received.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
            Receiver { url, received }
        }

        /// Every export request that arrived at `path`, decoded.
        fn decoded<M: Message + Default>(&self, path: &str) -> Vec<M> {
            let received = self.received.lock().unwrap();
            let bodies = received.iter().filter(|(p, _)| p == path);
            bodies
                .map(|(_, b)| M::decode(b.as_ref()).unwrap())
                .collect()
        }

        /// Every span that arrived, decoded.
        pub fn spans(&self) -> Vec<Span> {
            let requests = self.decoded::<ExportTraceServiceRequest>("/v1/traces");
            let scopes = requests.into_iter().flat_map(|r| r.resource_spans);
            let spans = scopes.flat_map(|r| r.scope_spans).flat_map(|s| s.spans);
            spans.collect()
        }

        /// Every metric that arrived, decoded (each export in turn).
        pub fn metrics(&self) -> Vec<Metric> {
            let requests = self.decoded::<ExportMetricsServiceRequest>("/v1/metrics");
            let scopes = requests.into_iter().flat_map(|r| r.resource_metrics);
            let metrics = scopes.flat_map(|r| r.scope_metrics).flat_map(|s| s.metrics);
            metrics.collect()
        }
    }

    /// The string value of attribute `key` of a decoded span.
    pub fn span_attr(span: &Span, key: &str) -> Option<String> {
        use opentelemetry_proto::tonic::common::v1::any_value::Value;
        let kv = span.attributes.iter().find(|kv| kv.key == key)?;
        Some(match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => s.clone(),
            Value::IntValue(i) => i.to_string(),
            Value::BoolValue(b) => b.to_string(),
            other => format!("{other:?}"),
        })
    }

    /// The spans as an indented tree, children under their parent, with
    /// what idem decided.
    pub fn tree(spans: &[Span]) -> String {
        fn line(span: &Span, depth: usize, out: &mut String) {
            let facts: Vec<String> = [
                "idem.outcome",
                "idem.attempts",
                "idem.takeover",
                "idem.approver",
                "idem.refusal",
                "error.type",
            ]
            .iter()
            .filter_map(|k| span_attr(span, k).map(|v| format!("{k}={v}")))
            .collect();
            out.push_str(&format!(
                "{}{} [{}]\n",
                "  ".repeat(depth),
                span.name,
                facts.join(" ")
            ));
        }
        fn children(spans: &[Span], parent: &Span, depth: usize, out: &mut String) {
            for span in spans.iter().filter(|s| s.parent_span_id == parent.span_id) {
                line(span, depth, out);
                children(spans, span, depth + 1, out);
            }
        }
        let mut out = String::new();
        let known = |id: &[u8]| spans.iter().any(|s| s.span_id == id);
        for root in spans.iter().filter(|s| !known(&s.parent_span_id)) {
            line(root, 0, &mut out);
            children(spans, root, 1, &mut out);
        }
        out
    }
}

/// Spans and metrics exported over OTLP/HTTP (protobuf) by the SDK's batch
/// span processor and periodic metric reader, as an application sets them
/// up, arrive at a receiver on loopback and decode to what idem recorded.
#[test]
fn spans_and_metrics_arrive_over_otlp() {
    use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig as _};
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;

    let (rt, receiver) = receiving();

    // The exporters' HTTP client blocks: they are built, flushed and
    // dropped outside the runtime.
    let spans = SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{}/v1/traces", receiver.url))
        .build()
        .unwrap();
    let tracer = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .build();
    let metrics = MetricExporter::builder()
        .with_http()
        .with_endpoint(format!("{}/v1/metrics", receiver.url))
        .build()
        .unwrap();
    let meter = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(metrics).build())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(tracer.tracer("otlp-test")));
    let guard = tracing::subscriber::set_default(subscriber);

    let app = App::default();
    let exec = Executor::builder(MemoryStore::new())
        .state(app)
        .meter(opentelemetry::metrics::MeterProvider::meter(&meter, "idem"))
        .build();
    rt.block_on(async {
        let _turn = tracing::info_span!("agent turn").entered();
        for _ in 0..2 {
            exec.call(send_email, email())
                .call_id("call_otlp")
                .await
                .unwrap();
        }
    });
    drop(guard);
    tracer.force_flush().unwrap();
    meter.force_flush().unwrap();
    tracer.shutdown().unwrap();
    meter.shutdown().unwrap();

    let spans = receiver.spans();
    eprintln!("{}", receiver::tree(&spans));
    let turn = spans.iter().find(|s| s.name == "agent turn").unwrap();
    let calls: Vec<_> = spans
        .iter()
        .filter(|s| s.name == "execute_tool send_email")
        .collect();
    assert_eq!(calls.len(), 2);
    for call in &calls {
        assert_eq!(call.trace_id, turn.trace_id);
        assert_eq!(call.parent_span_id, turn.span_id);
        // SPAN_KIND_INTERNAL
        assert_eq!(call.kind, 1);
        assert_eq!(
            receiver::span_attr(call, "gen_ai.tool.call.id").as_deref(),
            Some("call_otlp")
        );
    }
    let outcomes: Vec<_> = calls
        .iter()
        .map(|c| receiver::span_attr(c, "idem.outcome").unwrap())
        .collect();
    assert_eq!(outcomes, ["executed", "deduplicated"]);

    let metrics = receiver.metrics();
    let duration = metrics
        .iter()
        .rfind(|m| m.name == "gen_ai.execute_tool.duration")
        .expect("the duration histogram arrived");
    assert_eq!(duration.unit, "s");
    let Some(Data::Histogram(histogram)) = &duration.data else {
        panic!("a histogram: {duration:?}")
    };
    // One sample per call, one point per outcome.
    assert_eq!(histogram.data_points.len(), 2);
    for outcome in ["executed", "deduplicated"] {
        let point = histogram
            .data_points
            .iter()
            .find(|p| {
                p.attributes.iter().any(|kv| {
                    kv.key == "idem.outcome"
                        && matches!(
                            &kv.value.as_ref().and_then(|v| v.value.as_ref()),
                            Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s))
                                if s == outcome
                        )
                })
            })
            .unwrap_or_else(|| panic!("a point for {outcome}: {histogram:?}"));
        assert_eq!(point.count, 1, "{outcome}");
        assert_eq!(point.explicit_bounds.len(), 14);
        assert_eq!(point.explicit_bounds.last(), Some(&81.92));
    }
}

/// `examples/demo.rs`, built with the features of this test and run with
/// `OTEL_EXPORTER_OTLP_ENDPOINT` set, exports a span per call (the model's
/// repeats among them, answered from the record) and prints what it prints
/// without it.
#[test]
fn the_demo_exports_its_calls_over_otlp() {
    use std::process::Command;

    let features: Vec<&str> = [
        ("sqlite", cfg!(feature = "sqlite")),
        ("redis", cfg!(feature = "redis")),
        ("postgres", cfg!(feature = "postgres")),
        ("conformance", cfg!(feature = "conformance")),
        ("schema-validation", cfg!(feature = "schema-validation")),
        ("mcp", cfg!(feature = "mcp")),
        ("rig", cfg!(feature = "rig")),
        ("async-openai", cfg!(feature = "async-openai")),
        ("otel", true),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    // The same features as this test: the library is not built again.
    let demo = crate::mcp_example::example("demo", &features);

    let (_rt, receiver) = receiving(); // the receiver serves on `_rt`
    let dir = crate::mcp_example::TempDir::new();
    let run = |otlp: Option<&str>, db: &str| {
        let mut command = Command::new(&demo);
        command
            .current_dir(&dir.0)
            .env(
                "IDEM_STORE",
                format!("sqlite://{}", dir.0.join(db).display()),
            )
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
        if let Some(endpoint) = otlp {
            command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
        }
        let output = command.output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let stdout = String::from_utf8(output.stdout).unwrap();
        // The store's path is the only line that differs between runs.
        stdout.lines().skip(1).collect::<Vec<_>>().join("\n")
            + &String::from_utf8(output.stderr).unwrap()
    };
    let quiet = run(None, "quiet.db");
    let exported = run(Some(&receiver.url), "exported.db");
    drop(dir);
    assert_eq!(exported, quiet, "exporting prints nothing extra");

    let spans = receiver.spans();
    eprintln!("{}", receiver::tree(&spans));
    let tool_spans: Vec<_> = spans
        .iter()
        .filter(|s| {
            receiver::span_attr(s, "gen_ai.operation.name").as_deref() == Some("execute_tool")
        })
        .collect();
    assert!(tool_spans.len() >= 10, "{}", receiver::tree(&spans));
    let run = spans
        .iter()
        .find(|s| s.name == "invoke_agent idem-demo")
        .expect("the demo's run is a span");
    assert!(
        tool_spans.iter().all(|s| s.parent_span_id == run.span_id),
        "every call is a child of the run"
    );
    let outcome = |o: &str| {
        tool_spans
            .iter()
            .filter(|s| receiver::span_attr(s, "idem.outcome").as_deref() == Some(o))
            .count()
    };
    assert!(outcome("executed") > 0);
    assert!(outcome("deduplicated") > 0, "the model's repeats");
    assert!(outcome("awaiting_approval") > 0, "the deletion");
    assert!(receiver
        .metrics()
        .iter()
        .any(|m| m.name == "gen_ai.execute_tool.duration"));
}
