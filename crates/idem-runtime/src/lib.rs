//! The runtime of [idem](https://docs.rs/idem): tool classes, idempotency
//! keys, records, stores and the executor.
//!
//! Most users depend on the `idem` facade crate instead, which re-exports
//! everything here together with the `#[tool]` attribute.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[doc(hidden)]
#[path = "macro_support.rs"]
pub mod __macro_support;
pub mod approval;
pub mod audit;
pub mod canonical;
pub mod catalog;
pub mod class;
pub mod clock;
pub mod ctx;
pub mod dispatch;
pub mod error;
pub mod executor;
pub mod glob;
pub mod key;
pub mod ledger;
pub mod operator;
pub mod provider;
pub mod record;
pub mod registry;
pub mod retry;
#[cfg(feature = "schema-validation")]
pub mod schema;
pub mod state;
pub mod store;
pub mod text;
pub mod tool;

pub use approval::Approval;
pub use class::{
    Class, ClassKind, IdempotentWrite, Irreversible, Keyed, McpAnnotations, NeedsApproval,
    NoApprovalNeeded, NonIdempotentWrite, Read, RetrySafe,
};
pub use ctx::ToolCtx;
pub use dispatch::{Dispatcher, ToolCall, ToolResult};
pub use error::{ErrorCode, ErrorKind, IdemError, ToolError};
pub use executor::{
    CallMeta, CallOutput, ClaimedKey, Executor, InFlightPolicy, RepeatWindow, RunContext,
};
pub use key::{IdempotencyKey, KeyError, Namespace};
pub use record::{Outcome, Record};
pub use registry::Registry;
pub use retry::RetryPolicy;
pub use state::{FromRef, State};
pub use store::{MemoryStore, Store, StoreError};
pub use tool::{KeyMaterial, KeySpec, Reconciled, Tool, ToolDef, ToolSpec};
