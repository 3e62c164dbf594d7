//! The fault simulator itself: schedules with crashes, pauses and power
//! cuts on every store, and stores that break in the ways the kit offers.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]
mod broken_stores;
mod simulation;
