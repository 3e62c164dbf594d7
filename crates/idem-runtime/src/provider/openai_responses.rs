//! The [`OpenAiResponses`] provider.

use serde_json::{json, Value};

use super::shape::{arguments, Shape};
use super::Provider;
use crate::dispatch::call::{DispatchError, ToolCall, ToolResult};
use crate::registry::Registry;

/// The OpenAI Responses API: tool calls are the `function_call` items of a
/// response's `output` (`{ "call_id", "name", "arguments" }`, `arguments` a
/// JSON *string*), other items (`message`, `reasoning`, …) are skipped;
/// tools are flat `{"type": "function", "name", …}`; results are
/// `function_call_output` items for the next request's `input`.
///
/// ```
/// use idem_runtime::dispatch::DispatchError;
/// use idem_runtime::provider::{OpenAiResponses, Provider};
/// use serde_json::json;
///
/// let calls = OpenAiResponses::parse(&json!({
///     "object": "response",
///     "status": "completed",
///     "output": [
///         {"type": "reasoning", "id": "rs_68af1c2e", "summary": []},
///         {"type": "function_call", "id": "fc_68af1c2f", "call_id": "call_9f8e7d6c5b4a",
///          "name": "send_email", "arguments": "{\"to\":\"ada@example.com\"}",
///          "status": "completed"}
///     ]
/// }))?;
/// assert_eq!(calls.len(), 1);
/// assert_eq!(calls[0].id.as_deref(), Some("call_9f8e7d6c5b4a"));
/// assert_eq!(calls[0].name, "send_email");
///
/// let err = OpenAiResponses::parse(&json!({"output": [
///     {"type": "function_call", "name": "send_email", "arguments": "{}"}
/// ]}))
/// .unwrap_err();
/// assert!(matches!(err, DispatchError::MalformedItem { index: 0, .. }));
/// assert!(err.to_string().contains("output[0] (function_call) has no string `call_id`"));
/// # Ok::<(), DispatchError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct OpenAiResponses;

impl Provider for OpenAiResponses {
    /// The `function_call_output` items: the next request's `input`.
    type Reply = Vec<Value>;

    /// The tool calls (`function_call` items) of an OpenAI Responses API
    /// response, or of its `output` array.
    ///
    /// Each `function_call` item needs a string `call_id` (the call's key,
    /// as `tool_calls[].id` is in chat completions) and a string `name`;
    /// `arguments` is a JSON string. Other items (`message`, `reasoning`,
    /// built-in tool calls such as `web_search_call`) are skipped. An item
    /// without a string `type`, or a `function_call` without `call_id` or
    /// `name`, is a [`DispatchError::MalformedItem`] naming its index.
    fn parse(response: &Value) -> Result<Vec<ToolCall>, DispatchError> {
        const SHAPE: Shape = Shape {
            provider: "OpenAI Responses",
            list: "output",
        };
        const AT: &str = " (function_call)";
        let call = |i: usize, item: &Value| {
            Ok(ToolCall {
                id: Some(SHAPE.required(i, AT, item, "call_id")?.to_owned()),
                name: SHAPE.required(i, AT, item, "name")?.to_owned(),
                arguments: arguments(item.get("arguments")),
            })
        };
        SHAPE
            .items(SHAPE.list_in(response)?)?
            .iter()
            .enumerate()
            .filter_map(|(i, item)| match item.get("type").and_then(Value::as_str) {
                Some("function_call") => Some(call(i, item)),
                Some(_) => None,
                // Not skipped: an item of no known kind could be a call.
                None => Some(Err(SHAPE.item_error(i, " has no string `type`"))),
            })
            .collect()
    }

    /// Definitions for the Responses API `tools` parameter:
    /// `{"type": "function", "name", "description", "parameters", "strict"}`,
    /// flat where chat completions nest them under `function`.
    ///
    /// `strict` is `false`: strict mode wants every property required and
    /// `additionalProperties: false`, which a schema with optional fields
    /// or defaults does not say; the dispatcher checks the arguments
    /// itself.
    ///
    /// ```
    /// use idem_runtime::provider::{OpenAiResponses, Provider};
    /// use idem_runtime::registry::Registry;
    ///
    /// let registry: Registry = Registry::new();
    /// assert_eq!(OpenAiResponses::tools(&registry), serde_json::json!([]));
    /// ```
    fn tools<S: 'static>(registry: &Registry<S>) -> Value {
        super::definitions(registry, |spec, schema| {
            let mut tool = super::openai::function(spec, schema);
            tool.insert("type".into(), json!("function"));
            tool.insert("strict".into(), json!(false));
            Value::Object(tool)
        })
    }

    /// A `function_call_output` item answering one call, to send in the
    /// next request's `input` (see [`reply`](Provider::reply)): its
    /// `call_id`, and [`ToolResult::content`] as JSON text.
    ///
    /// ```
    /// use idem_runtime::dispatch::ToolResult;
    /// use idem_runtime::error::IdemError;
    /// use idem_runtime::provider::{OpenAiResponses, Provider};
    ///
    /// let refused = ToolResult {
    ///     call_id: Some("call_9f8e7d6c5b4a".into()),
    ///     tool: "send_emial".into(),
    ///     result: Err(IdemError::UnknownTool {
    ///         name: "send_emial".into(),
    ///         suggestion: Some("send_email".into()),
    ///     }),
    /// };
    /// let item = OpenAiResponses::result(&refused);
    /// assert_eq!(item["type"], "function_call_output");
    /// assert_eq!(item["call_id"], "call_9f8e7d6c5b4a");
    /// // `output` is JSON text, as the Responses API wants it.
    /// let output: serde_json::Value = serde_json::from_str(item["output"].as_str().unwrap())?;
    /// assert_eq!(output["error"]["code"], "unknown_tool");
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    fn result(result: &ToolResult) -> Value {
        json!({
            "type": "function_call_output",
            "call_id": result.call_id,
            "output": result.content().to_string(),
        })
    }

    /// The `function_call_output` items for `results`, in call order: the
    /// next request's `input`.
    ///
    /// With `previous_response_id` (the server kept the response) these
    /// items are the whole `input`. Without it (`store: false`, or a
    /// conversation the client keeps) the API needs the calls they answer
    /// too: send the previous response's `output` items first (its
    /// `reasoning` items included, for reasoning models), then these.
    ///
    /// ```
    /// use idem_runtime::dispatch::ToolResult;
    /// use idem_runtime::error::IdemError;
    /// use idem_runtime::provider::{OpenAiResponses, Provider};
    ///
    /// let result = |id: &str| ToolResult {
    ///     call_id: Some(id.into()),
    ///     tool: "nope".into(),
    ///     result: Err(IdemError::UnknownTool { name: "nope".into(), suggestion: None }),
    /// };
    /// let input = OpenAiResponses::reply(&[result("call_1"), result("call_2")]);
    /// assert_eq!(input.len(), 2);
    /// assert_eq!(input[1]["call_id"], "call_2");
    /// ```
    fn reply(results: &[ToolResult]) -> Vec<Value> {
        results.iter().map(Self::result).collect()
    }
}
