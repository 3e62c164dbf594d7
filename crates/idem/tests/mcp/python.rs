//! The example MCP server driven by the official Python MCP SDK (`mcp` on
//! PyPI), as the clients people chat in drive a server: over stdio and over
//! streamable HTTP, with what Claude Code, VS Code and Codex send and with
//! nothing, approvals asked of the person in the chat in both of MCP's
//! forms, a window boundary, a restart and a lost HTTP response. The cases
//! are in `tests/python/mcp_clients.py`; effects are counted from the demo
//! providers' ledger.
//!
//! With feature `http-auth`, the example over HTTP with a principals file
//! made with `idem::mcp::auth::new_token`, and with an OAuth issuer the
//! script serves: two principals (two JWT subjects) making the same call
//! get their own effects, and a request without a valid token gets 401.
//! With a PostgreSQL server, two examples on it sharing a state secret are
//! one server to their clients.
//!
//! The SDK is looked for in `IDEM_PYTHON` (a Python with `mcp` installed),
//! else in the virtual environment `.ci/run` makes, `target/python-mcp`.
//! Without it the test is skipped loudly, and fails under
//! `IDEM_REQUIRE_SERVERS=1`.

use std::path::Path;

/// The script's cases with `envs` (and the example's path), its
/// transcript kept as `keep_as`; skipped loudly without the SDK.
fn run_cases(name: &str, envs: &[(&str, &std::ffi::OsStr)], keep_as: &str) {
    let Some(python) = idem_testkit::python_mcp() else {
        idem_testkit::skip(
            name,
            "Python with the MCP SDK (`mcp` on PyPI; .ci/run installs it in target/python-mcp)",
        );
        return;
    };
    let example = crate::mcp_example::binary();
    let mut all = vec![("IDEM_MCP_EXAMPLE", example.as_os_str())];
    all.extend_from_slice(envs);
    idem_testkit::run_python_clients(
        &python,
        Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/mcp_clients.py"
        )),
        &all,
        keep_as,
    );
}

#[test]
fn the_python_sdk_gets_one_effect_per_intent_over_stdio_and_http() {
    run_cases(
        "the_python_sdk_gets_one_effect_per_intent_over_stdio_and_http",
        &[],
        "mcp-python-transcript.md",
    );
}

#[cfg(feature = "http-auth")]
#[test]
fn two_principals_over_http_get_their_own_effects_and_no_token_gets_401() {
    let dir = crate::mcp_example::TempDir::new();
    let (alice, alice_digest) = idem::mcp::auth::new_token();
    let (bob, bob_digest) = idem::mcp::auth::new_token();
    let principals = dir.0.join("principals.toml");
    std::fs::write(
        &principals,
        format!(
            "[[principal]]\nname = \"alice\"\ntokens = [\"{alice_digest}\"]\n\n\
             [[principal]]\nname = \"bob\"\ntokens = [\"{bob_digest}\"]\n"
        ),
    )
    .unwrap();
    let tokens = serde_json::json!({ "alice": alice, "bob": bob }).to_string();
    run_cases(
        "two_principals_over_http_get_their_own_effects_and_no_token_gets_401",
        &[
            (
                "IDEM_MCP_CASES",
                "principals_over_http oauth_over_http".as_ref(),
            ),
            ("IDEM_MCP_PRINCIPALS", principals.as_os_str()),
            ("IDEM_MCP_TOKENS", tokens.as_ref()),
        ],
        "mcp-python-principals-transcript.md",
    );
}

/// Two example servers on one PostgreSQL store with one
/// `--state-secret-file`: a call to one and its retry to the other are one
/// effect; a pending approval asked on one is decided through the other;
/// a task made by one is read on the other.
#[test]
fn two_example_servers_on_one_postgresql_are_one_server_to_their_clients() {
    let name = "two_example_servers_on_one_postgresql_are_one_server_to_their_clients";
    let Some(server) = idem_testkit::PostgresServer::start() else {
        idem_testkit::skip(name, "PostgreSQL");
        return;
    };
    let url = server.url();
    run_cases(
        name,
        &[
            ("IDEM_MCP_CASES", "two_instances".as_ref()),
            ("IDEM_TWO_INSTANCES_STORE", url.as_ref()),
        ],
        "mcp-python-two-instances-transcript.md",
    );
}
