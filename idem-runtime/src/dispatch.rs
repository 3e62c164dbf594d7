//! Dispatch the tool calls a model returned, by name, and shape the results
//! for the model.
//!
//! Accepted shapes:
//!
//! * **OpenAI chat completions**: an assistant message with `tool_calls`
//!   (`[{ "id", "type": "function", "function": { "name", "arguments" } }]`,
//!   `arguments` being a JSON *string*), a whole response with `choices`, or
//!   the `tool_calls` array itself. Results are `role: "tool"` messages.
//! * **Anthropic messages**: a message with `content` blocks, or the blocks
//!   themselves; `tool_use` blocks (`{ "id", "name", "input" }`) are calls.
//!   Results are `tool_result` blocks in one `role: "user"` message.
//! * **OpenAI Responses API**: a response with `output` items, or the items
//!   themselves; `function_call` items (`{ "call_id", "name", "arguments" }`,
//!   `arguments` a JSON *string*) are calls, other items (`message`,
//!   `reasoning`, …) are skipped. Results are `function_call_output` items
//!   for the next request's `input`.
//!
//! A call is keyed by its provider id (`tool_calls[].id`, `tool_use.id`,
//! `call_id`), so one call id is one key whichever route it comes by (the
//! provider's JSON, genai, async-openai). A
//! message whose shape is wrong is a [`DispatchError`] and none of its
//! calls runs.
//!
//! Before anything runs, each call is checked: the tool must be registered,
//! the arguments no larger than the limit ([`DEFAULT_MAX_ARGUMENT_BYTES`]),
//! valid JSON, an object, valid against the tool's JSON Schema (feature
//! `schema-validation`: the rules only the schema states, such as ranges and
//! patterns) and deserializable into the tool's argument type (which
//! enforces the schema's structure). A failed check becomes an error result
//! the model can read; nothing runs.
//!
//! **Numbers** are read as JSON Schema reads them: a float with an integral
//! value (`1000.0`, `1e3`, up to ±2^53) is an integer, so an integer field
//! accepts it, with the same key as `1000` (RFC 8785 writes both `1000`).
//! `1000.5` stays a float and an integer field refuses it.
//!
//! **Ordering.** The calls of one response run concurrently by default
//! (models emit parallel calls when they are independent). Results come back
//! in the order of the calls, whatever order they finish in. Two calls of one
//! response that share a key are deduplicated like any duplicate: the second
//! waits for the first and gets its result. Use [`Dispatcher::sequential`]
//! to run them one after another in order.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::error::IdemError;
use crate::executor::{CallMeta, CallOutput, Executor, RunContext};
use crate::key::json_type;
use crate::registry::Registry;

#[cfg(feature = "async-openai")]
mod async_openai;
mod numbers;
mod parse;

#[cfg(feature = "async-openai")]
pub use async_openai::CustomToolCall;

pub use parse::{parse_anthropic, parse_genai, parse_openai, parse_openai_responses};

/// The default limit on the size of one call's arguments: 64 KiB.
pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 64 * 1024;

/// One tool call as a model emitted it.
///
/// Read from a provider's JSON by [`parse_openai`], [`parse_anthropic`],
/// [`parse_openai_responses`] and [`parse_genai`]; with the
/// `async-openai` feature, converted from async-openai's chat-completions
/// tool calls (`ToolCall::from`, `ToolCall::try_from`).
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

