//! idem tools as [rig](https://crates.io/crates/rig-core) tools (feature
//! `rig`, rig-core 0.44).
//!
//! [`tools`] turns every tool of a [`Dispatcher`]'s registry into a rig
//! [`DynamicTool`] for `AgentBuilder::dynamic_tools`; [`IdemTool`] turns one
//! tool into a typed rig [`Tool`](rig_core::tool::Tool) for
//! `AgentBuilder::tool`. Either way a call goes through the dispatcher
//! exactly as model output does: the arguments are checked, the key is
//! claimed, an `irreversible` tool asks the executor's approval policy, and
//! the outcome is recorded. rig sees the tool's name, description and JSON
//! Schema (without `$schema`). rig 0.44's tool definition has no field for
//! the annotations a class implies (rig 0.46 adds `ToolAnnotations`, but
//! needs Rust 1.97.1).
//!
//! # Keys: what rig gives a tool
//!
//! rig 0.44 does not hand a tool the provider's call id (its hooks see it,
//! the tool does not), so a call cannot be keyed by it. It is keyed by the
//! agent run instead: the application puts an [`IdemRun`] in the
//! [`ToolContext`] of the run (`agent.prompt(…).tool_context(…)`), and a
//! call's key is derived from (run id, step, tool, canonical arguments), as
//! `docs/keys.md` says. What that means:
//!
//! * the model asking for the same call again in the run (in the same turn
//!   or a later one, with a new call id) gets the recorded result: one
//!   effect;
//! * the run replayed with the same run id (after a crash, from a
//!   checkpoint) performs no effect twice;
//! * two calls with the same arguments *meant* as two effects in one run
//!   (the same reminder sent twice) are one effect, unless each has its own
//!   step (a new run, or a new [`IdemRun::step`]) or the tool has a natural
//!   or custom key, which is used whatever the run;
//! * without an [`IdemRun`], a write with the default key derivation is
//!   refused (nothing runs) with an error that says to add one; reads, and
//!   tools with natural or custom keys, need none.
//!
//! # Errors
//!
//! A call that produced no output is a rig [`ToolExecutionError`] whose
//! model output is what every idem route sends the model
//! (`{"error": {"code", "message", …}}`), whose `code` is idem's
//! [`ErrorCode`](crate::ErrorCode), and whose `retryable` is idem's
//! verdict on calling again (same run, so same key):
//!
//! | idem error | rig kind | retryable |
//! |---|---|---|
//! | the tool failed, transient | `provider` | yes: known not applied, the key was released |
//! | the tool failed, ambiguous | `provider` | only for `read` and `idempotent_write` (the others' outcome is unknown) |
//! | the tool failed, permanent, or any recorded failure | `other` | no: the same key returns the same failure |
//! | in flight, store unreachable, superseded | `other` | yes: later, the call gets the outcome |
//! | invalid or too large arguments | `invalid_args` | no |
//! | unknown tool | `not_found` | no |
//! | approval denied or required | `permission_denied` | no |
//! | anything else (key reused, outcome unknown, no key, a store that is full, read-only or corrupt, …) | `other` | no |
//!
//! How the call went (key, deduplicated, attempts) is published as
//! host-only result metadata, a [`CallReport`], which rig's hooks can read.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//!
//! use idem::prelude::*;
//! use idem::rig::{CallReport, IdemRun};
//! use rig_core::tool::ToolContext;
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//!
//! #[derive(Clone, Serialize, Deserialize, schemars::JsonSchema)]
//! struct SendEmail {
//!     to: String,
//! }
//!
//! /// Send an email to a customer.
//! #[tool(class = "idempotent_write")]
//! async fn send_email(
//!     args: SendEmail,
//!     State(sent): State<Arc<AtomicUsize>>,
//! ) -> Result<String, ToolError> {
//!     sent.fetch_add(1, Ordering::SeqCst);
//!     Ok(format!("sent to {}", args.to))
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let sent = Arc::new(AtomicUsize::new(0));
//! let executor = Executor::builder(MemoryStore::new()).state(sent.clone()).build();
//! let dispatcher = Dispatcher::new(executor, tools![send_email]);
//!
//! // What `AgentBuilder::dynamic_tools` takes.
//! let tools = idem::rig::tools(&dispatcher);
//! assert_eq!(tools[0].definition().description, "Send an email to a customer.");
//!
//! // What the application gives the run: `agent.prompt(…).tool_context(context)`.
//! let mut context = ToolContext::new();
//! context.insert(IdemRun::new("run-42"))?;
//!
//! // The model asks twice: one email.
//! for _ in 0..2 {
//!     let output = tools[0].execute_with(&mut context, json!({"to": "ada@example.com"})).await?;
//!     assert_eq!(output.as_json(), Some(&json!("sent to ada@example.com")));
//! }
//! assert_eq!(sent.load(Ordering::SeqCst), 1);
//! let report = context.result::<CallReport>()?.expect("published");
//! assert!(report.deduplicated);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::marker::PhantomData;

