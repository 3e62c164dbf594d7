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

/// The names most programs need.
pub mod prelude {
    pub use idem_runtime::{
        ClassKind, ErrorKind, FromRef, IdempotencyKey, MemoryStore, Namespace, State, Store, Tool,
        ToolCtx, ToolDef, ToolError,
    };
}

/// Paths used by code that `#[tool]` generates. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use idem_runtime;
    pub use schemars;
    pub use serde;
    pub use serde_json;
}
