//! Each model provider's formats, in one module per provider: how its tool
//! calls are read, how tools are described to it and how results are
//! shaped for it.
//!
//! | Provider | Module | Calls: `parse` | Call id (the key) | Tools: `tools` | One result: `result` | All results |
//! |---|---|---|---|---|---|---|
//! | OpenAI Chat Completions | [`openai`] | the `tool_calls` of a response, an assistant message, or the array | `tool_calls[].id` | `{"type": "function", "function": {…}}` | a `role: "tool"` message | [`openai::messages`] |
//! | OpenAI Responses API | [`openai_responses`] | the `function_call` items of a response's `output`, or the array | `call_id` | flat `{"type": "function", "name", …, "strict": false}` | a `function_call_output` item | [`openai_responses::input`] |
//! | Anthropic Messages | [`anthropic`] | the `tool_use` blocks of a message's `content`, or the array | `tool_use.id` | `{"name", "description", "input_schema"}` | a `tool_result` block | [`anthropic::reply`]: one `role: "user"` message |
//! | [genai](https://crates.io/crates/genai) (serialized) | [`genai`] | the `ToolCall` parts of a `ChatResponse`, its parts, or its `ToolCall`s | `call_id` | genai's own `Tool` | a `ToolResponse` | [`genai::tool_responses`] |
//! | async-openai (feature `async-openai`) | `async_openai` | `ToolCall::from`, `ToolCall::try_from` of its typed chat-completions tool calls | `id` | | | |
//!
//! Every module's functions are free functions of the provider-neutral
//! types: a call is a [`ToolCall`](crate::dispatch::ToolCall), run by the
//! [`Dispatcher`](crate::dispatch::Dispatcher) whichever provider it came
//! from; the tools come from a [`Registry`]; a result is a
//! [`ToolResult`](crate::dispatch::ToolResult), whose
//! [`content`](crate::dispatch::ToolResult::content) (the output, or
//! `{"error": …}`) each provider's `result` sends as JSON text. A message
//! whose shape is wrong is a [`DispatchError`](crate::dispatch::DispatchError)
//! naming the provider, and none of its calls runs.
//!
//! A call is keyed by its provider id, so one call id is one key whichever
//! route it comes by: the provider's JSON, genai or async-openai, chat
//! completions or the Responses API.
//!
//! The methods most programs call forward here:
//! [`Dispatcher::openai`](crate::dispatch::Dispatcher::openai) parses with
//! [`openai::parse`], [`Registry::openai_tools`] is [`openai::tools`],
//! [`ToolResult::to_openai`](crate::dispatch::ToolResult::to_openai) is
//! [`openai::result`], `dispatch::openai_messages` is [`openai::messages`],
//! and likewise for the other providers.
//!
//! MCP is served by the `idem` crate's `mcp` module (feature `mcp`), with
//! rmcp's typed definitions; rig agents get idem tools from its `rig`
//! module (feature `rig`).
//!
//! ```
//! use idem_runtime::dispatch::ToolResult;
//! use idem_runtime::error::IdemError;
//! use idem_runtime::provider::{anthropic, openai};
//! use serde_json::json;
//!
//! let calls = openai::parse(&json!({"tool_calls": [{
//!     "id": "call_1", "type": "function",
//!     "function": {"name": "nope", "arguments": "{}"}
//! }]}))?;
//! let refused = ToolResult {
//!     call_id: calls[0].id.clone(),
//!     tool: calls[0].name.clone(),
//!     result: Err(IdemError::UnknownTool { name: "nope".into(), suggestion: None }),
//! };
//! assert_eq!(openai::messages(&[refused.clone()])[0]["tool_call_id"], "call_1");
//! assert_eq!(anthropic::result(&refused)["is_error"], true);
//! # Ok::<(), idem_runtime::dispatch::DispatchError>(())
//! ```

use serde_json::Value;

use crate::registry::Registry;
use crate::tool::ToolSpec;

pub mod anthropic;
#[cfg(feature = "async-openai")]
pub mod async_openai;
pub mod genai;
pub mod openai;
pub mod openai_responses;
mod shape;

/// One definition per tool of `registry`, in registration order: `shape`
/// of its spec and its input schema.
fn definitions<S: 'static>(
    registry: &Registry<S>,
    shape: impl Fn(&ToolSpec, Value) -> Value,
) -> Value {
    registry
        .iter()
        .map(|t| shape(&t.spec(), t.input_schema()))
        .collect()
}

// The registry's forwards to each provider's tool definitions live here,
// so that the registry does not depend on the providers (which read it).
impl<S: 'static> Registry<S> {
    /// Definitions for the OpenAI chat-completions `tools` parameter:
    /// [`crate::provider::openai::tools`].
    pub fn openai_tools(&self) -> Value {
        crate::provider::openai::tools(self)
    }

    /// Definitions for the OpenAI Responses API `tools` parameter:
    /// [`crate::provider::openai_responses::tools`].
    pub fn openai_responses_tools(&self) -> Value {
        crate::provider::openai_responses::tools(self)
    }

    /// Definitions for the Anthropic messages `tools` parameter:
    /// [`crate::provider::anthropic::tools`].
    pub fn anthropic_tools(&self) -> Value {
        crate::provider::anthropic::tools(self)
    }
}
