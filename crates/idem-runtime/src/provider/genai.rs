//! The [`Genai`] provider.

use serde_json::{json, Value};

use super::shape::Shape;
use super::Provider;
use crate::dispatch::call::{Arguments, DispatchError, ToolCall, ToolResult};
use crate::registry::Registry;

/// [genai](https://crates.io/crates/genai), the Rust client of many
/// providers, as it serializes its types: tool calls are the
/// `{"ToolCall": {"call_id", "fn_name", "fn_arguments"}}` parts of a
/// `ChatResponse`'s or `ChatMessage`'s `content`; tools are genai `Tool`s
/// (`{"name", "description", "schema"}`); results are genai
/// `ToolResponse`s.
///
/// genai cannot be built without an HTTP client (reqwest is not optional
/// in any release), so idem does not depend on it: serialize genai's value
/// with `serde_json::to_value` and parse that, and deserialize the tools
/// and the responses with `serde_json::from_value`.
///
/// ```
/// use idem_runtime::dispatch::Arguments;
/// use idem_runtime::provider::{Genai, Provider};
/// use serde_json::json;
///
/// // `serde_json::to_value(&chat_response)?` of a genai `ChatResponse`:
/// let calls = Genai::parse(&json!({
///     "content": [
///         {"Text": "Sending it now."},
///         {"ToolCall": {"call_id": "call_9f8e7d6c5b4a", "fn_name": "send_email",
///                       "fn_arguments": {"to": "ada@example.com"}}}
///     ],
///     "usage": {}
/// }))?;
/// assert_eq!(calls.len(), 1);
/// assert_eq!(calls[0].id.as_deref(), Some("call_9f8e7d6c5b4a"));
/// assert_eq!(calls[0].arguments, Arguments::Json(json!({"to": "ada@example.com"})));
/// # Ok::<(), idem_runtime::dispatch::DispatchError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Genai;

impl Provider for Genai {
    /// The `ToolResponse`s, to deserialize into genai's.
    type Reply = Vec<Value>;

    /// The tool calls of a genai response, as genai (0.4 to 0.7)
    /// serializes its types: a `ChatResponse` or `ChatMessage` (calls are
    /// the `{"ToolCall": {…}}` parts of its `content`), its content parts
    /// themselves, or its tool calls (`Vec<ToolCall>`, from
    /// `ChatResponse::tool_calls`), or one `ToolCall`.
    ///
    /// A call is keyed by its `call_id`, which genai takes from the
    /// provider (`tool_calls[].id`, `tool_use.id`), so a call has the same
    /// key whether it arrives through genai or as the provider's own JSON.
    /// `fn_arguments` is the arguments as JSON; genai leaves it a string
    /// when a streamed call's arguments do not parse, and that string is
    /// read as the arguments' text.
    fn parse(value: &Value) -> Result<Vec<ToolCall>, DispatchError> {
        const SHAPE: Shape = Shape {
            provider: "genai",
            list: "content",
        };
        const AT: &str = " (ToolCall)";
        let call = |i: usize, call: &Value| {
            Ok(ToolCall {
                id: Some(SHAPE.required(i, AT, call, "call_id")?.to_owned()),
                name: SHAPE.required(i, AT, call, "fn_name")?.to_owned(),
                arguments: match call.get("fn_arguments") {
                    Some(Value::String(text)) => Arguments::Text(text.clone()),
                    other => Arguments::Json(other.cloned().unwrap_or(Value::Null)),
                },
            })
        };
        if value.get("fn_name").is_some() {
            return Ok(vec![call(0, value)?]);
        }
        SHAPE
            .items(SHAPE.list_in(value)?)?
            .iter()
            .enumerate()
            .filter_map(|(i, item)| {
                if let Some(part) = item.get("ToolCall") {
                    return Some(call(i, part));
                }
                if item.get("fn_name").is_some() {
                    return Some(call(i, item));
                }
                match item.as_object() {
                    // Another content part (`Text`, `Binary`, `ToolResponse`,
                    // `ThoughtSignature`, …): one key naming its kind.
                    Some(part) if part.len() == 1 => None,
                    // Not skipped: an item of no known kind could be a call.
                    _ => Some(Err(
                        SHAPE.item_error(i, " is neither a content part nor a ToolCall")
                    )),
                }
            })
            .collect()
    }

    /// genai `Tool`s, `{"name", "description", "schema"}`: what
    /// `Tool::new(name).with_description(…).with_schema(…)` holds, and
    /// what `serde_json::from_value::<Vec<genai::chat::Tool>>` reads (genai
    /// 0.4 to 0.7) for `ChatRequest::with_tools`.
    ///
    /// ```
    /// use idem_runtime::provider::{Genai, Provider};
    /// use idem_runtime::registry::Registry;
    ///
    /// let registry: Registry = Registry::new();
    /// assert_eq!(Genai::tools(&registry), serde_json::json!([]));
    /// ```
    fn tools<S: 'static>(registry: &Registry<S>) -> Value {
        super::definitions(registry, |spec, schema| {
            Value::Object(super::described(spec, "schema", schema))
        })
    }

    /// A genai `ToolResponse` (`{"call_id", "fn_name", "content"}`)
    /// answering one call, to deserialize with `serde_json::from_value`
    /// into `genai::chat::ToolResponse` (see [`reply`](Provider::reply)).
    ///
    /// ```
    /// use idem_runtime::dispatch::ToolResult;
    /// use idem_runtime::error::IdemError;
    /// use idem_runtime::provider::{Genai, Provider};
    ///
    /// let refused = ToolResult {
    ///     call_id: Some("toolu_01A09q90qw90lq917835lq9".into()),
    ///     tool: "send_emial".into(),
    ///     result: Err(IdemError::UnknownTool { name: "send_emial".into(), suggestion: None }),
    /// };
    /// let response = Genai::result(&refused);
    /// assert_eq!(response["call_id"], "toolu_01A09q90qw90lq917835lq9");
    /// assert_eq!(response["fn_name"], "send_emial");
    /// assert!(response["content"].as_str().unwrap().contains("unknown_tool"));
    /// ```
    fn result(result: &ToolResult) -> Value {
        json!({
            "call_id": result.call_id,
            "fn_name": result.tool,
            "content": result.content().to_string(),
        })
    }

    /// The genai `ToolResponse`s for `results`, in call order:
    /// `serde_json::from_value::<Vec<genai::chat::ToolResponse>>` of them
    /// is what genai appends to the conversation.
    fn reply(results: &[ToolResult]) -> Vec<Value> {
        results.iter().map(Self::result).collect()
    }
}
