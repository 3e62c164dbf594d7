//! The [`Anthropic`] provider.

use serde_json::{json, Value};

use super::shape::{optional, Shape};
use super::Provider;
use crate::dispatch::call::{Arguments, DispatchError, ToolCall, ToolResult};
use crate::registry::Registry;

/// Anthropic Messages: tool calls are the `tool_use` blocks
/// (`{ "id", "name", "input" }`) of a message's `content`; tools are
/// `{"name", "description", "input_schema"}`; results are `tool_result`
/// blocks in one `role: "user"` message.
///
/// ```
/// use idem_runtime::dispatch::Arguments;
/// use idem_runtime::provider::{Anthropic, Provider};
/// use serde_json::json;
///
/// let calls = Anthropic::parse(&json!({
///     "role": "assistant",
///     "content": [
///         {"type": "text", "text": "Sending it now."},
///         {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9",
///          "name": "send_email", "input": {"to": "ada@example.com"}}
///     ]
/// }))?;
/// assert_eq!(calls.len(), 1);
/// assert_eq!(calls[0].arguments, Arguments::Json(json!({"to": "ada@example.com"})));
/// # Ok::<(), idem_runtime::dispatch::DispatchError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Anthropic;

impl Provider for Anthropic {
    /// One `role: "user"` message carrying every `tool_result` block.
    type Reply = Value;

    /// The tool calls (`tool_use` blocks) of an Anthropic message, or of
    /// its `content` blocks.
    fn parse(message: &Value) -> Result<Vec<ToolCall>, DispatchError> {
        const SHAPE: Shape = Shape {
            provider: "Anthropic",
            list: "content",
        };
        let Some(blocks) = SHAPE.list_in(message)?.as_array() else {
            // A plain text content has no tool calls.
            return Ok(Vec::new());
        };
        blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .map(|(i, block)| {
                Ok(ToolCall {
                    id: optional(block, "id"),
                    name: SHAPE.required(i, " (tool_use)", block, "name")?.to_owned(),
                    arguments: Arguments::Json(block.get("input").cloned().unwrap_or(Value::Null)),
                })
            })
            .collect()
    }

    /// Definitions for the Messages API `tools` parameter:
    /// `{"name", "description", "input_schema"}`.
    fn tools<S: 'static>(registry: &Registry<S>) -> Value {
        super::definitions(registry, |spec, schema| {
            Value::Object(super::described(spec, "input_schema", schema))
        })
    }

    /// A `tool_result` block answering one call: its `tool_use_id`,
    /// [`ToolResult::content`] as JSON text, and `is_error: true` when the
    /// call failed or was refused.
    fn result(result: &ToolResult) -> Value {
        let mut block = json!({
            "type": "tool_result",
            "tool_use_id": result.call_id,
            "content": result.content().to_string(),
        });
        if result.is_error() {
            block["is_error"] = Value::Bool(true);
        }
        block
    }

    /// The `role: "user"` message carrying the `tool_result` blocks of
    /// `results`, in call order.
    fn reply(results: &[ToolResult]) -> Value {
        json!({
            "role": "user",
            "content": results.iter().map(Self::result).collect::<Vec<_>>(),
        })
    }
}
