//! The example MCP server driven by the official Python MCP SDK (`mcp` on
//! PyPI), as the clients people chat in drive a server: over stdio and over
//! streamable HTTP, with what Claude Code, VS Code and Codex send and with
//! nothing, approvals asked of the person in the chat in both of MCP's
//! forms, a window boundary, a restart and a lost HTTP response. The cases
//! are in `tests/python/mcp_clients.py`; effects are counted from the demo
//! providers' ledger.
//!
//! The SDK is looked for in `IDEM_PYTHON` (a Python with `mcp` installed),
//! else in the virtual environment `.ci/run` makes, `target/python-mcp`.
//! Without it the test is skipped loudly, and fails under
//! `IDEM_REQUIRE_SERVERS=1`.

use std::path::PathBuf;
use std::process::Command;

mod mcp_example;

#[test]
fn the_python_sdk_gets_one_effect_per_intent_over_stdio_and_http() {
    let Some(python) = idem_testkit::python_mcp(std::path::Path::new(env!("CARGO_MANIFEST_DIR")))
    else {
        idem_testkit::skip(
            "the_python_sdk_gets_one_effect_per_intent_over_stdio_and_http",
            "Python with the MCP SDK (`mcp` on PyPI; .ci/run installs it in target/python-mcp)",
        );
        return;
    };
    let example = mcp_example::binary();
    let output = Command::new(python)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/mcp_clients.py"
        ))
        .env("IDEM_MCP_EXAMPLE", &example)
        .output()
        .expect("python runs");
    let transcript = String::from_utf8_lossy(&output.stdout);
    // Kept for reading: what each client sent and what the model read.
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/target/tmp"));
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join("mcp-python-transcript.md"), transcript.as_bytes());
    println!("{transcript}");
    assert!(
        output.status.success(),
        "the Python client's cases failed:\n{transcript}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(transcript.contains("all cases passed"), "{transcript}");
}
