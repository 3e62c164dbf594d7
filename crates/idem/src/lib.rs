//! **idem** makes the tools an AI agent calls safe to call twice.
//!
//! Agents execute tool calls *at least once*: a request times out after the
//! provider accepted it, a dispatcher crashes between executing and
//! recording, the model repeats a call "to be sure", a run is replayed from a
//! checkpoint. idem turns that into *effects applied exactly once*, with
//! idempotency keys, stored results, in-flight leases and a retry executor
//! that knows which tools may be retried — and where exactly-once cannot be
//! promised, it refuses rather than acting twice.
//!
//! A tool is a function with a class; the executor calls it under a key:
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//!
//! use idem::prelude::*;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone, Serialize, Deserialize, schemars::JsonSchema)]
//! struct SendEmail {
//!     to: String,
//!     subject: String,
//! }
//!
//! /// Send an email to a customer.
//! #[tool(class = "idempotent_write")]
//! async fn send_email(
//!     args: SendEmail,
//!     ctx: &ToolCtx,
//!     State(sent): State<Arc<AtomicUsize>>,
//! ) -> Result<String, ToolError> {
//!     // The key goes downstream, so the mail provider deduplicates too.
//!     let key = ctx.key().expect("writes are keyed");
//!     sent.fetch_add(1, Ordering::SeqCst);
//!     Ok(format!("<{key}@example.com>"))
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let sent = Arc::new(AtomicUsize::new(0));
//! let executor = Executor::builder(MemoryStore::new()).state(sent.clone()).build();
//! let args = SendEmail { to: "ada@example.com".into(), subject: "Your invoice".into() };
//!
//! // The model repeats the call with the same call id: one email.
//! let first = executor.call(send_email, args.clone()).call_id("call_1").await?;
//! let again = executor.call(send_email, args).call_id("call_1").await?;
//! assert!(again.meta.deduplicated);
//! assert_eq!(first.output, again.output);
//! assert_eq!(sent.load(Ordering::SeqCst), 1);
//! # Ok::<(), IdemError>(())
//! # }).unwrap();
//! ```
//!
//! # The classes
//!
// `src/doc/` holds links to the pages this crate shares with idem-runtime
// and docs/: `cargo package` copies what a link points to, so the published
// crate (and docs.rs) has them, where a path out of the package would not.
#![doc = include_str!("doc/classes.md")]
//!
//! # Where things are
//!
//! * Writing tools: [`tool`], [`ToolCtx`], [`ToolError`], [`State`], and the
//!   class markers [`Read`], [`IdempotentWrite`], [`NonIdempotentWrite`],
//!   [`Irreversible`].
//! * Calling them: [`Executor`] (typed calls), [`Dispatcher`] with a
//!   [`Registry`] built by [`tools!`] (model output by name), [`RunContext`].
//! * Keys: [`key`] (derivation, namespaces; see `docs/keys.md`).
//! * Records and stores: [`store`] (`store::connect(url)`), [`record`].
//! * Approvals of irreversible calls: [`approval`]. Retries: [`retry`].
//! * Serving tools over MCP with rmcp (feature `mcp`): `mcp` (`McpServer`,
//!   its `ToolRouter` fragment, keys for rmcp clients); who is calling over
//!   HTTP (feature `http-auth`): `mcp::auth`.
//! * Where agents run: [`dispatch`] runs a model's tool calls whatever the
//!   provider; each provider's shapes (OpenAI chat completions and
//!   Responses API, Anthropic, genai) are in [`provider`]; async-openai's tool calls
//!   convert into [`ToolCall`] (feature `async-openai`); `rig` (feature
//!   `rig`) offers idem tools to rig agents.
//!
//! Most programs need only `use idem::prelude::*;`.
//!
//! # Next to rmcp's `#[tool]`
//!
//! rmcp, swiftide and AutoAgents export an attribute called `tool` too.
//! With one of them imported by name (`use rmcp::tool;`), a bare `#[tool]`
//! is theirs, and rmcp's answers `Unknown field: class`. In such modules
//! write idem's by its path, `#[idem::tool(class = "…")]`, which means the
//! same everywhere:
//!
//! ```
//! use idem::prelude::*;
//! # #[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
//! # pub struct Charge { pub customer: String, pub cents: u64 }
//!
//! /// Charge a customer's card.
//! #[idem::tool(class = "non_idempotent_write")]
//! async fn charge_card(args: Charge) -> Result<String, ToolError> {
//!     Ok(format!("charged {} cents", args.cents))
//! }
//! # fn main() { assert_eq!(charge_card::SPEC.name, "charge_card"); }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

/// `#[tool]`: turn a function into a tool. See its documentation for the
/// options.
pub use idem_macros::tool;

// Writing tools.
pub use idem_runtime::class::{
    Class, ClassKind, IdempotentWrite, Irreversible, NonIdempotentWrite, Read,
};
pub use idem_runtime::ctx::ToolCtx;
pub use idem_runtime::error::{ErrorKind, ToolError};
pub use idem_runtime::state::{FromRef, State};
pub use idem_runtime::tool::{KeyMaterial, KeySpec, Reconciled, Tool, ToolDef, ToolSpec};

