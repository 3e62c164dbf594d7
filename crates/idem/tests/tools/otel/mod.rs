//! OpenTelemetry: each call is an `execute_tool {tool}` span with the GenAI
//! conventions' attributes and what idem decided about it, read back from
//! the SDK's in-memory exporters through `tracing-opentelemetry`; the
//! executor's instruments record `gen_ai.execute_tool.duration` once per
//! call whose tool ran, and idem's counters.

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use idem::approval::DenyAll;
use idem::clock::ManualClock;
use idem::dispatch::{Arguments, ToolCall};
use idem::executor::ExecutorBuilder;
use idem::prelude::*;
use idem::{ErrorCode, RetryPolicy};
use opentelemetry::trace::{SpanKind, Status, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tracing_subscriber::layer::SubscriberExt as _;

/// Spans and metrics of one test, kept in memory.
struct Telemetry {
    spans: InMemorySpanExporter,
    tracer: SdkTracerProvider,
    metrics: InMemoryMetricExporter,
    meter: SdkMeterProvider,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Telemetry {
    /// Spans exported as they end; the `tracing` layer on this thread.
    fn new() -> Self {
        let spans = InMemorySpanExporter::default();
        let tracer = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build();
        let metrics = InMemoryMetricExporter::default();
        let meter = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(metrics.clone()).build())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(tracer.tracer("otel-test")));
        let guard = tracing::subscriber::set_default(subscriber);
        Telemetry {
            spans,
            tracer,
            metrics,
            meter,
            _guard: guard,
        }
    }

    /// An executor whose instruments report to this test's meter.
    fn executor(&self, store: Arc<dyn Store>, app: &App) -> ExecutorBuilder<App> {
        Executor::builder_shared(store).state(app.clone()).meter(
            opentelemetry::metrics::MeterProvider::meter(&self.meter, "idem"),
        )
    }

    /// The `execute_tool` spans that ended, in the order they ended.
    fn tool_spans(&self) -> Vec<SpanData> {
        self.spans
            .get_finished_spans()
            .unwrap()
            .into_iter()
            .filter(|s| attr(s, "gen_ai.operation.name").as_deref() == Some("execute_tool"))
            .collect()
    }

    /// The span of the call with provider call id `id` (the last one).
    fn span_of(&self, id: &str) -> SpanData {
        self.tool_spans()
            .into_iter()
            .rfind(|s| attr(s, "gen_ai.tool.call.id").as_deref() == Some(id))
            .unwrap_or_else(|| panic!("no span for call {id}"))
    }

    /// Every data point of the metric `name`: its attributes and value
    /// (a counter's sum, a histogram's count).
    fn points(&self, name: &str) -> Vec<(BTreeMap<String, String>, u64)> {
        self.meter.force_flush().unwrap();
        let mut points = Vec::new();
        let exported = self.metrics.get_finished_metrics().unwrap();
        let Some(last) = exported.last() else {
            return points;
        };
        for scope in last.scope_metrics() {
            for metric in scope.metrics().filter(|m| m.name() == name) {
                let attrs = |kvs: &mut dyn Iterator<Item = &opentelemetry::KeyValue>| {
                    kvs.map(|kv| (kv.key.to_string(), kv.value.to_string()))
                        .collect::<BTreeMap<_, _>>()
                };
                match metric.data() {
                    AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                        for p in sum.data_points() {
                            points.push((attrs(&mut p.attributes()), p.value()));
                        }
                    }
                    AggregatedMetrics::F64(MetricData::Histogram(h)) => {
                        for p in h.data_points() {
                            let bounds: Vec<f64> = p.bounds().collect();
                            assert_eq!(
                                bounds,
                                [
                                    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12,
                                    10.24, 20.48, 40.96, 81.92
                                ],
                                "the conventions' buckets"
                            );
                            points.push((attrs(&mut p.attributes()), p.count()));
                        }
                    }
                    other => panic!("{name}: unexpected data {other:?}"),
                }
            }
        }
        points
    }

    /// The sum of the points of counter `name` (the counts of histogram
    /// `name`) whose attributes include `with`.
    fn count(&self, name: &str, with: &[(&str, &str)]) -> u64 {
        self.points(name)
            .into_iter()
            .filter(|(attrs, _)| {
                with.iter()
                    .all(|(k, v)| attrs.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, n)| n)
            .sum()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.tracer.shutdown();
        let _ = self.meter.shutdown();
    }
}

