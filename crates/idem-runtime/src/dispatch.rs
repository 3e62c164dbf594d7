//! Dispatch the tool calls a model returned, by name, and give back the
//! results for the model.
//!
//! What is here is the same for every provider: a [`ToolCall`], the
//! [`Dispatcher`] that checks and runs it, and its [`ToolResult`]. How each
//! provider writes calls and wants results (OpenAI chat completions and
//! Responses API, Anthropic, genai, async-openai's types) is in
//! [`provider`](crate::provider); the provider methods here
//! ([`Dispatcher::openai`], [`ToolResult::to_openai`], …) and free
//! functions ([`parse_openai`], [`openai_messages`], …) forward there.
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
use crate::executor::{CallOutput, Executor, RunContext};
use crate::key::json_type;
use crate::provider::{anthropic, genai, openai, openai_responses};
use crate::registry::Registry;

pub(crate) mod call;
mod numbers;

#[cfg(feature = "async-openai")]
pub use crate::provider::async_openai::CustomToolCall;

/// The default limit on the size of one call's arguments: 64 KiB.
pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 64 * 1024;

pub use call::{Arguments, DispatchError, ToolCall, ToolResult};

/// The forwards to each provider's result shape.
impl ToolResult {
    /// An OpenAI `role: "tool"` message: [`openai::result`].
    pub fn to_openai(&self) -> Value {
        openai::result(self)
    }

    /// An OpenAI Responses API `function_call_output` item, to send in the
    /// next request's `input`: [`openai_responses::result`].
    pub fn to_openai_response_item(&self) -> Value {
        openai_responses::result(self)
    }

    /// A genai `ToolResponse` (`{"call_id", "fn_name", "content"}`):
    /// [`genai::result`].
    pub fn to_genai(&self) -> Value {
        genai::result(self)
    }

    /// An Anthropic `tool_result` block: [`anthropic::result`].
    pub fn to_anthropic(&self) -> Value {
        anthropic::result(self)
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
            // In the caller's span: each call's span is its child, as in
            // a sequential batch.
            tasks.spawn(tracing::Instrument::in_current_span(async move {
                (i, this.dispatch_one(call, &run).await)
            }));
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

    /// Run the tool calls of an OpenAI chat-completions message, read by
    /// [`openai::parse`]; returns the results (see [`openai::messages`]
    /// for the `role: "tool"` messages to append to the conversation).
    pub async fn openai(
        &self,
        message: &Value,
        run: &RunContext,
    ) -> Result<Vec<ToolResult>, DispatchError> {
        Ok(self.dispatch(openai::parse(message)?, run).await)
    }

    /// Run the tool calls of an Anthropic message, read by
    /// [`anthropic::parse`]; returns the results (see [`anthropic::reply`]
    /// for the `role: "user"` message).
    pub async fn anthropic(
        &self,
        message: &Value,
        run: &RunContext,
    ) -> Result<Vec<ToolResult>, DispatchError> {
        Ok(self.dispatch(anthropic::parse(message)?, run).await)
    }

    /// Run the tool calls of a genai response, given as genai serializes
    /// it and read by [`genai::parse`]; returns the results (see
    /// [`genai::tool_responses`] for genai's `ToolResponse`s). A call is
    /// keyed by its `call_id`, the provider's id: the same key as the
    /// provider's own JSON gets through [`Dispatcher::openai`] or
    /// [`Dispatcher::anthropic`].
    pub async fn genai(
        &self,
        response: &Value,
        run: &RunContext,
    ) -> Result<Vec<ToolResult>, DispatchError> {
        Ok(self.dispatch(genai::parse(response)?, run).await)
    }

    /// Run the `function_call` items of an OpenAI Responses API response,
    /// read by [`openai_responses::parse`]; returns the results (see
    /// [`openai_responses::input`] for the `function_call_output` items of
    /// the next request). Each call is keyed by its `call_id`, exactly as a
    /// chat-completions call is by its `tool_calls[].id`: the same call id
    /// is the same key on both routes.
    pub async fn openai_responses(
        &self,
        response: &Value,
        run: &RunContext,
    ) -> Result<Vec<ToolResult>, DispatchError> {
        Ok(self.dispatch(openai_responses::parse(response)?, run).await)
    }
}

// The provider functions under the names they had here.

/// The tool calls of an OpenAI chat-completions message:
/// [`openai::parse`].
pub fn parse_openai(message: &Value) -> Result<Vec<ToolCall>, DispatchError> {
    openai::parse(message)
}

/// The tool calls of an Anthropic message: [`anthropic::parse`].
pub fn parse_anthropic(message: &Value) -> Result<Vec<ToolCall>, DispatchError> {
    anthropic::parse(message)
}

/// The tool calls of an OpenAI Responses API response:
/// [`openai_responses::parse`].
pub fn parse_openai_responses(response: &Value) -> Result<Vec<ToolCall>, DispatchError> {
    openai_responses::parse(response)
}

/// The tool calls of a genai response, as genai serializes it:
/// [`genai::parse`].
pub fn parse_genai(value: &Value) -> Result<Vec<ToolCall>, DispatchError> {
    genai::parse(value)
}

/// The OpenAI `role: "tool"` messages for `results`: [`openai::messages`].
pub fn openai_messages(results: &[ToolResult]) -> Vec<Value> {
    openai::messages(results)
}

/// The OpenAI Responses API `function_call_output` items for `results`,
/// the next request's `input`: [`openai_responses::input`].
pub fn openai_responses_input(results: &[ToolResult]) -> Vec<Value> {
    openai_responses::input(results)
}

/// The Anthropic `role: "user"` message carrying `results`:
/// [`anthropic::reply`].
pub fn anthropic_reply(results: &[ToolResult]) -> Value {
    anthropic::reply(results)
}

/// The genai `ToolResponse`s for `results`: [`genai::tool_responses`].
pub fn genai_tool_responses(results: &[ToolResult]) -> Vec<Value> {
    genai::tool_responses(results)
}