/// The result of one call, ready to send back to the model.
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

    /// What the model reads: the output, or `{"error": {"code", "message"}}`.
    pub fn content(&self) -> Value {
        match &self.result {
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

    /// An OpenAI `role: "tool"` message.
    pub fn to_openai(&self) -> Value {
        json!({
            "role": "tool",
            "tool_call_id": self.call_id,
            "content": self.content().to_string(),
        })
    }

    /// An OpenAI Responses API `function_call_output` item, to send in the
    /// next request's `input` (see [`openai_responses_input`]).
    ///
    /// ```
    /// use idem_runtime::dispatch::ToolResult;
    /// use idem_runtime::error::IdemError;
    ///
    /// let refused = ToolResult {
    ///     call_id: Some("call_9f8e7d6c5b4a".into()),
    ///     tool: "send_emial".into(),
    ///     result: Err(IdemError::UnknownTool {
    ///         name: "send_emial".into(),
    ///         suggestion: Some("send_email".into()),
    ///     }),
    /// };
    /// let item = refused.to_openai_response_item();
    /// assert_eq!(item["type"], "function_call_output");
    /// assert_eq!(item["call_id"], "call_9f8e7d6c5b4a");
    /// // `output` is JSON text, as the Responses API wants it.
    /// let output: serde_json::Value = serde_json::from_str(item["output"].as_str().unwrap())?;
    /// assert_eq!(output["error"]["code"], "unknown_tool");
    /// # Ok::<(), serde_json::Error>(())
    /// ```
    pub fn to_openai_response_item(&self) -> Value {
        json!({
            "type": "function_call_output",
            "call_id": self.call_id,
            "output": self.content().to_string(),
        })
    }

    /// A genai `ToolResponse` (`{"call_id", "fn_name", "content"}`), to
    /// deserialize with `serde_json::from_value` into
    /// `genai::chat::ToolResponse` (see [`genai_tool_responses`]).
    ///
    /// ```
    /// use idem_runtime::dispatch::ToolResult;
    /// use idem_runtime::error::IdemError;
    ///
    /// let refused = ToolResult {
    ///     call_id: Some("toolu_01A09q90qw90lq917835lq9".into()),
    ///     tool: "send_emial".into(),
    ///     result: Err(IdemError::UnknownTool { name: "send_emial".into(), suggestion: None }),
    /// };
    /// let response = refused.to_genai();
    /// assert_eq!(response["call_id"], "toolu_01A09q90qw90lq917835lq9");
    /// assert_eq!(response["fn_name"], "send_emial");
    /// assert!(response["content"].as_str().unwrap().contains("unknown_tool"));
    /// ```
    pub fn to_genai(&self) -> Value {
        json!({
            "call_id": self.call_id,
            "fn_name": self.tool,
            "content": self.content().to_string(),
        })
    }

    /// An Anthropic `tool_result` block.
    pub fn to_anthropic(&self) -> Value {
        let mut block = json!({
            "type": "tool_result",
            "tool_use_id": self.call_id,
            "content": self.content().to_string(),
        });
        if self.is_error() {
            block["is_error"] = Value::Bool(true);
        }
        block
    }
}

/// Runs model tool calls through an executor and a registry.
pub struct Dispatcher<S = ()> {
    executor: Executor<S>,
    registry: Arc<Registry<S>>,
    max_argument_bytes: usize,
    concurrent: bool,
}

impl<S> Clone for Dispatcher<S> {
    fn clone(&self) -> Self {
        Dispatcher {
            executor: self.executor.clone(),
            registry: self.registry.clone(),
            max_argument_bytes: self.max_argument_bytes,
            concurrent: self.concurrent,
        }
    }
}

impl<S: Send + Sync + 'static> Dispatcher<S> {
    /// Dispatch through `executor` to the tools of `registry`.
    pub fn new(executor: Executor<S>, registry: Registry<S>) -> Self {
        Dispatcher {
            executor,
            registry: Arc::new(registry),
            max_argument_bytes: DEFAULT_MAX_ARGUMENT_BYTES,
            concurrent: true,
        }
    }

    /// Refuse arguments larger than `bytes`.
    pub fn max_argument_bytes(mut self, bytes: usize) -> Self {
        self.max_argument_bytes = bytes;
        self
    }

    /// Run the calls of one response one after another, in order.
    pub fn sequential(mut self) -> Self {
        self.concurrent = false;
        self
    }

    /// The executor.
    pub fn executor(&self) -> &Executor<S> {
        &self.executor
    }

    /// The registry.
    pub fn registry(&self) -> &Registry<S> {
        &self.registry
    }

    /// Run one call.
    pub async fn dispatch_one(&self, call: ToolCall, run: &RunContext) -> ToolResult {
        let result = self.run(&call, run).await;
        ToolResult {
            call_id: call.id,
            tool: call.name,
            result,
        }
    }

    async fn run(&self, call: &ToolCall, run: &RunContext) -> Result<CallOutput<Value>, IdemError> {
        let Some(tool) = self.registry.get(&call.name) else {
            return Err(IdemError::UnknownTool {
                name: call.name.clone(),
                suggestion: self.registry.suggest(&call.name).map(str::to_owned),
            });
        };
        let invalid = |detail: String| IdemError::InvalidArguments {
            tool: call.name.clone(),
            detail,
        };
        let too_large = |len: usize| IdemError::ArgumentsTooLarge {
            tool: call.name.clone(),
            len,
            max: self.max_argument_bytes,
        };
        let mut args = match &call.arguments {
            Arguments::Text(text) if text.len() > self.max_argument_bytes => {
                return Err(too_large(text.len()))
            }
            // Models send "" for a call without arguments.
            Arguments::Text(text) if text.trim().is_empty() => json!({}),
            Arguments::Text(text) => serde_json::from_str(text)
                .map_err(|e| invalid(format!("the arguments are not valid JSON ({e})")))?,
            Arguments::Json(value) => {
                let len = serde_json::to_vec(value)
                    .map(|v| v.len())
                    .unwrap_or(usize::MAX);
                if len > self.max_argument_bytes {
                    return Err(too_large(len));
                }
                value.clone()
            }
        };
        if !args.is_object() {
            return Err(invalid(format!(
                "the arguments must be a JSON object, found {}",
                json_type(&args)
            )));
        }
        // `1000.0` is an integer to JSON Schema (and to the key): let an
        // integer field accept it too.
        numbers::integral_floats_as_integers(&mut args);
        #[cfg(feature = "schema-validation")]
        if let Some(schema) = self.registry.argument_schema(&call.name) {
            schema.check(&args).map_err(|e| {
                invalid(format!(
                    "the arguments do not match the tool's JSON Schema: {e}"
                ))
            })?;
        }
        tool.call_json(&self.executor, args, call.id.clone(), run.clone())
            .await
    }

    /// Run a batch of calls; results in the order of `calls`.
    pub async fn dispatch(&self, calls: Vec<ToolCall>, run: &RunContext) -> Vec<ToolResult> {
        if !self.concurrent || calls.len() <= 1 {
            let mut out = Vec::with_capacity(calls.len());
            for call in calls {
                out.push(self.dispatch_one(call, run).await);
            }
            return out;
        }
        let mut tasks = tokio::task::JoinSet::new();
        let n = calls.len();
        for (i, call) in calls.into_iter().enumerate() {
            let (this, run) = (self.clone(), run.clone());
            tasks.spawn(async move { (i, this.dispatch_one(call, &run).await) });
        }
        let mut slots: Vec<Option<ToolResult>> = (0..n).map(|_| None).collect();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((i, result)) => slots[i] = Some(result),
                // A tool panicked: its record stays in flight and the lease
                // decides, exactly as if the process had crashed.
                Err(e) => std::panic::resume_unwind(e.into_panic()),
            }
        }
        slots
            .into_iter()
            .map(|r| r.expect("every call answered"))
            .collect()
    }

    /// Run the tool calls of an OpenAI message; returns the `role: "tool"`
    /// messages to append to the conversation, with their results.
    pub async fn openai(
        &self,
        message: &Value,
        run: &RunContext,
    ) -> Result<Vec<ToolResult>, DispatchError> {
        let calls = parse_openai(message)?;
        Ok(self.dispatch(calls, run).await)
    }

    /// Run the tool calls of an Anthropic message; returns the results
    /// (see [`anthropic_reply`] for the `role: "user"` message).
    pub async fn anthropic(
        &self,
        message: &Value,
        run: &RunContext,
    ) -> Result<Vec<ToolResult>, DispatchError> {
        let calls = parse_anthropic(message)?;
        Ok(self.dispatch(calls, run).await)
    }

    /// Run the tool calls of a genai response, given as genai serializes
    /// it (see [`parse_genai`]); returns the results (see
    /// [`genai_tool_responses`] for genai's `ToolResponse`s). A call is
    /// keyed by its `call_id`, the provider's id: the same key as the
    /// provider's own JSON gets through [`Dispatcher::openai`] or
    /// [`Dispatcher::anthropic`].
    pub async fn genai(
        &self,
        response: &Value,
        run: &RunContext,
    ) -> Result<Vec<ToolResult>, DispatchError> {
        let calls = parse_genai(response)?;
        Ok(self.dispatch(calls, run).await)
    }

    /// Run the `function_call` items of an OpenAI Responses API response;
    /// returns the results (see [`openai_responses_input`] for the
    /// `function_call_output` items of the next request). Each call is
    /// keyed by its `call_id`, exactly as a chat-completions call is by its
    /// `tool_calls[].id`: the same call id is the same key on both routes.
    pub async fn openai_responses(
        &self,
        response: &Value,
        run: &RunContext,
    ) -> Result<Vec<ToolResult>, DispatchError> {
        let calls = parse_openai_responses(response)?;
        Ok(self.dispatch(calls, run).await)
    }
}

