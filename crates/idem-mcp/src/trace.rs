//! A `tools/call`'s span, as OpenTelemetry's MCP conventions name it, and
//! (feature `otel`) the W3C Trace Context carried in `params._meta`.
//!
//! The MCP conventions fix the carrier: `traceparent` and `tracestate` in
//! the request's `_meta`. So the server and the client helper use W3C Trace
//! Context whatever propagator the application installed globally.

use rmcp::model::{CallToolResponse, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};

/// The `_meta` field of a request that carries the caller's trace
/// (W3C `traceparent`).
pub const TRACEPARENT_META: &str = "traceparent";

/// The `_meta` field of a request that carries vendor trace state (W3C
/// `tracestate`).
pub const TRACESTATE_META: &str = "tracestate";

/// The SERVER span of one `tools/call`: `tools/call {tool}`, with
/// `mcp.method.name`, `jsonrpc.request.id`, `gen_ai.tool.name` and
/// `gen_ai.operation.name`. With the `otel` feature its parent is the trace
/// the request's `_meta` carries, when it carries one.
pub(crate) fn call_span(
    tool: &str,
    context: &RequestContext<RoleServer>,
    meta: &JsonObject,
) -> tracing::Span {
    let span = tracing::info_span!(
        "tools/call",
        otel.name = format_args!("tools/call {tool}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        mcp.method.name = "tools/call",
        jsonrpc.request.id = %context.id,
        gen_ai.tool.name = tool,
        gen_ai.operation.name = "execute_tool",
        error.type = tracing::field::Empty,
    );
    #[cfg(feature = "otel")]
    propagation::continue_trace(&span, meta);
    #[cfg(not(feature = "otel"))]
    let _ = meta;
    span
}

/// Record how the call ended: `error.type` is `tool_error` for an error
/// result, the JSON-RPC error code for a protocol error.
pub(crate) fn record_response(
    span: &tracing::Span,
    response: &Result<CallToolResponse, ErrorData>,
) {
    let error_type = match response {
        Ok(CallToolResponse::Complete(result)) if result.is_error == Some(true) => {
            "tool_error".to_owned()
        }
        Ok(_) => return,
        Err(e) => e.code.0.to_string(),
    };
    span.record("error.type", error_type.as_str());
    span.record("otel.status_code", "ERROR");
}

#[cfg(feature = "otel")]
pub(crate) mod propagation {
    use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
    use opentelemetry::trace::TraceContextExt as _;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use rmcp::model::JsonObject;
    use serde_json::Value;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;

    /// `_meta` read as a carrier: its string fields.
    struct MetaExtractor<'m>(&'m JsonObject);

    impl Extractor for MetaExtractor<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(Value::as_str)
        }

        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(String::as_str).collect()
        }
    }

    /// `_meta` written as a carrier.
    struct MetaInjector<'m>(&'m mut JsonObject);

    impl Injector for MetaInjector<'_> {
        fn set(&mut self, key: &str, value: String) {
            self.0.insert(key.to_owned(), Value::String(value));
        }
    }

    /// Make `span` a child of the trace `meta` carries, if it carries a
    /// valid one.
    pub(crate) fn continue_trace(span: &tracing::Span, meta: &JsonObject) {
        if !meta.contains_key(crate::TRACEPARENT_META) {
            return;
        }
        let parent = TraceContextPropagator::new().extract(&MetaExtractor(meta));
        if parent.span().span_context().is_valid() {
            // Fails only when the span is not an OpenTelemetry one (no
            // `tracing-opentelemetry` layer): nothing to continue then.
            let _ = span.set_parent(parent);
        }
    }

    /// Put the current span's trace context into `meta`.
    pub(crate) fn inject_current(meta: &mut JsonObject) {
        let context = tracing::Span::current().context();
        TraceContextPropagator::new().inject_context(&context, &mut MetaInjector(meta));
    }
}