/// The attribute `key` of `span`, as a string.
fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| match &kv.value {
            Value::String(s) => s.to_string(),
            other => other.to_string(),
        })
}

/// Assert the attributes `expected` of `span` (`None`: absent).
fn assert_attrs(span: &SpanData, expected: &[(&str, Option<&str>)]) {
    for (key, value) in expected {
        assert_eq!(
            attr(span, key).as_deref(),
            *value,
            "{key} of span {:?}",
            span.name
        );
    }
}

fn email() -> SendEmail {
    SendEmail {
        to: "ada@example.com".into(),
        subject: "Your invoice".into(),
        body: "Hello Ada".into(),
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Charge {
    card: String,
    cents: u64,
}

/// Charge a card; the gateway never answers (an ambiguous error).
#[tool(class = "non_idempotent_write")]
async fn charge_card(_args: Charge) -> Result<String, ToolError> {
    Err(ToolError::ambiguous("the payment gateway timed out"))
}

static FLAKY_CALLS: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Tag {
    customer: String,
    tag: String,
}

/// Tag a customer; the first attempt meets a transient failure.
#[tool(class = "idempotent_write")]
async fn tag_customer(args: Tag) -> Result<String, ToolError> {
    if FLAKY_CALLS.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(ToolError::transient("503 from the CRM"));
    }
    Ok(format!("{} tagged {}", args.customer, args.tag))
}

/// A first call, its duplicate, a retried idempotent write, an unknown
/// outcome, an approval given with the call, a denial by the policy (a
/// dispatched call), and a read.
#[tokio::test(start_paused = true)]
async fn each_decision_is_an_execute_tool_span_with_its_attributes() {
    let t = Telemetry::new();
    let app = App::default();
    let exec = t
        .executor(Arc::new(MemoryStore::new()), &app)
        .retry(RetryPolicy::default())
        .build();

    // First call, then the model's repeat.
    let first = send_twice(&exec, "call_first", email).await;
    let key = first.meta.key.unwrap();

    // A retried idempotent write.
    let tagged = exec
        .call(
            tag_customer,
            Tag {
                customer: "ada".into(),
                tag: "vip".into(),
            },
        )
        .call_id("call_tag")
        .await
        .unwrap();
    assert_eq!(tagged.meta.attempts, 2);

    // An unknown outcome: run once, not retried, recorded as unknown.
    let charge = Charge {
        card: "tok_visa".into(),
        cents: 4200,
    };
    let unknown = exec
        .call(charge_card, charge.clone())
        .call_id("call_charge")
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::OutcomeUnknown);

    // An approval given with the call.
    delete_approved_by(&exec, "ops@example.com", "call_delete").await;

    // A denial, through the dispatcher and its executor's policy.
    let denying = t
        .executor(Arc::new(MemoryStore::new()), &app)
        .approvals(DenyAll)
        .build();
    let results = Dispatcher::new(denying, registry())
        .dispatch(
            vec![ToolCall {
                id: Some("call_denied".into()),
                name: "delete_account".into(),
                arguments: Arguments::Json(serde_json::json!({ "account": "acct_2" })),
            }],
            &RunContext::new("run-1", 1),
        )
        .await;
    assert!(results[0].is_error());

    // A read: no key.
    look_up_ada(&exec).await;

    let spans = t.tool_spans();
    assert_eq!(spans.len(), 7, "one span per call: {spans:#?}");
    for span in &spans {
        let tool = attr(span, "gen_ai.tool.name").unwrap();
        assert_eq!(span.name, format!("execute_tool {tool}"));
        assert_eq!(span.span_kind, SpanKind::Internal);
        assert_attrs(span, &[("gen_ai.tool.type", Some("function"))]);
    }

    let first_span = &spans[0];
    assert_attrs(
        first_span,
        &[
            ("gen_ai.tool.name", Some("send_email")),
            ("gen_ai.tool.call.id", Some("call_first")),
            (
                "gen_ai.tool.description",
                Some("Send an email to a customer."),
            ),
            ("idem.class", Some("idempotent_write")),
            ("idem.namespace", Some("default")),
            ("idem.key", Some(key.as_str())),
            ("idem.outcome", Some("executed")),
            ("idem.attempts", Some("1")),
            ("idem.fence", Some("1")),
            ("idem.takeover", None),
            ("error.type", None),
        ],
    );
    assert_eq!(first_span.status, Status::Unset);

    let duplicate = &spans[1];
    assert_attrs(
        duplicate,
        &[
            ("gen_ai.tool.call.id", Some("call_first")),
            ("idem.key", Some(key.as_str())),
            ("idem.outcome", Some("deduplicated")),
            ("idem.attempts", Some("0")),
            ("idem.fence", None),
            ("error.type", None),
        ],
    );

    assert_attrs(
        &t.span_of("call_tag"),
        &[
            ("gen_ai.tool.name", Some("tag_customer")),
            ("idem.outcome", Some("executed")),
            ("idem.attempts", Some("2")),
        ],
    );

    let unknown = t.span_of("call_charge");
    assert_attrs(
        &unknown,
        &[
            ("idem.class", Some("non_idempotent_write")),
            ("idem.outcome", Some("unknown")),
            ("idem.attempts", Some("1")),
            ("error.type", Some("outcome_unknown")),
        ],
    );
    assert!(matches!(unknown.status, Status::Error { .. }));

    assert_attrs(
        &t.span_of("call_delete"),
        &[
            ("idem.class", Some("irreversible")),
            ("idem.outcome", Some("executed")),
            ("idem.approver", Some("ops@example.com")),
        ],
    );

    let denied = t.span_of("call_denied");
    assert_attrs(
        &denied,
        &[
            ("gen_ai.tool.name", Some("delete_account")),
            ("idem.outcome", Some("denied")),
            ("idem.attempts", Some("0")),
            ("idem.approver", None),
            ("error.type", Some("approval_denied")),
        ],
    );
    assert!(matches!(denied.status, Status::Error { .. }));

    let read = spans.last().unwrap();
    assert_attrs(
        read,
        &[
            ("gen_ai.tool.name", Some("lookup_customer")),
            ("gen_ai.tool.call.id", None),
            ("idem.class", Some("read")),
            ("idem.key", None),
            ("idem.outcome", Some("executed")),
        ],
    );

    // One duration sample per call, by what idem decided: the
    // histogram's count is the calls' count.
    let durations = t.points("gen_ai.execute_tool.duration");
    assert_eq!(
        durations.iter().map(|(_, n)| n).sum::<u64>(),
        spans.len() as u64
    );
    for span in &spans {
        let (tool, outcome) = (
            attr(span, "gen_ai.tool.name").unwrap(),
            attr(span, "idem.outcome").unwrap(),
        );
        let samples: u64 = durations
            .iter()
            .filter(|(a, _)| a["gen_ai.tool.name"] == tool && a["idem.outcome"] == outcome)
            .map(|(_, n)| n)
            .sum();
        let spans_alike = spans
            .iter()
            .filter(|s| {
                attr(s, "gen_ai.tool.name").as_deref() == Some(tool.as_str())
                    && attr(s, "idem.outcome").as_deref() == Some(outcome.as_str())
            })
            .count();
        assert_eq!(samples, spans_alike as u64, "{tool} {outcome}");
    }
    let charge_duration = durations
        .iter()
        .find(|(a, _)| a["gen_ai.tool.name"] == "charge_card")
        .unwrap();
    assert_eq!(charge_duration.0["error.type"], "outcome_unknown");
    assert_eq!(charge_duration.0["gen_ai.tool.type"], "function");
    assert_eq!(charge_duration.0["gen_ai.operation.name"], "execute_tool");
    assert_eq!(charge_duration.0["idem.class"], "non_idempotent_write");

    // The calls by outcome, from the histogram's counts.
    let calls =
        |outcome: &str| t.count("gen_ai.execute_tool.duration", &[("idem.outcome", outcome)]);
    assert_eq!(calls("executed"), 4, "first, tag, delete, read");
    assert_eq!(calls("unknown"), 1);
    assert_eq!(calls("denied"), 1);
    assert_eq!(
        t.count(
            "gen_ai.execute_tool.duration",
            &[
                ("gen_ai.tool.name", "send_email"),
                ("idem.outcome", "deduplicated")
            ]
        ),
        1
    );
    assert_eq!(t.count("idem.unknown_outcomes", &[]), 1);
    assert_eq!(t.count("idem.approvals.requested", &[]), 2);
    assert_eq!(t.count("idem.approvals.granted", &[]), 1);
    assert_eq!(
        t.count(
            "idem.approvals.denied",
            &[("gen_ai.tool.name", "delete_account")]
        ),
        1
    );
    assert_eq!(t.count("idem.takeovers", &[]), 0);
    let m = exec.metrics();
    assert_eq!((m.unknown_outcomes, m.approvals_granted), (1, 1));
}