// Calling tools.
pub use idem_runtime::dispatch::{Dispatcher, ToolCall, ToolResult};
pub use idem_runtime::error::{ErrorCode, IdemError};
pub use idem_runtime::executor::{
    CallBuilder, CallFuture, CallMeta, CallOutput, ClaimedKey, Executor, ExecutorBuilder,
    InFlightPolicy, RepeatWindow, RunContext,
};
pub use idem_runtime::registry::Registry;

// Keys, records and stores.
pub use idem_runtime::key::{IdempotencyKey, Namespace};
pub use idem_runtime::store::{MemoryStore, Store, StoreError, StoreExt};

// Approvals and retries.
pub use idem_runtime::approval::Approval;
pub use idem_runtime::retry::RetryPolicy;

// The modules, for everything else.
pub use idem_runtime::{
    approval, audit, catalog, class, clock, dispatch, error, executor, key, operator, provider,
    record, registry, retry, text,
};

pub mod store;

#[cfg(feature = "conformance")]
#[doc(inline)]
pub use idem_conformance as conformance;

#[cfg(feature = "mcp")]
#[doc(inline)]
pub use idem_mcp as mcp;
#[cfg(feature = "otel")]
pub mod otel;
#[cfg(feature = "rig")]
pub mod rig;

/// An explicit registry of tools, with duplicate names rejected at compile
/// time.
///
/// ```
/// use idem::prelude::*;
/// # #[derive(serde::Deserialize, serde::Serialize, schemars::JsonSchema, Clone)]
/// # struct Query { city: String }
///
/// /// Current temperature in a city, in °C.
/// #[tool(class = "read")]
/// async fn weather(query: Query) -> Result<f64, ToolError> {
///     Ok(21.5)
/// }
///
/// /// Forecast for tomorrow in a city, in °C.
/// #[tool(class = "read")]
/// async fn forecast(query: Query) -> Result<f64, ToolError> {
///     Ok(19.0)
/// }
///
/// let registry: Registry = tools![weather, forecast];
/// assert_eq!(registry.names().count(), 2);
/// ```
///
/// Two tools with the same name (`#[tool(name = "…")]` included) do not
/// compile: the model calls tools by name, so a name must say which tool.
#[macro_export]
macro_rules! tools {
    ($($tool:tt)*) => {
        $crate::__private::tools!(crate = $crate; $($tool)*)
    };
}

/// What a tool author and a caller need: `use idem::prelude::*;`.
///
/// Tools: [`tool`], [`ToolCtx`], [`ToolError`], [`ErrorKind`],
/// [`State`], [`FromRef`]. Calls: [`Executor`], [`Dispatcher`],
/// [`Registry`], [`tools!`](crate::tools), [`RunContext`], [`Approval`],
/// [`IdemError`]. Keys and stores: [`IdempotencyKey`], [`Namespace`],
/// [`Store`], [`MemoryStore`]. The traits [`Tool`], [`ToolDef`] and
/// [`StoreExt`] (a store's typed calls) come too, so their methods are in
/// scope.
pub mod prelude {
    pub use crate::{tool, tools};
    pub use crate::{
        Approval, ClassKind, Dispatcher, ErrorKind, Executor, FromRef, IdemError, IdempotencyKey,
        MemoryStore, Namespace, Registry, RunContext, State, Store, StoreExt, Tool, ToolCtx,
        ToolDef, ToolError,
    };
}

/// Paths used by code that `#[tool]` and `tools!` generate. Not a public
/// API: anything here may change in any release.
#[doc(hidden)]
pub mod __private {
    pub use idem_macros::tools;
    pub use idem_runtime::__macro_support::{
        custom_key, into_tool_result, key_field, natural_key, str_eq, OutputSchemaProbe,
        WithOutputSchema, WithoutOutputSchema,
    };
    pub use idem_runtime::{
        FromRef, IdempotentWrite, Irreversible, KeyMaterial, KeySpec, NonIdempotentWrite, Read,
        Reconciled, Registry, State, Tool, ToolCtx, ToolDef, ToolError, ToolSpec,
    };
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

/// The README and the guides in `docs/` with examples: their Rust blocks
/// are doctests. (`docs/telemetry.md` is the `otel` module's docs.)
#[cfg(doctest)]
mod guides {
    #[doc = include_str!("../../../README.md")]
    mod readme {}
    #[doc = include_str!("../../../docs/tools.md")]
    mod tools {}
    #[doc = include_str!("../../../docs/mcp.md")]
    mod mcp {}
    #[doc = include_str!("../../../docs/stores.md")]
    mod stores {}
    #[doc = include_str!("../../../docs/operators.md")]
    mod operators {}
    #[doc = include_str!("../../../docs/inbox.md")]
    mod inbox {}
    #[doc = include_str!("../../../docs/proxy.md")]
    mod proxy {}
}
