//! The [`OpenAi`] provider.

use serde_json::{json, Map, Value};

use super::shape::{arguments, optional, Shape};
use super::Provider;
use crate::dispatch::call::{DispatchError, ToolCall, ToolResult};
use crate::registry::Registry;
use crate::tool::ToolSpec;

/// OpenAI Chat Completions: tool calls are the `tool_calls` of an assistant
/// message (`[{ "id", "type": "function", "function": { "name",
/// "arguments" } }]`, `arguments` being a JSON *string*); tools are
/// `{"type": "function", "function": {…}}`; results are `role: "tool"`
/// messages.
///
/// ```
/// use idem_runtime::dispatch::Arguments;
/// use idem_runtime::provider::{OpenAi, Provider};
/// use serde_json::json;
///
/// let calls = OpenAi::parse(&json!({
///     "role": "assistant",
///     "tool_calls": [{
///         "id": "call_9f8e7d6c5b4a",
///         "type": "function",
///         "function": {"name": "send_email", "arguments": "{\"to\":\"ada@example.com\"}"}
///     }]
/// }))?;
/// assert_eq!(calls[0].id.as_deref(), Some("call_9f8e7d6c5b4a"));
/// assert_eq!(calls[0].arguments, Arguments::Text("{\"to\":\"ada@example.com\"}".into()));
/// # Ok::<(), idem_runtime::dispatch::DispatchError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct OpenAi;

impl Provider for OpenAi {
    /// The `role: "tool"` messages, to append to the conversation.
    type Reply = Vec<Value>;

    /// The tool calls of an OpenAI chat-completions message: a whole
    /// response (`choices[0].message.tool_calls`), an assistant message
    /// (`tool_calls`) or the `tool_calls` array itself.
    fn parse(message: &Value) -> Result<Vec<ToolCall>, DispatchError> {
        const SHAPE: Shape = Shape {
            provider: "OpenAI",
            list: "tool_calls",
        };
        let calls = if let Some(choices) = message.get("choices") {
            choices
                .get(0)
                .and_then(|c| c.get("message"))
                .and_then(|m| m.get("tool_calls"))
        } else if message.is_array() {
            Some(message)
        } else {
            message.get("tool_calls")
        };
        let Some(calls) = calls else {
            return Ok(Vec::new());
        };
        SHAPE
            .items(calls)?
            .iter()
            .enumerate()
            .map(|(i, call)| {
                let function = call
                    .get("function")
                    .ok_or_else(|| SHAPE.item_error(i, " has no `function`"))?;
                Ok(ToolCall {
                    id: optional(call, "id"),
                    name: SHAPE.required(i, ".function", function, "name")?.to_owned(),
                    arguments: arguments(function.get("arguments")),
                })
            })
            .collect()
    }

    /// Definitions for the chat-completions `tools` parameter:
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`.
    fn tools<S: 'static>(registry: &Registry<S>) -> Value {
        super::definitions(
            registry,
            |spec, schema| json!({ "type": "function", "function": function(spec, schema) }),
        )
    }

    /// A `role: "tool"` message answering one call: its `tool_call_id`,
    /// and [`ToolResult::content`] as JSON text.
    fn result(result: &ToolResult) -> Value {
        json!({
            "role": "tool",
            "tool_call_id": result.call_id,
            "content": result.content().to_string(),
        })
    }

    /// The `role: "tool"` messages for `results`, in call order.
    fn reply(results: &[ToolResult]) -> Vec<Value> {
        results.iter().map(Self::result).collect()
    }
}

/// What both OpenAI APIs say of a function: its name, description and
/// parameters.
pub(super) fn function(spec: &ToolSpec, schema: Value) -> Map<String, Value> {
    super::described(spec, "parameters", schema)
}
