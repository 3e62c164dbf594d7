//! The client side: stable keys in a `tools/call`'s `_meta`, so Rust MCP
//! clients and agents can retry a write without repeating it.

use rmcp::model::{CallToolRequestParams, RequestMetaObject};
use serde_json::Value;

use crate::key::{IDEMPOTENCY_KEY_META, RUN_ID_META, STEP_META};
use idem_runtime::key::{self, CanonicalArgs, KeyError, KeyInput, KeySource};
use idem_runtime::{IdempotencyKey, Namespace};

/// Keys for an rmcp [`CallToolRequestParams`], in the `_meta` fields an
/// [`McpServer`](crate::McpServer) reads.
///
/// Send the same key on every retry of one intended effect (a timeout, a
/// reconnect, a replay of the run) and a new one for every new effect.
///
/// ```
/// use idem::mcp::{CallToolRequestParamsExt, IDEMPOTENCY_KEY_META};
/// use rmcp::model::CallToolRequestParams;
/// use serde_json::json;
///
/// let arguments = json!({"customer": "cus_17", "cents": 4900});
/// let call = CallToolRequestParams::new("charge_card")
///     .with_arguments(arguments.as_object().unwrap().clone())
///     .with_derived_idempotency_key("run-2026-11-29-001", 4)?;
/// let meta = call.meta.as_ref().unwrap();
/// assert_eq!(meta[IDEMPOTENCY_KEY_META].as_str().unwrap().len(), 64);
///
/// // The same call again (a retry) has the same key; the next step's has another.
/// let again = CallToolRequestParams::new("charge_card")
///     .with_arguments(arguments.as_object().unwrap().clone())
///     .with_derived_idempotency_key("run-2026-11-29-001", 4)?;
/// assert_eq!(again.meta, call.meta);
/// # Ok::<(), idem::key::KeyError>(())
/// ```
pub trait CallToolRequestParamsExt: Sized {
    /// Send `key` as the call's idempotency key
    /// ([`IDEMPOTENCY_KEY_META`]): an id the client keeps for this intended
    /// effect (a UUID stored with the agent's plan, an order number).
    fn with_idempotency_key(self, key: impl Into<String>) -> Self;

    /// Derive the key from the run, the step, the tool's name and the
    /// arguments, exactly as `docs/keys.md` specifies the `step` source
    /// (version 1, namespace `default`), and send it as
    /// [`with_idempotency_key`](Self::with_idempotency_key) does. Set the
    /// arguments first. A retry of the step derives the same key; the same
    /// arguments at another step or in another run derive another.
    ///
    /// Fails when the arguments have no canonical form (a number beyond
    /// ±2^53, for instance) or the run id is empty or longer than 256 bytes.
    fn with_derived_idempotency_key(self, run_id: &str, step: u64) -> Result<Self, KeyError>;

    /// Send the run and step ([`RUN_ID_META`], [`STEP_META`]) and let the
    /// server derive the key from them, the tool and the arguments (it does
    /// so only when the call carries no idempotency key).
    fn with_run_step(self, run_id: impl Into<String>, step: u64) -> Self;

    /// Say why the call is made, in the caller's words
    /// ([`REASON_META`](crate::REASON_META): the model's text that led to
    /// it), for whoever decides on it. Not part of the key.
    fn with_reason(self, reason: impl Into<String>) -> Self;

    /// Carry the current span's trace in the call's `_meta`
    /// ([`TRACEPARENT_META`](crate::TRACEPARENT_META) and
    /// [`TRACESTATE_META`](crate::TRACESTATE_META), W3C Trace Context, as
    /// OpenTelemetry's MCP conventions say), so that the server's spans join
    /// the caller's trace (feature `otel`; the current span must be an
    /// OpenTelemetry one, through `tracing-opentelemetry`).
    #[cfg(feature = "otel")]
    fn with_trace_context(self) -> Self;
}

impl CallToolRequestParamsExt for CallToolRequestParams {
    fn with_idempotency_key(self, key: impl Into<String>) -> Self {
        with_meta(self, IDEMPOTENCY_KEY_META, Value::String(key.into()))
    }

    fn with_derived_idempotency_key(self, run_id: &str, step: u64) -> Result<Self, KeyError> {
        let key = step_key(&self, run_id, step)?;
        Ok(self.with_idempotency_key(key.as_str()))
    }

    fn with_run_step(self, run_id: impl Into<String>, step: u64) -> Self {
        let this = with_meta(self, RUN_ID_META, Value::String(run_id.into()));
        with_meta(this, STEP_META, Value::from(step))
    }

    fn with_reason(self, reason: impl Into<String>) -> Self {
        with_meta(self, crate::meta::REASON_META, Value::String(reason.into()))
    }

    #[cfg(feature = "otel")]
    fn with_trace_context(mut self) -> Self {
        let meta = self.meta.get_or_insert_with(RequestMetaObject::new);
        crate::trace::propagation::inject_current(&mut meta.0 .0);
        self
    }
}

/// The `step` key of `call` in the default namespace.
fn step_key(
    call: &CallToolRequestParams,
    run_id: &str,
    step: u64,
) -> Result<IdempotencyKey, KeyError> {
    let arguments = Value::Object(call.arguments.clone().unwrap_or_default());
    let args = CanonicalArgs::from_value(&arguments)?;
    key::derive_key(&KeyInput {
        version: key::DEFAULT_KEY_VERSION,
        namespace: &Namespace::default(),
        tool: &call.name,
        source: KeySource::Step {
            run_id,
            step,
            args: &args,
        },
    })
}

fn with_meta(mut call: CallToolRequestParams, field: &str, value: Value) -> CallToolRequestParams {
    call.meta
        .get_or_insert_with(RequestMetaObject::new)
        .0
         .0
        .insert(field.to_owned(), value);
    call
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector "run/step, numbers spelled three ways" of `docs/keys.md`.
    #[test]
    fn the_derived_key_is_the_documented_step_key() {
        let arguments =
            serde_json::json!({ "currency": "EUR", "amount_cents": 1.0e3, "customer": "cus_17" });
        let call = CallToolRequestParams::new("charge_card")
            .with_arguments(arguments.as_object().unwrap().clone())
            .with_derived_idempotency_key("run-2026-11-29-001", 4)
            .unwrap();
        assert_eq!(
            call.meta.unwrap().0 .0[IDEMPOTENCY_KEY_META],
            "5518e357ff5034c41db0879094eccee2b145da46aab8711356e39fc581f7531c"
        );
    }

    #[test]
    fn run_and_step_go_into_meta_next_to_what_is_there() {
        let mut meta = RequestMetaObject::new();
        meta.0 .0.insert("progressToken".into(), "p1".into());
        let mut call = CallToolRequestParams::new("send_email");
        call.meta = Some(meta);
        let call = call.with_run_step("run-1", 2).with_reason("the user asked");
        let meta = call.meta.unwrap().0 .0;
        assert_eq!(meta[crate::meta::REASON_META], "the user asked");
        assert_eq!(meta[RUN_ID_META], "run-1");
        assert_eq!(meta[STEP_META], 2);
        assert_eq!(meta["progressToken"], "p1");
    }
}
