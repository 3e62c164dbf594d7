//! `idem proxy --listen` with `OTEL_EXPORTER_OTLP_ENDPOINT`: each call's
//! `execute_tool` span arrives at an OTLP/HTTP receiver on loopback.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;

use crate::support::mcp_http::{http, serve_upstream, Proxy, Session};

/// What the receiver was sent at `/v1/traces`, body by body.
type Received = Arc<Mutex<Vec<Bytes>>>;

/// A receiver of OTLP/HTTP (protobuf) traces on loopback: its URL.
async fn receiver(received: Received) -> String {
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let received = received.clone();
            async move {
                received.lock().unwrap().push(body);
                // An empty ExportTraceServiceResponse: all accepted.
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?;
    match value.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => Some(s.clone()),
        other => Some(format!("{other:?}")),
    }
}

/// A call and its repeat through the proxy: two `execute_tool write` spans
/// arrive, one `executed` and one `deduplicated`, with the key, from the
/// service `idem-proxy`; and the proxy's stop flushes what is left.
#[test]
fn a_proxied_calls_spans_arrive_over_otlp() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let received = Received::default();
        let endpoint = receiver(received.clone()).await;
        let upstream = serve_upstream().await;
        let place = idem_testkit::TempDir::new("idem-otlp").unwrap();
        let proxy = Proxy::start(
            upstream,
            place.path(),
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
                ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ],
        );
        let session = Session::open(http(), proxy.url.clone()).await;
        assert!(session.call("write", "otlp-1", 1).await, "the call");
        assert!(session.call("write", "otlp-1", 1).await, "its repeat");

        let deadline = Instant::now() + Duration::from_secs(20);
        let spans = loop {
            let requests: Vec<ExportTraceServiceRequest> = received
                .lock()
                .unwrap()
                .iter()
                .map(|body| ExportTraceServiceRequest::decode(body.as_ref()).unwrap())
                .collect();
            let spans: Vec<_> = requests
                .iter()
                .flat_map(|r| &r.resource_spans)
                .flat_map(|r| {
                    let resource = r.resource.as_ref().map(|r| &r.attributes[..]);
                    let service = resource.and_then(|a| text(a, "service.name"));
                    r.scope_spans
                        .iter()
                        .flat_map(|s| &s.spans)
                        .map(move |s| (service.clone(), s.clone()))
                })
                .filter(|(_, s)| s.name == "execute_tool write")
                .collect();
            if spans.len() >= 2 || Instant::now() > deadline {
                break spans;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let mut outcomes: Vec<_> = spans
            .iter()
            .map(|(service, span)| {
                assert_eq!(service.as_deref(), Some("idem-proxy"));
                assert!(text(&span.attributes, "idem.key").is_some(), "{span:?}");
                text(&span.attributes, "idem.outcome").unwrap_or_default()
            })
            .collect();
        outcomes.sort();
        assert_eq!(outcomes, ["deduplicated", "executed"], "{spans:?}");
        drop(proxy);
    });
}
