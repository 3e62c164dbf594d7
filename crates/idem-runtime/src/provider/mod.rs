//! Each model provider's formats, behind one trait: how its tool calls are
//! read, how tools are described to it and how results are shaped for it.
//!
//! A [`Provider`] is a zero-sized type, one per provider, whose associated
//! functions do those three things. Programs name it where the dispatcher
//! or the registry needs a format:
//! [`Dispatcher::handle::<OpenAi>`](crate::dispatch::Dispatcher::handle)
//! runs the calls of a message, [`Registry::tools_for::<OpenAi>`](Registry::tools_for)
//! describes the tools, and [`OpenAi::reply`](Provider::reply) answers.
//!
//! | Provider | Type | Calls: [`parse`](Provider::parse) | Call id (the key) | Tools: [`tools`](Provider::tools) | One result: [`result`](Provider::result) | All results: [`reply`](Provider::reply) |
//! |---|---|---|---|---|---|---|
//! | OpenAI Chat Completions | [`OpenAi`] | the `tool_calls` of a response, an assistant message, or the array | `tool_calls[].id` | `{"type": "function", "function": {…}}` | a `role: "tool"` message | the `role: "tool"` messages (`Vec<Value>`) |
//! | OpenAI Responses API | [`OpenAiResponses`] | the `function_call` items of a response's `output`, or the array | `call_id` | flat `{"type": "function", "name", …, "strict": false}` | a `function_call_output` item | the next request's `input` items (`Vec<Value>`) |
//! | Anthropic Messages | [`Anthropic`] | the `tool_use` blocks of a message's `content`, or the array | `tool_use.id` | `{"name", "description", "input_schema"}` | a `tool_result` block | one `role: "user"` message (`Value`) |
//! | [genai](https://crates.io/crates/genai) (serialized) | [`Genai`] | the `ToolCall` parts of a `ChatResponse`, its parts, or its `ToolCall`s | `call_id` | genai's `Tool`s: `{"name", "description", "schema"}` | a `ToolResponse` | the `ToolResponse`s (`Vec<Value>`) |
//! | async-openai (feature `async-openai`) | `async_openai` | `ToolCall::from`, `ToolCall::try_from` of its typed chat-completions tool calls | `id` | | | |
//!
//! Every provider reads and writes the provider-neutral types: a call is a
//! [`ToolCall`], run by the [`Dispatcher`](crate::dispatch::Dispatcher)
//! whichever provider it came from; the tools come from a [`Registry`]; a
//! result is a [`ToolResult`], whose
//! [`content`](ToolResult::content) (the output, or `{"error": …}`) each
//! provider's `result` sends as JSON text. A message whose shape is wrong
//! is a [`DispatchError`] naming the provider, and none of its calls runs.
//!
//! A call is keyed by its provider id, so one call id is one key whichever
//! route it comes by: the provider's JSON, genai or async-openai, chat
//! completions or the Responses API.
//!
//! async-openai's typed tool calls are not a provider's JSON: they convert
//! into [`ToolCall`] with `From`/`TryFrom` (module `async_openai`, feature
//! `async-openai`) and run with
//! [`Dispatcher::dispatch`](crate::dispatch::Dispatcher::dispatch).
//!
//! MCP is served by the `idem` crate's `mcp` module (feature `mcp`), with
//! rmcp's typed definitions; rig agents get idem tools from its `rig`
//! module (feature `rig`).
//!
//! ```
//! use idem_runtime::dispatch::ToolResult;
//! use idem_runtime::error::IdemError;
//! use idem_runtime::provider::{Anthropic, OpenAi, Provider};
//! use serde_json::json;
//!
//! let calls = OpenAi::parse(&json!({"tool_calls": [{
//!     "id": "call_1", "type": "function",
//!     "function": {"name": "nope", "arguments": "{}"}
//! }]}))?;
//! let refused = ToolResult {
//!     call_id: calls[0].id.clone(),
//!     tool: calls[0].name.clone(),
//!     result: Err(IdemError::UnknownTool { name: "nope".into(), suggestion: None }),
//! };
//! assert_eq!(OpenAi::reply(&[refused.clone()])[0]["tool_call_id"], "call_1");
//! assert_eq!(Anthropic::result(&refused)["is_error"], true);
//! # Ok::<(), idem_runtime::dispatch::DispatchError>(())
//! ```

