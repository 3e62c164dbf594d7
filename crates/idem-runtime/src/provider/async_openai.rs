//! async-openai's chat-completions tool calls as [`ToolCall`]s (feature
//! `async-openai`).
//!
//! async-openai deserializes the provider's `tool_calls` into
//! [`ChatCompletionMessageToolCalls`]; each function call converts into a
//! [`ToolCall`] keyed by its `id`, exactly as [`OpenAi::parse`] reads the
//! same call from the provider's JSON, so both routes give one key.
//!
//! These are conversions of typed values, not a [`Provider`] of JSON
//! messages: run the converted calls with
//! [`Dispatcher::dispatch`](crate::dispatch::Dispatcher::dispatch), and
//! answer them as [`OpenAi`] does.
//!
//! [`OpenAi::parse`]: super::Provider::parse
//! [`OpenAi`]: super::OpenAi
//! [`Provider`]: super::Provider

use async_openai::types::chat::{ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls};

use crate::dispatch::call::{Arguments, ToolCall};

/// A custom tool call (free-text input, no JSON arguments): idem tools
/// take JSON arguments described by a JSON Schema, so it is not a call of
/// an idem tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("call `{id}` of `{name}` is a custom tool call with free-text input; idem tools are function tools with JSON arguments")]
pub struct CustomToolCall {
    /// The provider's call id.
    pub id: String,
    /// The custom tool's name.
    pub name: String,
}

/// A function call, keyed by its `id`; the arguments are the text the
/// model wrote, checked when the call is dispatched.
///
/// ```
/// use async_openai::types::chat::ChatCompletionMessageToolCall;
/// use idem_runtime::dispatch::{Arguments, ToolCall};
///
/// let typed: ChatCompletionMessageToolCall = serde_json::from_value(serde_json::json!({
///     "id": "call_9f8e7d6c5b4a",
///     "type": "function",
///     "function": {"name": "send_email", "arguments": "{\"to\":\"ada@example.com\"}"}
/// }))?;
/// let call = ToolCall::from(typed);
/// assert_eq!(call.id.as_deref(), Some("call_9f8e7d6c5b4a"));
/// assert_eq!(call.arguments, Arguments::Text("{\"to\":\"ada@example.com\"}".into()));
/// # Ok::<(), serde_json::Error>(())
/// ```
impl From<ChatCompletionMessageToolCall> for ToolCall {
    fn from(call: ChatCompletionMessageToolCall) -> Self {
        ToolCall {
            id: Some(call.id),
            name: call.function.name,
            arguments: Arguments::Text(call.function.arguments),
        }
    }
}

/// One item of an assistant message's `tool_calls`: a function call
/// converts as above; a custom tool call is a [`CustomToolCall`] error.
///
/// ```
/// use async_openai::types::chat::CreateChatCompletionResponse;
/// use idem_runtime::dispatch::ToolCall;
///
/// # let json = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1764460800,"model":"gpt-4.1",
/// #   "choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
/// #   "tool_calls":[{"id":"call_9f8e7d6c5b4a","type":"function",
/// #   "function":{"name":"send_email","arguments":"{}"}}]}}]}"#;
/// let response: CreateChatCompletionResponse = serde_json::from_str(json)?;
/// let calls = response.choices[0]
///     .message
///     .tool_calls
///     .clone()
///     .unwrap_or_default()
///     .into_iter()
///     .map(ToolCall::try_from)
///     .collect::<Result<Vec<_>, _>>()?;
/// assert_eq!(calls[0].name, "send_email");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl TryFrom<ChatCompletionMessageToolCalls> for ToolCall {
    type Error = CustomToolCall;

    fn try_from(call: ChatCompletionMessageToolCalls) -> Result<Self, CustomToolCall> {
        match call {
            ChatCompletionMessageToolCalls::Function(call) => Ok(call.into()),
            ChatCompletionMessageToolCalls::Custom(call) => Err(CustomToolCall {
                id: call.id,
                name: call.custom_tool.name,
            }),
        }
    }
}
