//! The `idem` program run as an operator runs it, on every store: reading
//! records, settling unknown outcomes and approvals, bad input, `--json`
//! output, suggestions and escaped text.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]
mod stores_support;
#[path = "../support/mod.rs"]
mod support;

mod approvals;
mod bad_input;
mod commands;
mod edit;
mod escapes;
mod json_output;
mod reading;
mod suggestions;
mod unknown_outcomes;
