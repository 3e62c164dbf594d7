//! One upstream tool as an idem tool: known only at run time, so its spec
//! and class come from the instance (`ToolDef::runtime_spec`,
//! `runtime_class`), and its call sends the request upstream with the
//! idempotency key in `_meta`.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::CallToolRequestParamsExt;
use idem_runtime::class::{ClassKind, NonIdempotentWrite};
use idem_runtime::ctx::ToolCtx;
use idem_runtime::error::ToolError;
use idem_runtime::tool::{KeyMaterial, KeySpec, Tool, ToolDef, ToolSpec};
use rmcp::model::{CallToolRequestParams, JsonObject};
use serde_json::{Map, Value};

use super::config::{Resolved, Transient};
use super::upstream::Upstream;

/// How long an upstream call may go without its result or a progress
/// notification when the configuration gives the tool no `timeout`: five
/// minutes. Longer than the clients in front of the proxy wait (the MCP
/// TypeScript SDK's default request timeout is one minute), so a client
/// that gives up decides first and cancels; a proxy that cut a write off
/// earlier would leave its outcome unknown while the upstream finished it.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// The longest an upstream call may take however much progress it
/// reports: a day.
const MAX_CALL: Duration = Duration::from_secs(24 * 60 * 60);

/// The field of a recorded failure's details holding the upstream's own
/// `isError` result, which the proxy answers with.
pub(super) const UPSTREAM_RESULT: &str = "upstream_result";

/// What a SIGHUP may change in a served tool, because no key and no
/// class depends on it: read by each call as it starts.
#[derive(Debug, Clone)]
pub(super) struct Live {
    /// How long the call may go without its result or progress.
    pub idle: Duration,
    /// Which of its errors say it did not take effect.
    pub transient: Transient,
}

impl Live {
    /// As the configuration resolves it.
    pub(super) fn of(resolved: &Resolved) -> Self {
        Live {
            idle: resolved.timeout.unwrap_or(DEFAULT_TIMEOUT),
            transient: resolved.transient.clone(),
        }
    }
}

/// A tool's [`Live`] settings, shared with the reload that replaces them.
pub(super) type LiveCell = Arc<RwLock<Arc<Live>>>;

/// An upstream tool run through the executor.
pub(super) struct UpstreamTool {
    live: LiveCell,
    spec: &'static ToolSpec,
    /// The tool's name on its upstream (the spec's is the name served,
    /// prefixed behind a gateway).
    remote: String,
    class: ClassKind,
    natural: Option<&'static [&'static str]>,
    upstream: Arc<Upstream>,
}

/// Give `text` the `'static` lifetime a [`ToolSpec`] holds: the proxy
/// defines its tools once, at start, and keeps them until it exits.
fn leak(text: &str) -> &'static str {
    Box::leak(text.to_owned().into_boxed_str())
}

impl UpstreamTool {
    /// The tool `remote` of `upstream`, served as `name` (described as
    /// `description`), run as `resolved` says.
    pub(super) fn new(
        name: &str,
        remote: &str,
        description: &str,
        resolved: &Resolved,
        upstream: Arc<Upstream>,
    ) -> Self {
        let natural: Option<&'static [&'static str]> = resolved.key.as_ref().map(|fields| {
            let fields: Vec<&'static str> = fields.iter().map(|f| leak(f)).collect();
            &*Box::leak(fields.into_boxed_slice())
        });
        let mut spec = ToolSpec::new(leak(name), leak(description));
        spec.ttl = resolved.ttl;
        // The call's own idle timer (reset by progress) is its timeout; the
        // executor's per-attempt timeout only bounds a call that reports
        // progress for ever.
        spec.timeout = Some(MAX_CALL);
        if let Some(fields) = natural {
            spec.key = KeySpec::Natural {
                fields,
                window: resolved.key_window,
            };
        }
        UpstreamTool {
            live: Arc::new(RwLock::new(Arc::new(Live::of(resolved)))),
            spec: Box::leak(Box::new(spec)),
            remote: remote.to_owned(),
            class: resolved.class,
            natural,
            upstream,
        }
    }

    /// Its settings a reload may replace.
    pub(super) fn live(&self) -> LiveCell {
        self.live.clone()
    }

    fn settings(&self) -> Arc<Live> {
        // A reload that panicked mid-write left the value whole (it
        // replaces one `Arc`): go on with it.
        self.live
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl ToolDef for UpstreamTool {
    // A placeholder: the class is `runtime_class`'s, read by dispatch.
    type Class = NonIdempotentWrite;
    type Args = Value;
    /// The upstream's `CallToolResult`, as JSON: recorded, and answered to
    /// duplicates as it came.
    type Output = Value;

    const SPEC: ToolSpec = ToolSpec::new("upstream", "A tool of the upstream MCP server.");

    /// Any object: the upstream's result. Declaring one makes idem's MCP
    /// server carry the recorded result whole in `structuredContent`,
    /// from which the proxy answers with it.
    fn output_schema() -> Option<schemars::Schema> {
        Some(schemars::json_schema!({ "type": "object" }))
    }

    fn runtime_spec(&self) -> &'static ToolSpec {
        self.spec
    }

    fn runtime_class(&self) -> ClassKind {
        self.class
    }

    fn runtime_key_material(&self, args: &Value) -> Option<KeyMaterial> {
        let fields = self.natural?;
        let mut material = Map::new();
        for &field in fields {
            let value = args.get(field).cloned().unwrap_or(Value::Null);
            material.insert(field.to_owned(), value);
        }
        Some(KeyMaterial::Natural(Value::Object(material)))
    }
}

