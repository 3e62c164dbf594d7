//! Compile-fail and compile-pass cases of `#[tool]` and `tools!`, with the
//! diagnostics users see checked in as `.stderr` snapshots.
//! `TRYBUILD=overwrite cargo test -p idem-macros --test macros ui` rewrites them.
//! The snapshots are taken with every feature on, as the README's test
//! command runs them: rustc's notes list what else implements a trait, and
//! the optional integrations (serde_json's `raw_value` through rmcp and
//! rig) add to that list.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