use serde_json::{json, Map, Value};

use crate::dispatch::call::{DispatchError, ToolCall, ToolResult};
use crate::registry::Registry;
use crate::tool::ToolSpec;

mod anthropic;
#[cfg(feature = "async-openai")]
pub mod async_openai;
mod genai;
mod openai;
mod openai_responses;
mod shape;

pub use anthropic::Anthropic;
pub use genai::Genai;
pub use openai::OpenAi;
pub use openai_responses::OpenAiResponses;

/// One model provider's formats: how its messages carry tool calls, how it
/// wants tools described, and how it wants results back.
///
/// Implemented by a zero-sized type per provider ([`OpenAi`],
/// [`OpenAiResponses`], [`Anthropic`], [`Genai`]); its functions are
/// associated functions, called on the type (`OpenAi::parse(&message)`)
/// or through a type parameter
/// ([`Dispatcher::handle::<P>`](crate::dispatch::Dispatcher::handle),
/// [`Registry::tools_for::<P>`](Registry::tools_for)).
///
/// ```
/// use idem_runtime::dispatch::{DispatchError, ToolCall, ToolResult};
/// use idem_runtime::provider::{Anthropic, OpenAi, Provider};
/// use serde_json::{json, Value};
///
/// // Code written once for every provider.
/// fn calls_in<P: Provider>(message: &Value) -> Result<Vec<ToolCall>, DispatchError> {
///     P::parse(message)
/// }
///
/// let openai = json!({"tool_calls": [{"id": "call_1", "type": "function",
///     "function": {"name": "send_email", "arguments": "{}"}}]});
/// let anthropic = json!({"content": [{"type": "tool_use", "id": "toolu_1",
///     "name": "send_email", "input": {}}]});
/// assert_eq!(calls_in::<OpenAi>(&openai)?[0].name, "send_email");
/// assert_eq!(calls_in::<Anthropic>(&anthropic)?[0].name, "send_email");
/// # Ok::<(), DispatchError>(())
/// ```
pub trait Provider {
    /// What the results of one message are sent back as: the messages or
    /// items to append (`Vec<Value>`), or one message (`Value`).
    type Reply: Into<Value>;

    /// The tool calls of `message`, in its order. A message without tool
    /// calls has none; a message in another shape, or with a malformed
    /// call, is a [`DispatchError`] naming the provider.
    fn parse(message: &Value) -> Result<Vec<ToolCall>, DispatchError>;

    /// The definitions of the tools of `registry` for the provider's
    /// `tools` parameter, in registration order: a JSON array.
    fn tools<S: 'static>(registry: &Registry<S>) -> Value;

    /// The answer to one call: `result` in the provider's shape, with its
    /// call id and [`ToolResult::content`] as JSON text.
    fn result(result: &ToolResult) -> Value;

    /// The answer to every call of one message, `results` in call order:
    /// what to append to the conversation.
    fn reply(results: &[ToolResult]) -> Self::Reply;
}

/// A tool as most providers define one: `{"name", "description"}` and
/// its input schema under `schema_field`.
fn described(spec: &ToolSpec, schema_field: &str, schema: Value) -> Map<String, Value> {
    let mut tool = Map::new();
    tool.insert("name".into(), json!(spec.name));
    tool.insert("description".into(), json!(spec.description));
    tool.insert(schema_field.into(), schema);
    tool
}

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

// The registry's side lives here, so that the registry does not depend on
// the providers (which read it).
impl<S: 'static> Registry<S> {
    /// Definitions of the tools for provider `P`'s `tools` parameter, in
    /// registration order: [`P::tools`](Provider::tools) of this registry.
    ///
    /// ```
    /// use idem_runtime::provider::{Anthropic, OpenAiResponses};
    /// use idem_runtime::registry::Registry;
    ///
    /// let registry: Registry = Registry::new();
    /// assert_eq!(registry.tools_for::<Anthropic>(), serde_json::json!([]));
    /// assert_eq!(registry.tools_for::<OpenAiResponses>(), serde_json::json!([]));
    /// ```
    pub fn tools_for<P: Provider>(&self) -> Value {
        P::tools(self)
    }
}