use rig_core::message::ToolName;
use rig_core::tool::{
    ContextValue, DynamicTool, ToolContext, ToolErrorKind, ToolExecutionError, ToolOutput,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use idem_runtime::dispatch::{Arguments, ToolCall, ToolResult};
use idem_runtime::{
    ClassKind, Dispatcher, ErrorKind, Executor, IdemError, Namespace, RunContext, StoreError,
};

/// The agent run a rig tool call belongs to: the source of its key.
///
/// Put one in the [`ToolContext`] of each agent run (rig clones it into
/// every tool call of the run); see the [module docs](self) for what a
/// run-scoped key means.
///
/// ```
/// use idem::rig::IdemRun;
/// use rig_core::tool::ToolContext;
///
/// let mut context = ToolContext::new();
/// context.insert(IdemRun::new("run-42").step(3))?;
/// assert_eq!(context.require::<IdemRun>()?.step, 3);
/// # Ok::<(), rig_core::tool::ToolContextError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct IdemRun {
    /// The agent run (1 to 256 bytes, as `docs/keys.md` says).
    pub run_id: String,
    /// The step of the run (0 unless set).
    #[serde(default)]
    pub step: u64,
    /// The tenant / principal (the executor's default when `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl IdemRun {
    /// Step 0 of run `run_id`.
    pub fn new(run_id: impl Into<String>) -> Self {
        IdemRun {
            run_id: run_id.into(),
            step: 0,
            namespace: None,
        }
    }

    /// At step `step`.
    pub fn step(mut self, step: u64) -> Self {
        self.step = step;
        self
    }

    /// For tenant `namespace`.
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.namespace = Some(namespace.as_str().to_owned());
        self
    }

    /// The run context the dispatcher keys calls from.
    fn run_context(&self) -> Result<RunContext, ToolExecutionError> {
        let run = RunContext::new(self.run_id.clone(), self.step);
        match &self.namespace {
            None => Ok(run),
            Some(namespace) => Namespace::new(namespace.clone())
                .map(|namespace| run.namespace(namespace))
                .map_err(|e| {
                    ToolExecutionError::other(format!(
                        "the namespace of the IdemRun in the tool context is invalid: {e}; nothing ran"
                    ))
                    .with_code(idem_runtime::ErrorCode::InvalidKey.as_str())
                }),
        }
    }
}

impl ContextValue for IdemRun {
    const KEY: &'static str = "idem.run";
}

/// How one call went, published as the call's host-only result metadata
/// ([`ToolContext::result`]); never sent to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CallReport {
    /// The tool.
    pub tool: String,
    /// The idempotency key, when the call got as far as having one (`None`
    /// for reads and for calls refused before).
    pub key: Option<String>,
    /// The answer is an earlier call's recorded result: the tool did not run.
    pub deduplicated: bool,
    /// Attempts made by this call (0 when deduplicated or refused).
    pub attempts: u32,
}

impl ContextValue for CallReport {
    const KEY: &'static str = "idem.call";
}

/// Every tool of `dispatcher`'s registry as a rig [`DynamicTool`], in
/// registration order, for `AgentBuilder::dynamic_tools`.
///
/// A tool with an empty name (possible only by implementing
/// [`ToolDef`](crate::ToolDef) by hand) cannot be offered to a model and is
/// left out.
pub fn tools<S: Send + Sync + 'static>(dispatcher: &Dispatcher<S>) -> Vec<DynamicTool> {
    dispatcher
        .registry()
        .names()
        .filter_map(|name| tool(dispatcher, name))
        .collect()
}

/// The tool called `name` as a rig [`DynamicTool`]; `None` when the
/// registry has no such tool.
pub fn tool<S: Send + Sync + 'static>(
    dispatcher: &Dispatcher<S>,
    name: &str,
) -> Option<DynamicTool> {
    let registered = dispatcher.registry().get(name)?;
    let spec = registered.spec();
    let rig_name = ToolName::new(spec.name).ok()?;
    let dispatcher = dispatcher.clone();
    let name = spec.name;
    Some(DynamicTool::new_with_context(
        rig_name,
        spec.description,
        registered.input_schema(),
        move |context: &mut ToolContext, args: Value| {
            let dispatcher = dispatcher.clone();
            Box::pin(async move { call(&dispatcher, name, context, args).await })
        },
    ))
}