/// A worker dies after starting the call; once its lease runs out, the
/// next worker takes the key over and runs it again (an idempotent
/// write), with the next fence. A refused call (the same key with other
/// arguments) says why.
#[tokio::test]
async fn a_takeover_and_a_refusal_are_told_on_the_span() {
    let t = Telemetry::new();
    let app = App::default();
    let clock = ManualClock::new(1_764_460_800_000);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));

    app.mail.lose_next_response.store(true, Ordering::SeqCst);
    {
        let worker = t.executor(store.clone(), &app).build();
        let call = worker
            .call(send_email, email())
            .call_id("call_1")
            .into_future();
        let mail = app.mail.clone();
        tokio::select! {
            _ = call => unreachable!("the worker died before recording"),
            _ = async {
                while mail.requests.load(Ordering::SeqCst) == 0 {
                    tokio::task::yield_now().await;
                }
            } => {}
        }
    }
    clock.advance(Duration::from_secs(16));

    let worker = t.executor(store, &app).build();
    let sent = worker
        .call(send_email, email())
        .call_id("call_1")
        .await
        .unwrap();
    assert!(!sent.meta.deduplicated);
    let other = SendEmail {
        to: "bob@example.com".into(),
        ..email()
    };
    worker
        .call(send_email, other)
        .call_id("call_1")
        .await
        .unwrap_err();

    let spans = t.tool_spans();
    assert_eq!(spans.len(), 3, "{spans:#?}");
    assert_attrs(
        &spans[0],
        &[
            ("idem.fence", Some("1")),
            ("idem.outcome", None),
            ("idem.takeover", None),
        ],
    );
    assert_attrs(
        &spans[1],
        &[
            ("idem.outcome", Some("executed")),
            ("idem.takeover", Some("true")),
            ("idem.fence", Some("2")),
            ("idem.attempts", Some("1")),
        ],
    );
    assert_attrs(
        &spans[2],
        &[
            ("idem.outcome", Some("refused")),
            ("idem.refusal", Some("key_reused")),
            ("error.type", Some("key_reused")),
        ],
    );
    assert_eq!(t.count("idem.takeovers", &[]), 1);
    assert_eq!(
        t.count(
            "gen_ai.execute_tool.duration",
            &[("idem.outcome", "refused"), ("idem.refusal", "key_reused")]
        ),
        1
    );
    assert_eq!(worker.metrics().takeovers, 1);
}

