//! Secrets never leave: the examples are run on store URLs holding a
//! password in every form a URL can carry one, on servers that are not
//! there, and the password appears in nothing they print (their errors
//! included) nor in what the MCP example's `store` tool answers a model.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use idem::store::StoreExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;

/// The password in every URL.
const SECRET: &str = "hunter2";

/// A store URL holding [`SECRET`] in each way one can, all on a port where
/// nothing listens; TLS URLs, refused before connecting, included.
fn secret_urls() -> Vec<String> {
    [
        "redis://:hunter2@127.0.0.1:1",
        "redis://user:hunter2@127.0.0.1:1/0",
        "rediss://:hunter2@127.0.0.1:1",
        "redis+cluster://:hunter2@127.0.0.1:1",
        "postgres://u:hunter2@127.0.0.1:1/db",
        "postgres://u@127.0.0.1:1/db?password=hunter2",
        "postgresql://u:hunter2@127.0.0.1:1/db",
        "postgres://u:hunter2@127.0.0.1:1/db?sslmode=require",
        "host=127.0.0.1 port=1 user=u password=hunter2",
        "mongodb://u:hunter2@127.0.0.1:1/db",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The examples' binaries, built with the stores' features (an integration
/// test has no `CARGO_BIN_EXE_…` for examples).
fn examples() -> Vec<(String, PathBuf)> {
    let features = ["mcp", "http-auth", "sqlite", "redis", "postgres"];
    ["demo", "chaos", "mcp_server"]
        .into_iter()
        .map(|name| {
            (
                name.to_owned(),
                crate::mcp_example::example(name, &features),
            )
        })
        .collect()
}

/// Run `binary ARGS` with `IDEM_STORE=url`: all it printed.
fn output_of(binary: &PathBuf, args: &[&str], url: &str) -> String {
    let out = Command::new(binary)
        .args(args)
        .env("IDEM_STORE", url)
        .stdin(Stdio::null())
        .output()
        .expect("the example runs");
    assert!(!out.status.success(), "{binary:?} ran on {url}");
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn no_example_prints_a_store_password_even_when_the_store_is_unreachable() {
    let examples = examples();
    for url in secret_urls() {
        for (name, binary) in &examples {
            let said = match name.as_str() {
                "chaos" => output_of(binary, &["--schedules", "1", "--store", &url], ""),
                _ => output_of(binary, &[], &url),
            };
            assert!(!said.is_empty(), "{name} said nothing on {url}");
            assert!(
                !said.contains(SECRET),
                "{name} printed the password of {url}:\n{said}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_examples_store_tool_names_the_store_as_it_describes_itself() {
    let examples = tokio::task::spawn_blocking(examples).await.unwrap();
    let (_, binary) = examples.iter().find(|(n, _)| n == "mcp_server").unwrap();
    let tmp = std::env::temp_dir().join(format!("idem-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let url = format!("sqlite://{}", tmp.join("idem.db").display());
    let mut command = tokio::process::Command::new(binary);
    command.env("IDEM_STORE", &url);
    let transport = TokioChildProcess::new(command).expect("the server starts");
    let client = ().serve(transport).await.expect("the client connects");
    let answer = client
        .call_tool(CallToolRequestParams::new("store"))
        .await
        .unwrap();
    let text = serde_json::to_string(&answer.content).unwrap();
    let store = idem::store::connect(&url).await.unwrap();
    assert!(
        text.contains(&idem::store::url::redact(&store.describe())),
        "{text}"
    );
    store.close().await;
    client.cancel().await.unwrap();
    let _ = std::fs::remove_dir_all(&tmp);
}
