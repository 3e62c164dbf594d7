//! Tools through the facade, as users write and call them: scenarios,
//! dispatching model output, approvals and decisions, client crates, the
//! repeat window on every store, observability, telemetry (feature `otel`),
//! rig (feature `rig`) and the README's promises.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]
#[path = "../common/mod.rs"]
mod common;
// The otel tests start the MCP example; `store_url` builds the demo with
// it whatever the features.
#[path = "../mcp_example/mod.rs"]
mod mcp_example;
#[cfg(all(feature = "otel", feature = "mcp"))]
#[path = "../mcp_support/mod.rs"]
mod mcp_support;

mod approvals;
mod client_crates;
mod decisions;
mod dispatch;
mod docs;
mod edit;
mod observability;
#[cfg(feature = "otel")]
mod otel;
mod redis_cluster;
mod repeat_window;
mod repeat_window_stores;
#[cfg(feature = "rig")]
mod rig;
mod rules;
mod scenarios;
mod store_phases;
mod store_url;
#[cfg(feature = "sqlite")]
mod timers;
