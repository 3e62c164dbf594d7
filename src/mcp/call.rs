//! One `tools/call`: keyed from the request, run on a task of its own
//! through the dispatcher, answered as a `CallToolResult`.

use std::collections::HashMap;

use rmcp::model::{CallToolResult, ContentBlock, JsonObject, MetaObject, Tool};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::{json, Value};

use super::key::{self, IDEMPOTENCY_KEY_META, RUN_ID_META, STEP_META};
use super::{DEDUPLICATED_META, KEY_META};
use crate::dispatch::Arguments;
use crate::key::KeyError;
use crate::{Dispatcher, ErrorCode, IdemError, Namespace, RunContext, ToolCall, ToolResult};

/// What a server and its router fragments share: the dispatcher and the
/// tools' definitions, computed once.
pub(crate) struct Tools<S> {
    pub(crate) dispatcher: Dispatcher<S>,
    pub(crate) namespace: Option<Namespace>,
    /// In registration order.
    pub(crate) definitions: Vec<Tool>,
    by_name: HashMap<String, usize>,
}

impl<S: Send + Sync + 'static> Tools<S> {
    pub(crate) fn new(dispatcher: Dispatcher<S>, namespace: Option<Namespace>) -> Self {
        let definitions = super::tool_definitions(dispatcher.registry());
        let by_name = definitions
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.to_string(), i))
            .collect();
        Tools {
            dispatcher,
            namespace,
            definitions,
            by_name,
        }
    }

    /// The definition of the tool called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Tool> {
        self.by_name.get(name).map(|&i| &self.definitions[i])
    }

    /// Run one call.
    ///
    /// An unknown tool is the only protocol error (JSON-RPC "invalid
    /// params", as MCP asks); everything else that stops a call (a missing
    /// or malformed key, invalid arguments, a refusal, an unknown outcome,
    /// a tool's own failure) is a tool error result the model can read.
    pub(crate) async fn call(
        &self,
        name: &str,
        arguments: Option<JsonObject>,
        meta: &JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let Some(definition) = self.get(name) else {
            return Err(self.unknown_tool(name));
        };
        let structured = definition.output_schema.is_some();
        let keying = match key::keying(meta, context.extensions.get::<http::request::Parts>()) {
            Ok(keying) => keying,
            Err(problem) => {
                let content = json!({ "error": {
                    "code": ErrorCode::InvalidKey,
                    "message": format!("tool `{name}`: {problem}; nothing ran"),
                    "hint": how_to_send_a_key(),
                }});
                return Ok(error_result(content, false));
            }
        };
        let call = ToolCall {
            id: keying.call_id,
            name: name.to_owned(),
            arguments: Arguments::Json(Value::Object(arguments.unwrap_or_default())),
        };
        let (run_id, step) = keying.run.unzip();
        let run = RunContext {
            run_id,
            step: step.unwrap_or_default(),
            namespace: self.namespace.clone(),
        };
        // The call runs on a task of its own. Once it has claimed its key,
        // dropping it would leave the record in flight until its lease ran
        // out, and a non-idempotent write would then be an unknown outcome
        // forever; a task that nobody awaits finishes and records instead.
        // So the request may go away (a `notifications/cancelled`, an HTTP
        // client hanging up, a server dropping its handler future) and the
        // call still completes; a retry with the same key gets its result.
        let dispatcher = self.dispatcher.clone();
        let mut task = tokio::spawn(async move { dispatcher.dispatch_one(call, &run).await });
        let joined = tokio::select! {
            biased;
            joined = &mut task => joined,
            () = context.ct.cancelled() => return Ok(cancelled(name)),
        };
        Ok(match joined {
            Ok(result) => call_tool_result(&result, structured),
            Err(e) => panicked(name, e),
        })
    }

    fn unknown_tool(&self, name: &str) -> ErrorData {
        let suggestion = self.dispatcher.registry().suggest(name);
        let mut data = json!({ "code": ErrorCode::UnknownTool });
        if let Some(suggestion) = suggestion {
            data["suggestion"] = json!(suggestion);
        }
        let error = IdemError::UnknownTool {
            name: name.to_owned(),
            suggestion: suggestion.map(str::to_owned),
        };
        ErrorData::invalid_params(error.to_string(), Some(data))
    }
}

/// The MCP shape of a dispatched call's result: the output as text — a
/// string output as itself, which chat clients show as written, anything
/// else as JSON — (and as `structuredContent` when the tool declares an
/// output schema),
/// or `isError` with the dispatcher's `{"error": {"code", "message"}}`.
/// `_meta` says whether the answer came from the record, and the key.
pub(crate) fn call_tool_result(result: &ToolResult, structured: bool) -> CallToolResult {
    let answer = match &result.result {
        Ok(called) if structured => CallToolResult::structured(called.output.clone()),
        Ok(called) => CallToolResult::success(vec![ContentBlock::text(match &called.output {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })]),
        Err(e) => {
            let mut content = result.content();
            if matches!(
                e,
                IdemError::Key {
                    source: KeyError::NoSource { .. },
                    ..
                }
            ) {
                content["error"]["hint"] = how_to_send_a_key();
            }
            return error_result(content, result.deduplicated());
        }
    };
    let key = result
        .meta()
        .and_then(|m| m.key.as_ref())
        .map(|k| k.as_str());
    answer.with_meta(Some(result_meta(result.deduplicated(), key)))
}

fn result_meta(deduplicated: bool, key: Option<&str>) -> MetaObject {
    let mut meta = MetaObject::new();
    meta.insert(DEDUPLICATED_META.to_owned(), deduplicated.into());
    if let Some(key) = key {
        meta.insert(KEY_META.to_owned(), key.into());
    }
    meta
}

/// An `isError` result whose text is `content` as JSON.
fn error_result(content: Value, deduplicated: bool) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(content.to_string())])
        .with_meta(Some(result_meta(deduplicated, None)))
}

/// What a write without a key is told.
fn how_to_send_a_key() -> Value {
    json!(format!(
        "send an idempotency key with the call, the same on every retry of one intended effect: \
         the request's `_meta` field `{IDEMPOTENCY_KEY_META}` (a string), or the HTTP header \
         `{}`, or the `_meta` fields `{RUN_ID_META}` (a string) and `{STEP_META}` (an integer)",
        key::IDEMPOTENCY_KEY_HEADER
    ))
}

/// The answer to a request the client cancelled. rmcp does not send it
/// (MCP says a cancelled request gets no response); it is there for
/// servers that do.
fn cancelled(name: &str) -> CallToolResult {
    let content = json!({ "error": {
        "code": "cancelled",
        "message": format!(
            "the request for `{name}` was cancelled; a call that had started goes on and records \
             its outcome: call again with the same key to receive it"
        ),
    }});
    error_result(content, false)
}

/// The answer when the tool panicked. Whether its effect happened is
/// unknown; its record stays in flight and the lease decides, as if the
/// process had crashed.
fn panicked(name: &str, error: tokio::task::JoinError) -> CallToolResult {
    let content = json!({ "error": {
        "code": "panicked",
        "message": format!(
            "tool `{name}` did not finish ({error}); whether its effect happened is unknown, and \
             its record is left to its lease, as after a crash"
        ),
    }});
    error_result(content, false)
}