/// Book a room; the booking system takes a while to answer.
#[tool(class = "idempotent_write")]
async fn book_room(args: Tag) -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(format!("{} booked {}", args.customer, args.tag))
}

/// The model's repeat arrives while the first call is still running: it
/// waits for that call's outcome and answers from it (`joined`).
#[tokio::test(start_paused = true)]
async fn a_repeat_of_a_call_in_flight_joins_it() {
    let t = Telemetry::new();
    let app = App::default();
    let exec = t.executor(Arc::new(MemoryStore::new()), &app).build();
    let room = || Tag {
        customer: "ada".into(),
        tag: "room 101".into(),
    };
    let (first, repeat) = tokio::join!(
        exec.call(book_room, room())
            .call_id("call_book")
            .into_future(),
        exec.call(book_room, room())
            .call_id("call_book")
            .into_future(),
    );
    assert!(!first.unwrap().meta.deduplicated);
    assert!(repeat.unwrap().meta.deduplicated);

    let spans = t.tool_spans();
    let outcomes: Vec<String> = spans
        .iter()
        .map(|s| attr(s, "idem.outcome").unwrap())
        .collect();
    assert_eq!(outcomes.len(), 2);
    assert!(outcomes.contains(&"executed".to_owned()), "{outcomes:?}");
    assert!(outcomes.contains(&"joined".to_owned()), "{outcomes:?}");
    let calls =
        |outcome: &str| t.count("gen_ai.execute_tool.duration", &[("idem.outcome", outcome)]);
    assert_eq!(calls("joined"), 1);
    assert_eq!(calls("executed"), 1);
}

