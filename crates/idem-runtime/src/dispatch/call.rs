//! What a call and its result are, whatever the provider: the types every
//! [`Provider`](crate::provider::Provider) reads and writes (re-exported by
//! [`dispatch`](super)), kept apart from the [`Dispatcher`](super::Dispatcher)
//! so that the providers depend on them and not on the dispatcher.

use serde_json::{json, Value};

use crate::error::IdemError;
use crate::executor::{CallMeta, CallOutput};

/// One tool call as a model emitted it.
///
/// Read from a provider's JSON by its [`Provider::parse`]
/// ([`OpenAi`](crate::provider::OpenAi),
/// [`OpenAiResponses`](crate::provider::OpenAiResponses),
/// [`Anthropic`](crate::provider::Anthropic),
/// [`Genai`](crate::provider::Genai)); with the `async-openai` feature,
/// converted from async-openai's chat-completions tool calls
/// (`ToolCall::from`, `ToolCall::try_from`).
///
/// [`Provider::parse`]: crate::provider::Provider::parse
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's call id.
    pub id: Option<String>,
    /// The tool's name.
    pub name: String,
    /// The arguments, as sent.
    pub arguments: Arguments,
}

/// Arguments as sent by the provider.
#[derive(Debug, Clone, PartialEq)]
pub enum Arguments {
    /// A JSON text (OpenAI).
    Text(String),
    /// A JSON value (Anthropic).
    Json(Value),
}

/// The model's message does not have the expected shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    /// The message is not in the provider's shape.
    #[error("not an {provider} tool-call message: {detail}")]
    Malformed {
        /// `"OpenAI"`, `"Anthropic"`, `"OpenAI Responses"` or `"genai"`.
        provider: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// One item of the message's list of calls (`tool_calls`, `content`
    /// blocks, `output` items) is not in the provider's shape. None of the
    /// message's calls runs.
    #[error("not an {provider} tool-call message: {detail}")]
    MalformedItem {
        /// `"OpenAI"`, `"Anthropic"`, `"OpenAI Responses"` or `"genai"`.
        provider: &'static str,
        /// The item's position in its list, from 0.
        index: usize,
        /// What is wrong, naming the item, as in
        /// ``output[2] (function_call) has no string `call_id` ``.
        detail: String,
    },
}

/// The result of one call, ready to send back to the model in a
/// provider's shape: [`Provider::result`] of it, or [`Provider::reply`] of
/// a message's results.
///
/// [`Provider::result`]: crate::provider::Provider::result
/// [`Provider::reply`]: crate::provider::Provider::reply
#[derive(Debug, Clone)]
pub struct ToolResult {
    /// The provider's call id.
    pub call_id: Option<String>,
    /// The tool's name as called.
    pub tool: String,
    /// The output, or why there is none.
    pub result: Result<CallOutput<Value>, IdemError>,
}

impl ToolResult {
    /// Whether the call failed or was refused.
    pub fn is_error(&self) -> bool {
        self.result.is_err()
    }

    /// Whether the answer came from an earlier call's record (for tracing;
    /// the model sees the same content as the first time).
    pub fn deduplicated(&self) -> bool {
        match &self.result {
            Ok(c) => c.meta.deduplicated,
            Err(e) => e.is_deduplicated(),
        }
    }

    /// How the call was carried out, when it produced an output.
    pub fn meta(&self) -> Option<&CallMeta> {
        self.result.as_ref().ok().map(|c| &c.meta)
    }

    /// What the model reads: the output, or `{"error": {"code", "message"}}`;
    /// for a call an approver edited before it ran
    /// ([`CallMeta::edited`]), `{"edited": {"by", "arguments"}, "output"}`,
    /// so that the model learns that other arguments ran than it sent.
    pub fn content(&self) -> Value {
        match &self.result {
            Ok(CallOutput {
                output,
                meta: CallMeta {
                    edited: Some(edit), ..
                },
            }) => json!({
                "edited": { "by": edit.by, "arguments": edit.arguments },
                "output": output,
            }),
            Ok(called) => called.output.clone(),
            Err(e) => {
                let mut error = json!({ "code": e.code(), "message": e.to_string() });
                if let IdemError::Tool {
                    error: tool_error, ..
                } = e
                {
                    error["kind"] = json!(tool_error.kind());
                    if let Some(details) = tool_error.details() {
                        error["details"] = details.clone();
                    }
                }
                json!({ "error": error })
            }
        }
    }
}