/// One idem tool as a typed rig [`Tool`](rig_core::tool::Tool), for
/// `AgentBuilder::tool` and rig's `tool_name::<T>()`.
///
/// Its rig name is the idem tool's name; its arguments are JSON, checked
/// and keyed by a dispatcher as any model call is (see the
/// [module docs](self)).
///
/// ```
/// use idem::prelude::*;
/// use idem::rig::IdemTool;
///
/// # #[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// # struct Query { city: String }
/// /// Current temperature in a city, in °C.
/// #[tool(class = "read")]
/// async fn weather(query: Query) -> Result<f64, ToolError> {
///     Ok(21.5)
/// }
///
/// let executor = Executor::builder(MemoryStore::new()).build();
/// let tool = IdemTool::new(executor, weather);
/// assert_eq!(rig_core::tool::tool_name::<IdemTool<weather>>(), "weather");
/// let definition = rig_core::tool::tool_definition(&tool);
/// assert!(definition.parameters.get("$schema").is_none());
/// ```
pub struct IdemTool<T, S = ()> {
    dispatcher: Dispatcher<S>,
    tool: PhantomData<fn() -> T>,
}

impl<S: Send + Sync + 'static, T: crate::Tool<S>> IdemTool<T, S> {
    /// `tool`, run by `executor` (its store, state and approval policy).
    pub fn new(executor: Executor<S>, tool: T) -> Self {
        IdemTool {
            dispatcher: Dispatcher::new(executor, crate::Registry::new().with(tool)),
            tool: PhantomData,
        }
    }
}

impl<T, S> Clone for IdemTool<T, S> {
    fn clone(&self) -> Self {
        IdemTool {
            dispatcher: self.dispatcher.clone(),
            tool: PhantomData,
        }
    }
}

impl<T: crate::ToolDef, S> fmt::Debug for IdemTool<T, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdemTool")
            .field("tool", &T::SPEC.name)
            .finish_non_exhaustive()
    }
}

impl<S: Send + Sync + 'static, T: crate::Tool<S>> rig_core::tool::Tool for IdemTool<T, S> {
    const NAME: &'static str = T::SPEC.name;
    type Args = Value;
    type Output = ToolOutput;
    type Error = ToolExecutionError;

    fn description(&self) -> String {
        T::SPEC.description.to_owned()
    }

    fn parameters(&self) -> Value {
        self.dispatcher
            .registry()
            .get(T::SPEC.name)
            .map(|tool| tool.input_schema())
            .unwrap_or_default()
    }

    fn map_error(&self, error: ToolExecutionError) -> ToolExecutionError {
        error
    }

    async fn call(
        &self,
        context: &mut ToolContext,
        args: Value,
    ) -> Result<ToolOutput, ToolExecutionError> {
        call(&self.dispatcher, T::SPEC.name, context, args).await
    }
}

/// One rig tool call through the dispatcher: keyed from the context's
/// [`IdemRun`], reported as a [`CallReport`].
async fn call<S: Send + Sync + 'static>(
    dispatcher: &Dispatcher<S>,
    name: &'static str,
    context: &mut ToolContext,
    args: Value,
) -> Result<ToolOutput, ToolExecutionError> {
    let run = match context.get::<IdemRun>() {
        Ok(Some(run)) => run.run_context()?,
        Ok(None) => RunContext::default(),
        Err(e) => {
            return Err(ToolExecutionError::other(format!(
                "the tool context's `{}` value is not an IdemRun ({e}); nothing ran",
                IdemRun::KEY
            ))
            .with_code(idem_runtime::ErrorCode::InvalidKey.as_str()))
        }
    };
    let call = ToolCall {
        // rig does not pass the provider's call id to tools.
        id: None,
        name: name.to_owned(),
        arguments: Arguments::Json(args),
    };
    let result = dispatcher.dispatch_one(call, &run).await;
    let report = CallReport {
        tool: name.to_owned(),
        key: result
            .meta()
            .and_then(|meta| meta.key.as_ref())
            .map(|key| key.as_str().to_owned()),
        deduplicated: result.deduplicated(),
        attempts: result.meta().map_or(0, |meta| meta.attempts),
    };
    // A report that does not serialize is no reason to lose the outcome.
    let _ = context.insert_result(report);
    let class = dispatcher
        .registry()
        .get(name)
        .map_or(ClassKind::Read, |tool| tool.class());
    match &result.result {
        Ok(called) => Ok(ToolOutput::json(called.output.clone())),
        Err(error) => Err(rig_error(&result, error, class)),
    }
}