impl Tool<()> for UpstreamTool {
    async fn call(&self, args: Value, ctx: &ToolCtx, _state: &()) -> Result<Value, ToolError> {
        let arguments: JsonObject = match args {
            Value::Object(object) => object,
            Value::Null => JsonObject::new(),
            other => {
                return Err(ToolError::permanent(format!(
                    "the arguments must be a JSON object, found {other}"
                )))
            }
        };
        let progress = super::upstream::progress_to();
        let mut request = CallToolRequestParams::new(self.remote.clone()).with_arguments(arguments);
        if let Some(key) = ctx.key() {
            request = request.with_idempotency_key(key.as_str());
        }
        let live = self.settings();
        let result = self.upstream.call(request, progress, live.idle).await;
        let result = result.map_err(|e| transient_rpc_error(&live.transient, e))?;
        let recorded = serde_json::to_value(&result).map_err(|e| {
            ToolError::ambiguous(format!("the upstream's result cannot be recorded: {e}"))
        })?;
        if result.is_error == Some(true) {
            // The tool's own failure: recorded as one (a repeat is told the
            // earlier call failed), with the upstream's result whole, which
            // the proxy answers as it came.
            let texts: Vec<&str> = result
                .content
                .iter()
                .filter_map(|block| block.as_text().map(|t| t.text.as_str()))
                .collect();
            if live.transient.text(&texts.join("\n")) {
                // The configuration says this error means nothing took
                // effect: not recorded, and retried where the class
                // allows (the executor releases the key).
                let said = texts.join(" ");
                return Err(ToolError::transient(format!(
                    "the upstream tool reported: {}",
                    idem_runtime::text::clip(&said, 500)
                )));
            }
            let said = texts
                .first()
                .map_or("the upstream tool reported an error", |t| t);
            return Err(ToolError::permanent(idem_runtime::text::clip(said, 500))
                .with_details(serde_json::json!({ UPSTREAM_RESULT: recorded })));
        }
        Ok(recorded)
    }
}

/// `error`, a JSON-RPC error from the upstream (an ambiguous one: it came
/// after the upstream received the call) made transient when its code or
/// message is one `transient` names.
fn transient_rpc_error(transient: &Transient, error: ToolError) -> ToolError {
    let rpc = error
        .details()
        .and_then(|d| d.get(super::upstream::JSONRPC_ERROR));
    let Some(rpc) = rpc else { return error };
    let code = rpc.get("code").and_then(Value::as_i64);
    let message = rpc
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if code.is_some_and(|c| transient.code(c)) || transient.text(message) {
        return ToolError::transient(format!(
            "the upstream server answered with error {}: {}",
            code.unwrap_or_default(),
            idem_runtime::text::clip(message, 500)
        ));
    }
    error
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::config::Config;
    use crate::proxy::upstream::{Source, JSONRPC_ERROR};
    use idem_runtime::error::ErrorKind;

    /// The upstream's JSON-RPC error after it received the call: ambiguous,
    /// unless its code or message is one the file names transient.
    #[test]
    fn a_json_rpc_error_is_transient_only_when_the_file_names_its_code_or_text() {
        let config = Config::parse(
            "[tools.push]\ntransient = [\"busy\"]\ntransient_codes = [-32001]\n",
            "f.toml",
        )
        .unwrap();
        let listed = rmcp::model::Tool::new("push", "d", Arc::new(Default::default()));
        let upstream = Arc::new(Upstream::new(Source::Command(Vec::new())));
        let tool = UpstreamTool::new("push", "push", "d", &config.resolve(&listed), upstream);
        let rpc = |code: i64, message: &str| {
            ToolError::ambiguous("the upstream answered with a protocol error").with_details(
                serde_json::json!({ JSONRPC_ERROR: { "code": code, "message": message } }),
            )
        };
        let kind = |e: ToolError| transient_rpc_error(&tool.settings().transient, e).kind();
        assert_eq!(kind(rpc(-32001, "later")), ErrorKind::Transient);
        assert_eq!(kind(rpc(-32603, "server busy")), ErrorKind::Transient);
        assert_eq!(kind(rpc(-32603, "internal error")), ErrorKind::Ambiguous);
        assert_eq!(
            kind(ToolError::ambiguous("no answer within 5m")),
            ErrorKind::Ambiguous
        );
    }
}
