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
//! ```
//! use idem::key::{derive_key, KeyInput, KeySource, Namespace};
//!
//! // The provider's call id is the default key, namespaced per tenant.
//! let tenant = Namespace::new("acme").unwrap();
//! let key = derive_key(&KeyInput {
//!     version: 1,
//!     namespace: &tenant,
//!     tool: "send_email",
//!     source: KeySource::CallId("call_9f8e7d6c5b4a"),
//! })
//! .unwrap();
//! assert_eq!(key.as_str().len(), 64);
//! ```
#![warn(missing_docs)]

pub use idem_runtime::*;

/// `#[tool]`: turn a function into a tool. See its documentation for the
/// options.
pub use idem_macros::tool;

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
/// let registry: idem::Registry<()> = tools![weather, forecast];
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

/// The names most programs need.
pub mod prelude {
    pub use crate::{tool, tools};
    pub use idem_runtime::{
        ClassKind, ErrorKind, FromRef, IdempotencyKey, MemoryStore, Namespace, State, Store, Tool,
        ToolCtx, ToolDef, ToolError,
    };
}

/// Paths used by code that `#[tool]` generates. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use idem_macros::tools;
    pub use idem_runtime;
    pub use idem_runtime::__macro_support::{
        custom_key, into_tool_result, key_field, natural_key, str_eq,
    };
    pub use idem_runtime::{
        FromRef, IdempotentWrite, Irreversible, KeyMaterial, KeySpec, NonIdempotentWrite, Read,
        Reconciled, Registry, State, Tool, ToolCtx, ToolDef, ToolError, ToolSpec,
    };
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
