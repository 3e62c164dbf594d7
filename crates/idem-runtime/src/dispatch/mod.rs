//! Dispatch the tool calls a model returned, by name, and give back the
//! results for the model.
//!
//! What is here is the same for every provider: a [`ToolCall`], the
//! [`Dispatcher`] that checks and runs it, and its [`ToolResult`]. How each
//! provider writes calls and wants results (OpenAI chat completions and
//! Responses API, Anthropic, genai, async-openai's types) is in
//! [`provider`](crate::provider), one [`Provider`] type each:
//! [`Dispatcher::handle::<P>`](Dispatcher::handle) runs the calls of a
//! message in `P`'s shape, and `P::reply` answers them.
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
use crate::provider::Provider;
use crate::registry::Registry;
use crate::text::json_type;

pub(crate) mod call;
mod numbers;

#[cfg(feature = "async-openai")]
pub use crate::provider::async_openai::CustomToolCall;

/// The default limit on the size of one call's arguments: 64 KiB.
pub const DEFAULT_MAX_ARGUMENT_BYTES: usize = 64 * 1024;

pub use call::{Arguments, DispatchError, ToolCall, ToolResult};

/// The checks a call's arguments pass before anything runs, whichever way
/// the call came (a model's tool call through the [`Dispatcher`], a call
/// of a Python tool): no larger than `max_bytes` (as JSON text), valid
/// JSON, an object; and its numbers read as JSON Schema reads them — a
/// float with an integral value (`1000.0`, up to ±2^53) becomes that
/// integer, with the same key. Returns the arguments to run with.
///
/// The same bad input is the same typed error on every route:
/// [`IdemError::ArgumentsTooLarge`], or [`IdemError::InvalidArguments`]
/// naming `tool` and what is wrong (text that is not JSON, such as `NaN`
/// or a number beyond a double's range; arguments that are not an
/// object). The checks a tool's JSON Schema adds are the
/// [`Dispatcher`]'s, which knows the tool's schema.
///
/// ```
/// use idem_runtime::dispatch::{check_arguments, Arguments, DEFAULT_MAX_ARGUMENT_BYTES};
/// use idem_runtime::ErrorCode;
///
/// let args = check_arguments("send", Arguments::Text(r#"{"n": 1e3}"#.into()), DEFAULT_MAX_ARGUMENT_BYTES);
/// assert_eq!(args.unwrap(), serde_json::json!({"n": 1000}));
/// let nan = check_arguments("send", Arguments::Text(r#"{"n": NaN}"#.into()), DEFAULT_MAX_ARGUMENT_BYTES);
/// assert_eq!(nan.unwrap_err().code(), ErrorCode::InvalidArguments);
/// ```
pub fn check_arguments(
    tool: &str,
    arguments: Arguments,
    max_bytes: usize,
) -> Result<Value, IdemError> {
    let invalid = |detail: String| IdemError::InvalidArguments {
        tool: tool.to_owned(),
        detail,
    };
    let too_large = |len: usize| IdemError::ArgumentsTooLarge {
        tool: tool.to_owned(),
        len,
        max: max_bytes,
    };
    let mut args = match arguments {
        Arguments::Text(text) if text.len() > max_bytes => return Err(too_large(text.len())),
        // Models send "" for a call without arguments.
        Arguments::Text(text) if text.trim().is_empty() => json!({}),
        Arguments::Text(text) => serde_json::from_str(&text)
            .map_err(|e| invalid(format!("the arguments are not valid JSON ({e})")))?,
        Arguments::Json(value) => {
            let len = json_len(&value);
            if len > max_bytes {
                return Err(too_large(len));
            }
            value
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
    Ok(args)
}

/// The length of `value` written as compact JSON, without writing it.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => usize::MAX,
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
        let args = check_arguments(&call.name, call.arguments.clone(), self.max_argument_bytes)?;
        #[cfg(feature = "schema-validation")]
        if let Some(schema) = self.registry.argument_schema(&call.name) {
            schema
                .check(&args)
                .map_err(|e| IdemError::InvalidArguments {
                    tool: call.name.clone(),
                    detail: format!("the arguments do not match the tool's JSON Schema: {e}"),
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

    /// Run the tool calls of `message`, read by provider `P`
    /// ([`P::parse`](Provider::parse)); returns the results, in call
    /// order, for [`P::reply`](Provider::reply) (or
    /// [`P::result`](Provider::result) of each) to answer the model with.
    ///
    /// A message in another shape, or with a malformed call, is a
    /// [`DispatchError`] and none of its calls runs. Each call is keyed by
    /// its provider id, so the same call id is the same key whichever
    /// provider's shape it arrives in (chat completions or the Responses
    /// API, the provider's JSON or genai's).
    ///
    /// ```
    /// use idem_runtime::dispatch::Dispatcher;
    /// use idem_runtime::executor::{Executor, RunContext};
    /// use idem_runtime::provider::{OpenAi, Provider};
    /// use idem_runtime::registry::Registry;
    /// use idem_runtime::store::MemoryStore;
    /// use serde_json::json;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let dispatcher = Dispatcher::new(Executor::builder(MemoryStore::new()).build(), Registry::new());
    /// let message = json!({"role": "assistant", "tool_calls": [{
    ///     "id": "call_1", "type": "function",
    ///     "function": {"name": "send_emial", "arguments": "{}"}
    /// }]});
    /// let results = dispatcher.handle::<OpenAi>(&message, &RunContext::default()).await?;
    /// let reply = OpenAi::reply(&results);
    /// assert_eq!(reply[0]["tool_call_id"], "call_1");
    /// assert!(reply[0]["content"].as_str().unwrap().contains("unknown_tool"));
    /// # Ok::<(), idem_runtime::dispatch::DispatchError>(())
    /// # }).unwrap();
    /// ```
    pub async fn handle<P: Provider>(
        &self,
        message: &Value,
        run: &RunContext,
    ) -> Result<Vec<ToolResult>, DispatchError> {
        Ok(self.dispatch(P::parse(message)?, run).await)
    }
}
