//! The `mcp_server` example, for the tests that run it as a client would:
//! its binary, built with the test's features, and a directory for its
//! store; any example's binary (`example`).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The `mcp_server` example's binary, built with this test's features
/// so that under `cargo test` (which has built it already) this is a
/// no-op. An integration test has no `CARGO_BIN_EXE_…` for examples.
pub fn binary() -> PathBuf {
    let features: Vec<&str> = [
        ("mcp", true),
        ("http-auth", true),
        ("sqlite", cfg!(feature = "sqlite")),
        ("redis", cfg!(feature = "redis")),
        ("postgres", cfg!(feature = "postgres")),
        ("conformance", cfg!(feature = "conformance")),
        ("schema-validation", cfg!(feature = "schema-validation")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    example("mcp_server", &features)
}

/// The binary of example `name`, built with `features` (and no default
/// ones).
///
/// A test built with every feature of the facade is taken to run under the
/// README's `cargo test --workspace --all-features`, which has built every
/// example with the whole workspace's features: the same selection asks
/// for that build, found up to date, instead of a second build of the
/// dependency tree with the features of this package alone.
pub fn example(name: &str, features: &[&str]) -> PathBuf {
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--example", name, "--message-format=json"])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .stderr(Stdio::inherit());
    if every_feature() {
        cargo.args(["--workspace", "--all-features"]);
    } else {
        cargo.args(["--no-default-features", "--features", &features.join(",")]);
    }
    if !cfg!(debug_assertions) {
        cargo.arg("--release");
    }
    let output = cargo.output().expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo build --example {name} failed"
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == name)
        .and_then(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the example's executable")
}

/// Whether this test was built with every feature of the facade.
fn every_feature() -> bool {
    cfg!(all(
        feature = "mcp",
        feature = "http-auth",
        feature = "sqlite",
        feature = "redis",
        feature = "postgres",
        feature = "conformance",
        feature = "schema-validation",
        feature = "rig",
        feature = "async-openai",
        feature = "otel"
    ))
}

/// A directory of its own for the SQLite file, removed afterwards.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("idem-mcp-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
