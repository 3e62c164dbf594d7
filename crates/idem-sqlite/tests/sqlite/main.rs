//! `SqliteStore` against real files: the conformance suite and a module per
//! scenario.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]

mod sqlite_support;

mod bad_data;
mod callers_thread;
mod conformance;
mod durability;
mod group_commit;
mod open_index;
mod opening;
mod power_cut;
mod processes;
mod read_only;