/// A `tools/call` carrying a W3C `traceparent` in `_meta` continues that
/// trace: the server's `tools/call {tool}` span is a child of the caller's
/// span, and the tool's `execute_tool` span a child of the server's.
#[cfg(feature = "mcp")]
#[tokio::test]
async fn an_mcp_call_continues_the_callers_trace() {
    use idem::mcp::{CallToolRequestParamsExt, TRACEPARENT_META};
    use opentelemetry::trace::{SpanId, TraceContextExt as _, TraceId};
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    let t = Telemetry::new();
    let ledger = crate::mcp_support::Ledger::default();
    let client = crate::mcp_support::connect(crate::mcp_support::server(&ledger)).await;

    // A traceparent as another process sends it.
    let call = crate::mcp_support::with_meta(
        crate::mcp_support::charge("cus_17", 4_900),
        serde_json::json!({
            TRACEPARENT_META: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "io.idem/idempotencyKey": "order-17",
        }),
    );
    let result = client.call_tool(call).await.unwrap();
    assert_eq!(result.is_error, Some(false));

    // The client helper, inside a span of the caller's.
    let turn = tracing::info_span!("agent turn");
    let turn_context = turn.context();
    let call = turn.in_scope(|| {
        crate::mcp_support::charge("cus_18", 100)
            .with_idempotency_key("order-18")
            .with_trace_context()
    });
    assert!(call
        .meta
        .as_ref()
        .unwrap()
        .0
         .0
        .contains_key(TRACEPARENT_META));
    client.call_tool(call).await.unwrap();
    drop(turn);

    // A result that is an error (arguments that do not deserialize), and
    // a protocol error (no such tool).
    let bad = crate::mcp_support::call("charge_card", serde_json::json!({ "customer": 17 }));
    assert_eq!(client.call_tool(bad).await.unwrap().is_error, Some(true));
    let unknown = crate::mcp_support::call("no_such_tool", serde_json::json!({}));
    client.call_tool(unknown).await.unwrap_err();

    let spans = t.spans.get_finished_spans().unwrap();
    let server_spans: Vec<&SpanData> = spans
        .iter()
        .filter(|s| attr(s, "mcp.method.name").as_deref() == Some("tools/call"))
        .collect();
    assert_eq!(server_spans.len(), 4, "{server_spans:#?}");
    let tool_span_under = |parent: &SpanData| -> SpanData {
        spans
            .iter()
            .find(|s| {
                s.parent_span_id == parent.span_context.span_id()
                    && attr(s, "gen_ai.operation.name").as_deref() == Some("execute_tool")
                    && s.span_kind == SpanKind::Internal
            })
            .cloned()
            .unwrap_or_else(|| panic!("no execute_tool span under {:?}", parent.name))
    };

    let remote = server_spans[0];
    assert_eq!(remote.name, "tools/call charge_card");
    assert_eq!(remote.span_kind, SpanKind::Server);
    assert_eq!(
        remote.span_context.trace_id(),
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
    );
    assert_eq!(
        remote.parent_span_id,
        SpanId::from_hex("00f067aa0ba902b7").unwrap()
    );
    assert_attrs(
        remote,
        &[
            ("mcp.method.name", Some("tools/call")),
            ("gen_ai.tool.name", Some("charge_card")),
            ("gen_ai.operation.name", Some("execute_tool")),
            ("error.type", None),
        ],
    );
    assert!(attr(remote, "jsonrpc.request.id").is_some());
    let tool = tool_span_under(remote);
    assert_eq!(tool.name, "execute_tool charge_card");
    assert_eq!(tool.span_context.trace_id(), remote.span_context.trace_id());
    assert_attrs(&tool, &[("idem.outcome", Some("executed"))]);

    let helped = server_spans[1];
    let turn_span = turn_context.span().span_context().clone();
    assert_eq!(helped.span_context.trace_id(), turn_span.trace_id());
    assert_eq!(helped.parent_span_id, turn_span.span_id());
    tool_span_under(helped);

    assert_attrs(server_spans[2], &[("error.type", Some("tool_error"))]);
    assert!(matches!(server_spans[2].status, Status::Error { .. }));
    assert_eq!(server_spans[3].name, "tools/call no_such_tool");
    assert_attrs(server_spans[3], &[("error.type", Some("-32602"))]);
}

mod otlp;
