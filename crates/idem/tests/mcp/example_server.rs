//! End to end: `examples/mcp_server.rs` spawned over stdio and called by
//! rmcp's own client charges once per key across restarts, and says
//! startup errors in plain words, never a password.

use crate::mcp_support::{call, deduplicated, tool_names, words, Client};
use idem::mcp::CallToolRequestParamsExt;
use serde_json::json;

#[cfg(feature = "sqlite")]
mod example {
    use std::path::PathBuf;

    use rmcp::transport::TokioChildProcess;

    use super::Client;
    use rmcp::ServiceExt;

    pub use crate::mcp_example::{binary, TempDir};

    /// The example serving on stdio, recording in `store`.
    pub async fn start(binary: &PathBuf, store: &str) -> Client {
        let mut command = tokio::process::Command::new(binary);
        command.env("IDEM_STORE", store);
        let transport = TokioChildProcess::new(command).expect("the server starts");
        ().serve(transport).await.expect("the client connects")
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_server_over_stdio_charges_once_per_key_across_restarts() {
    let binary = tokio::task::spawn_blocking(example::binary).await.unwrap();
    let dir = example::TempDir::new();
    let store = format!("sqlite://{}", dir.0.join("idem.db").display());
    let charge = || {
        call("charge_card", json!({"customer": "ada", "cents": 4900}))
            .with_idempotency_key("order-17-payment")
    };

    let client = example::start(&binary, &store).await;
    let names = tool_names(&client).await;
    for name in [
        "store",
        "lookup_customer",
        "send_email",
        "charge_card",
        "delete_account",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    let first = client.call_tool(charge()).await.unwrap();
    assert_eq!(first.is_error, Some(false), "{first:?}");
    assert!(!deduplicated(&first));
    // What a chat client sends: no key. Another charge, keyed by what it
    // does.
    let unkeyed = || call("charge_card", json!({"customer": "bob", "cents": 1200}));
    let chat = client.call_tool(unkeyed()).await.unwrap();
    assert_eq!(chat.is_error, Some(false), "{chat:?}");
    client.cancel().await.unwrap();

    // A new server process on the same SQLite file: the client's retry is
    // answered from the record, and so is the chat's repeat.
    let client = example::start(&binary, &store).await;
    let retry = client.call_tool(charge()).await.unwrap();
    assert!(deduplicated(&retry));
    assert_eq!(retry.content, first.content);
    let repeated = client.call_tool(unkeyed()).await.unwrap();
    assert!(deduplicated(&repeated));
    assert!(words(&repeated).starts_with("Already done"));
    assert_eq!(repeated.content[1..], chat.content[..]);
    client.cancel().await.unwrap();
}

#[cfg(feature = "sqlite")]
#[test]
fn the_example_server_says_startup_errors_in_plain_words_and_never_a_password() {
    let binary = example::binary();
    let start = |args: &[&str], store: &str| {
        let out = std::process::Command::new(&binary)
            .args(args)
            .env("IDEM_STORE", store)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8(out.stderr).unwrap()
    };
    let bad_scheme = start(&[], "bogus://x");
    assert!(
        bad_scheme.starts_with("idem mcp_server: cannot open the store"),
        "{bad_scheme}"
    );
    assert!(
        bad_scheme.contains("expected memory:, sqlite://PATH"),
        "{bad_scheme}"
    );
    let bad_address = start(&["--http", "nonsense"], "memory:");
    assert!(
        bad_address.contains("`nonsense` is not an address to listen on"),
        "{bad_address}"
    );
    if cfg!(feature = "redis") {
        // Nothing listens on port 1: the error names the store, not its
        // password.
        let unreachable = start(&[], "redis://ada:s3cret@127.0.0.1:1/0");
        assert!(
            unreachable.contains("redis://ada:***@127.0.0.1:1/0"),
            "{unreachable}"
        );
        assert!(!unreachable.contains("s3cret"), "{unreachable}");
    }
}
