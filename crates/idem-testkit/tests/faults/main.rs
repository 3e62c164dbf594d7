//! The fault simulator itself: schedules with crashes, pauses and power
//! cuts on every store, and stores that break in the ways the kit offers.
//! Beside it, what tests idem-runtime with the other crates of the
//! workspace (which depend on it, so its own tests cannot): the
//! conformance suite on the in-memory store and through the interceptor,
//! worker processes killed mid-call on every durable store, and a burst of
//! duplicates on SQLite.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]

// The world, tools and probe of idem-runtime's executor tests, for the
// burst that runs on SQLite as well.
#[path = "../../../idem-runtime/tests/executor/support.rs"]
mod executor_support;

mod broken_stores;
mod burst;
mod intercept;
mod kill;
mod memory_conformance;
mod simulation;
