//! `#[tool]` and `tools!` as users meet them: compile-fail and compile-pass
//! cases with their diagnostics (trybuild snapshots in `tests/ui/`), the
//! generated entries through the public API, and hygiene against a caller's
//! shadowed prelude. The expansion snapshots (`tests/expand/`) are checked by
//! the crate's unit tests.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]
mod hygiene;
mod tool;
mod ui;
