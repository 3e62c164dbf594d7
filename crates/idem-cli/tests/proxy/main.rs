//! `idem proxy` in front of MCP servers nobody on this project wrote (npm's
//! reference servers), driven by rmcp's client and the official Python SDK.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]
#[path = "../support/mod.rs"]
mod support;

mod otlp;
mod policy;
mod rules;
mod storm;
mod upstreams;
