//! Compile-fail and compile-pass cases of `#[tool]` and `tools!`, with the
//! diagnostics users see checked in as `.stderr` snapshots.
//! `TRYBUILD=overwrite cargo test --test ui` rewrites them.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
