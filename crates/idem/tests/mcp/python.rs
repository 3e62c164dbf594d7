//! The example MCP server driven by the official Python MCP SDK (`mcp` on
//! PyPI), as the clients people chat in drive a server: over stdio and over
//! streamable HTTP, with what Claude Code, VS Code and Codex send and with
//! nothing, approvals asked of the person in the chat in both of MCP's
//! forms, a window boundary, a restart and a lost HTTP response. The cases
//! are in `tests/python/mcp_clients.py`; effects are counted from the demo
//! providers' ledger.
//!
//! With feature `http-auth`, the example over HTTP with a principals file
//! made with `idem::mcp::auth::new_token`: two principals making the same
//! call get their own effects, and a request without a token gets 401.
//!
//! The SDK is looked for in `IDEM_PYTHON` (a Python with `mcp` installed),
//! else in the virtual environment `.ci/run` makes, `target/python-mcp`.
//! Without it the test is skipped loudly, and fails under
//! `IDEM_REQUIRE_SERVERS=1`.

use std::path::Path;

#[test]
fn the_python_sdk_gets_one_effect_per_intent_over_stdio_and_http() {
    let Some(python) = idem_testkit::python_mcp() else {
        idem_testkit::skip(
            "the_python_sdk_gets_one_effect_per_intent_over_stdio_and_http",
            "Python with the MCP SDK (`mcp` on PyPI; .ci/run installs it in target/python-mcp)",
        );
        return;
    };
    let example = crate::mcp_example::binary();
    idem_testkit::run_python_clients(
        &python,
        Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/mcp_clients.py"
        )),
        &[("IDEM_MCP_EXAMPLE", example.as_os_str())],
        "mcp-python-transcript.md",
    );
}

#[cfg(feature = "http-auth")]
#[test]
fn two_principals_over_http_get_their_own_effects_and_no_token_gets_401() {
    let name = "two_principals_over_http_get_their_own_effects_and_no_token_gets_401";
    let Some(python) = idem_testkit::python_mcp() else {
        idem_testkit::skip(
            name,
            "Python with the MCP SDK (`mcp` on PyPI; .ci/run installs it in target/python-mcp)",
        );
        return;
    };
    let example = crate::mcp_example::binary();
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
    idem_testkit::run_python_clients(
        &python,
        Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/mcp_clients.py"
        )),
        &[
            ("IDEM_MCP_EXAMPLE", example.as_os_str()),
            ("IDEM_MCP_CASES", "principals_over_http".as_ref()),
            ("IDEM_MCP_PRINCIPALS", principals.as_os_str()),
            ("IDEM_MCP_TOKENS", tokens.as_ref()),
        ],
        "mcp-python-principals-transcript.md",
    );
}