/// `error` as rig's error: its kind, idem's retry verdict, idem's code,
/// and what the model reads (the same content as every idem route).
fn rig_error(result: &ToolResult, error: &IdemError, class: ClassKind) -> ToolExecutionError {
    let mut message = error.to_string();
    if let IdemError::Key {
        source: idem_runtime::key::KeyError::NoSource { .. },
        ..
    } = error
    {
        message.push_str(
            ". With rig, put an idem::rig::IdemRun in the run's tool context \
             (agent.prompt(…).tool_context(…))",
        );
    }
    ToolExecutionError::new(rig_kind(error), message)
        .with_model_output(ToolOutput::json(result.content()))
        .with_retryable(retry_verdict(error, class))
        .with_code(error.code().as_str())
        .with_source(error.clone())
}

/// rig's normalized kind for `error`.
fn rig_kind(error: &IdemError) -> ToolErrorKind {
    match error {
        IdemError::Tool { error, .. } if error.kind() != ErrorKind::Permanent => {
            ToolErrorKind::Provider
        }
        IdemError::InvalidArguments { .. } | IdemError::ArgumentsTooLarge { .. } => {
            ToolErrorKind::InvalidArgs
        }
        IdemError::UnknownTool { .. } => ToolErrorKind::NotFound,
        IdemError::ApprovalDenied { .. } | IdemError::ApprovalRequired { .. } => {
            ToolErrorKind::PermissionDenied
        }
        _ => ToolErrorKind::Other,
    }
}

/// Whether calling again (the same run, so the same key) may answer
/// differently: the table in the module docs.
fn retry_verdict(error: &IdemError, class: ClassKind) -> bool {
    match error {
        // A recorded failure is what every duplicate gets.
        IdemError::Tool {
            deduplicated: true, ..
        } => false,
        IdemError::Tool { error, .. } => match error.kind() {
            ErrorKind::Transient => true,
            ErrorKind::Ambiguous => class.is_retry_safe(),
            ErrorKind::Permanent => false,
        },
        // Later, the call gets the outcome of the owner of its key.
        IdemError::InFlight { .. }
        | IdemError::Superseded { .. }
        | IdemError::Store {
            source: StoreError::Unavailable { .. } | StoreError::StaleFence { .. },
            ..
        } => true,
        // Everything else is refused again the same way, and an error
        // this version does not know is not worth a retry.
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_runtime::{IdempotencyKey, ToolError};

    fn key() -> IdempotencyKey {
        IdempotencyKey::parse(&"ab".repeat(32)).unwrap()
    }

    fn failed(error: ToolError, deduplicated: bool) -> IdemError {
        IdemError::Tool {
            tool: "t".into(),
            error,
            deduplicated,
        }
    }

    /// The module docs' table, row by row.
    #[test]
    fn the_retry_verdict_follows_what_the_key_will_answer() {
        use ClassKind::*;
        let all = [Read, IdempotentWrite, NonIdempotentWrite, Irreversible];
        let cases: [(IdemError, &[ClassKind], ToolErrorKind); 9] = [
            (
                failed(ToolError::transient("503"), false),
                &all,
                ToolErrorKind::Provider,
            ),
            (
                failed(ToolError::ambiguous("timed out"), false),
                &[Read, IdempotentWrite],
                ToolErrorKind::Provider,
            ),
            (
                failed(ToolError::permanent("bad"), false),
                &[],
                ToolErrorKind::Other,
            ),
            (
                failed(ToolError::ambiguous("x"), true),
                &[],
                ToolErrorKind::Provider,
            ),
            (
                IdemError::InFlight {
                    tool: "t".into(),
                    key: key(),
                },
                &all,
                ToolErrorKind::Other,
            ),
            (
                IdemError::Store {
                    tool: "t".into(),
                    source: idem_runtime::store::UnknownOption {
                        store: "sqlite://idem.db?jornal=off".into(),
                        backend: "SQLite",
                        options: vec!["jornal".into()],
                        known: "synchronous=full|normal, busy_timeout_ms=N",
                    }
                    .into(),
                },
                &[],
                ToolErrorKind::Other,
            ),
            (
                IdemError::OutcomeUnknown {
                    tool: "t".into(),
                    key: key(),
                    reason: "owner vanished".into(),
                },
                &[],
                ToolErrorKind::Other,
            ),
            (
                IdemError::InvalidArguments {
                    tool: "t".into(),
                    detail: "x".into(),
                },
                &[],
                ToolErrorKind::InvalidArgs,
            ),
            (
                IdemError::ApprovalDenied {
                    tool: "t".into(),
                    reason: "no".into(),
                    deduplicated: false,
                },
                &[],
                ToolErrorKind::PermissionDenied,
            ),
        ];
        for (error, retryable_for, kind) in cases {
            assert_eq!(rig_kind(&error), kind, "{error}");
            for class in all {
                assert_eq!(
                    retry_verdict(&error, class),
                    retryable_for.contains(&class),
                    "{error} ({class:?})"
                );
            }
        }
    }
}
