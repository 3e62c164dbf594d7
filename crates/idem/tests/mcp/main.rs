//! Tools served over MCP (feature `mcp`): through rmcp's client in process,
//! over stdio and streamable HTTP, the example server, the official Python
//! SDK and MCP's conformance suite.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]
#[cfg(feature = "sqlite")]
#[path = "../mcp_example/mod.rs"]
mod mcp_example;
#[path = "../mcp_support/mod.rs"]
mod mcp_support;

mod chat;
mod concurrency;
#[cfg(feature = "sqlite")]
mod conformance;
mod errors;
mod example_server;
mod http;
mod keys;
#[cfg(feature = "sqlite")]
mod python;
mod rmcp_router;
#[cfg(feature = "sqlite")]
mod secrets;
mod tasks;
mod tools_list;