/// The genai `ToolResponse`s for `results`, in call order:
/// `serde_json::from_value::<Vec<genai::chat::ToolResponse>>` of them is
/// what genai appends to the conversation.
pub fn genai_tool_responses(results: &[ToolResult]) -> Vec<Value> {
    results.iter().map(ToolResult::to_genai).collect()
}

/// The OpenAI messages for `results`.
pub fn openai_messages(results: &[ToolResult]) -> Vec<Value> {
    results.iter().map(ToolResult::to_openai).collect()
}

/// The OpenAI Responses API `function_call_output` items for `results`, in
/// call order: the next request's `input`.
///
/// With `previous_response_id` (the server kept the response) these items
/// are the whole `input`. Without it (`store: false`, or a conversation
/// the client keeps) the API needs the calls they answer too: send the
/// previous response's `output` items first (its `reasoning` items
/// included, for reasoning models), then these.
///
/// ```
/// use idem_runtime::dispatch::{openai_responses_input, ToolResult};
/// use idem_runtime::error::IdemError;
///
/// let result = |id: &str| ToolResult {
///     call_id: Some(id.into()),
///     tool: "nope".into(),
///     result: Err(IdemError::UnknownTool { name: "nope".into(), suggestion: None }),
/// };
/// let input = openai_responses_input(&[result("call_1"), result("call_2")]);
/// assert_eq!(input.len(), 2);
/// assert_eq!(input[1]["call_id"], "call_2");
/// ```
pub fn openai_responses_input(results: &[ToolResult]) -> Vec<Value> {
    results
        .iter()
        .map(ToolResult::to_openai_response_item)
        .collect()
}

/// The Anthropic `role: "user"` message carrying `results`.
pub fn anthropic_reply(results: &[ToolResult]) -> Value {
    json!({
        "role": "user",
        "content": results.iter().map(ToolResult::to_anthropic).collect::<Vec<_>>(),
    })
}
