//! Reading the tool calls out of each provider's message shape.
//!
//! The three shapes differ in where the calls are and what they are
//! called, not in what a call is: a name, an id and arguments. What they
//! share (a list that must be an array, an item that must have a string
//! field, arguments sent as text or as JSON) is written once, in
//! [`Shape`].

use serde_json::Value;

use super::{Arguments, DispatchError, ToolCall};
use crate::key::json_type;

/// One provider's shape: its name in errors and the list holding its calls.
struct Shape {
    /// `"OpenAI"`, `"Anthropic"`, `"OpenAI Responses"`.
    provider: &'static str,
    /// The list the calls are items of: `tool_calls`, `content`, `output`.
    list: &'static str,
}

impl Shape {
    /// The whole message is wrong.
    fn malformed(&self, detail: impl Into<String>) -> DispatchError {
        DispatchError::Malformed {
            provider: self.provider,
            detail: detail.into(),
        }
    }

    /// Item `index` of the list is wrong; `what` follows `list[index]`.
    fn item_error(&self, index: usize, what: impl std::fmt::Display) -> DispatchError {
        DispatchError::MalformedItem {
            provider: self.provider,
            index,
            detail: format!("{}[{index}]{what}", self.list),
        }
    }

    /// The list in `message`: `message` itself when it is an array, else
    /// its field named after the list, which must be there.
    fn list_in<'v>(&self, message: &'v Value) -> Result<&'v Value, DispatchError> {
        if message.is_array() {
            return Ok(message);
        }
        message
            .get(self.list)
            .ok_or_else(|| self.malformed(format!("no `{}`", self.list)))
    }

    /// The list itself, which must be an array.
    fn items<'v>(&self, list: &'v Value) -> Result<&'v [Value], DispatchError> {
        list.as_array().map(Vec::as_slice).ok_or_else(|| {
            self.malformed(format!(
                "`{}` is {}, not an array",
                self.list,
                json_type(list)
            ))
        })
    }

    /// The string `field` of `object`, part of item `index`; `at` names
    /// the part (`".function"`, `" (tool_use)"`) in the error.
    fn required<'v>(
        &self,
        index: usize,
        at: &str,
        object: &'v Value,
        field: &str,
    ) -> Result<&'v str, DispatchError> {
        object
            .get(field)
            .and_then(Value::as_str)
            .ok_or_else(|| self.item_error(index, format_args!("{at} has no string `{field}`")))
    }
}

/// The optional string `field` of `object`.
fn optional(object: &Value, field: &str) -> Option<String> {
    object.get(field).and_then(Value::as_str).map(str::to_owned)
}

/// Arguments sent as a JSON string (OpenAI), or, from compatible servers,
/// as the JSON itself; absent arguments are the empty text (no arguments).
fn arguments(value: Option<&Value>) -> Arguments {
    match value {
        Some(Value::String(text)) => Arguments::Text(text.clone()),
        Some(other) => Arguments::Json(other.clone()),
        None => Arguments::Text(String::new()),
    }
}

/// The tool calls of an OpenAI chat-completions message: a whole response
/// (`choices[0].message.tool_calls`), an assistant message (`tool_calls`)
/// or the `tool_calls` array itself.
///
/// ```
/// use idem_runtime::dispatch::{parse_openai, Arguments};
/// use serde_json::json;
///
/// let calls = parse_openai(&json!({
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
pub fn parse_openai(message: &Value) -> Result<Vec<ToolCall>, DispatchError> {
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

/// The tool calls (`tool_use` blocks) of an Anthropic message, or of its
/// `content` blocks.
///
/// ```
/// use idem_runtime::dispatch::{parse_anthropic, Arguments};
/// use serde_json::json;
///
/// let calls = parse_anthropic(&json!({
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
pub fn parse_anthropic(message: &Value) -> Result<Vec<ToolCall>, DispatchError> {
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

/// The tool calls (`function_call` items) of an OpenAI Responses API
/// response, or of its `output` array.
///
/// Each `function_call` item needs a string `call_id` (the call's key, as
/// `tool_calls[].id` is in chat completions) and a string `name`;
/// `arguments` is a JSON string. Other items (`message`, `reasoning`,
/// built-in tool calls such as `web_search_call`) are skipped. An item
/// without a string `type`, or a `function_call` without `call_id` or
/// `name`, is a [`DispatchError::MalformedItem`] naming its index.
///
/// ```
/// use idem_runtime::dispatch::{parse_openai_responses, DispatchError};
/// use serde_json::json;
///
/// let calls = parse_openai_responses(&json!({
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
/// let err = parse_openai_responses(&json!({"output": [
///     {"type": "function_call", "name": "send_email", "arguments": "{}"}
/// ]}))
/// .unwrap_err();
/// assert!(matches!(err, DispatchError::MalformedItem { index: 0, .. }));
/// assert!(err.to_string().contains("output[0] (function_call) has no string `call_id`"));
/// # Ok::<(), DispatchError>(())
/// ```
pub fn parse_openai_responses(response: &Value) -> Result<Vec<ToolCall>, DispatchError> {
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

/// The tool calls of a [genai](https://crates.io/crates/genai) response, as
/// genai (0.4 to 0.7) serializes its types: a `ChatResponse` or
/// `ChatMessage` (calls are the `{"ToolCall": {…}}` parts of its
/// `content`), its content parts themselves, or its tool calls
/// (`Vec<ToolCall>`, from `ChatResponse::tool_calls`), or one `ToolCall`.
///
/// genai cannot be built without an HTTP client (reqwest is not optional
/// in any release), so idem does not depend on it: serialize genai's value
/// with `serde_json::to_value` and parse that. A call is keyed by its
/// `call_id`, which genai takes from the provider (`tool_calls[].id`,
/// `tool_use.id`), so a call has the same key whether it arrives through
/// genai or as the provider's own JSON. `fn_arguments` is the arguments as
/// JSON; genai leaves it a string when a streamed call's arguments do not
/// parse, and that string is read as the arguments' text.
///
/// ```
/// use idem_runtime::dispatch::{parse_genai, Arguments};
/// use serde_json::json;
///
/// // `serde_json::to_value(&chat_response)?` of a genai `ChatResponse`:
/// let calls = parse_genai(&json!({
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
pub fn parse_genai(value: &Value) -> Result<Vec<ToolCall>, DispatchError> {
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
