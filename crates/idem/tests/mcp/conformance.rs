//! The example MCP server (`examples/mcp_server.rs`, over streamable HTTP)
//! against MCP's official conformance suite, the npm package
//! `@modelcontextprotocol/conformance`: every server scenario that applies
//! to a server of tools (the handshake, ping, listing tools, SSE streams,
//! DNS rebinding protection) must pass, with no failed check.
//!
//! The suite needs Node 22. Both are looked for in `target/node22`, where
//! `.ci/mcp-conformance-setup.sh` installs them from the npm registry
//! (pinned versions); elsewhere, set `IDEM_NODE22` to a Node 22 (or newer)
//! binary and `IDEM_MCP_CONFORMANCE` to the suite's CLI (`dist/index.js` of
//! the package). Without them the test is skipped loudly, and fails under
//! `IDEM_REQUIRE_SERVERS=1`.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The server scenarios that apply to this server, run each by name.
const RUN: &[&str] = &[
    // The initialize / initialized handshake.
    "server-initialize",
    "ping",
    // Every tool has a name, a description and an input schema.
    "tools-list",
    // Three concurrent POSTs in one session, each answered on an SSE
    // stream of its own (SEP-1699).
    "server-sse-multiple-streams",
    // A tool call answered on an SSE stream that starts with a priming
    // event (an id, no data) and a `retry` field (SEP-1699). Pending in the
    // suite (not in its default run), so run by name. It calls the
    // fixture tool `test_reconnection`, which this server does not have:
    // the "tool not found" answer is what arrives on the stream, and the
    // part of the scenario that needs the tool to close the stream mid-call
    // (`server-sse-disconnect-resume`) ends as a warning, not a failure.
    "server-sse-polling",
    // A request whose Host / Origin is not this machine is refused (4xx);
    // one that names 127.0.0.1:PORT is served.
    "dns-rebinding-protection",
];

/// The server scenarios that do not apply, and why. Each of the
/// `tools-call-*`-like scenarios calls a fixture tool of the suite's
/// reference server ("everything" server) by name; this server has its
/// own tools instead, so the call can only end in "tool not found".
const EXCLUDED: &[(&str, &str)] = &[
    (
        "logging-set-level",
        "no logging capability (logging/setLevel)",
    ),
    (
        "completion-complete",
        "no completion capability (completion/complete)",
    ),
    (
        "tools-call-simple-text",
        "calls the fixture tool `test_simple_text`",
    ),
    (
        "tools-call-image",
        "calls the fixture tool `test_image_content`",
    ),
    (
        "tools-call-audio",
        "calls the fixture tool `test_audio_content`",
    ),
    (
        "tools-call-embedded-resource",
        "calls the fixture tool `test_embedded_resource`",
    ),
    (
        "tools-call-mixed-content",
        "calls the fixture tool `test_multiple_content_types`",
    ),
    (
        "tools-call-with-logging",
        "no logging capability; calls the fixture tool `test_tool_with_logging`",
    ),
    (
        "tools-call-error",
        "calls the fixture tool `test_error_handling`",
    ),
    (
        "tools-call-with-progress",
        "calls the fixture tool `test_tool_with_progress`",
    ),
    (
        "tools-call-sampling",
        "calls the fixture tool `test_sampling` (this server never samples)",
    ),
    (
        "tools-call-elicitation",
        "calls the fixture tool `test_elicitation` (this server's elicitation, \
         for delete_account, is covered by the Python SDK case, tests/mcp/python.rs)",
    ),
    (
        "elicitation-sep1034-defaults",
        "calls the fixture tool `test_elicitation_sep1034_defaults`",
    ),
    (
        "elicitation-sep1330-enums",
        "calls the fixture tool `test_elicitation_sep1330_enums`",
    ),
    (
        "json-schema-2020-12",
        "looks for the fixture tool `json_schema_2020_12_tool` (pending in the suite)",
    ),
    ("resources-list", "no resources capability"),
    ("resources-read-text", "no resources capability"),
    ("resources-read-binary", "no resources capability"),
    ("resources-templates-read", "no resources capability"),
    ("resources-subscribe", "no resources capability"),
    ("resources-unsubscribe", "no resources capability"),
    ("prompts-list", "no prompts capability"),
    ("prompts-get-simple", "no prompts capability"),
    ("prompts-get-with-args", "no prompts capability"),
    ("prompts-get-embedded-resource", "no prompts capability"),
    ("prompts-get-with-image", "no prompts capability"),
];

/// How long one scenario may take (the suite's own waits are 10 s at most).
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(60);

/// Where `.ci/mcp-conformance-setup.sh` installs the suite and its Node.
const NODE22_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/node22");

/// A Node whose major version is 22 or more.
fn node22() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("IDEM_NODE22").map(PathBuf::from),
        Some(Path::new(NODE22_DIR).join("node_modules/.bin/node")),
    ];
    candidates.into_iter().flatten().find(|node| {
        Command::new(node)
            .arg("--version")
            .output()
            .ok()
            .filter(|out| out.status.success())
            .and_then(|out| {
                let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                version
                    .strip_prefix('v')?
                    .split('.')
                    .next()?
                    .parse::<u32>()
                    .ok()
            })
            .is_some_and(|major| major >= 22)
    })
}

/// The conformance suite's CLI script.
fn conformance_cli() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("IDEM_MCP_CONFORMANCE").map(PathBuf::from),
        Some(
            Path::new(NODE22_DIR)
                .join("node_modules/@modelcontextprotocol/conformance/dist/index.js"),
        ),
    ];
    candidates.into_iter().flatten().find(|cli| cli.is_file())
}

/// The example server, killed when dropped.
struct Server {
    child: Child,
    url: String,
    /// The server's stderr, line by line, after the line with the URL.
    log: mpsc::Receiver<String>,
}

impl Server {
    fn start(example: &Path, store_dir: &Path) -> Server {
        let mut child = Command::new(example)
            .args(["--http", "127.0.0.1:0"])
            .env(
                "IDEM_STORE",
                format!("sqlite://{}", store_dir.join("idem.db").display()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the example server starts");
        let stderr = child.stderr.take().unwrap();
        let (lines, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = Server {
            child,
            url: String::new(),
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut said = Vec::new();
        while server.url.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match server.log.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.split("serving on ").nth(1) {
                        server.url = rest.split(',').next().unwrap().trim().to_owned();
                    }
                    said.push(line);
                }
                Err(_) => panic!(
                    "the example server did not say where it serves:\n{}",
                    said.join("\n")
                ),
            }
        }
        assert!(
            server.url.starts_with("http://127.0.0.1:") && server.url.ends_with("/mcp"),
            "unexpected URL in {said:?}"
        );
        server
    }

    /// What the server has written to stderr since it said its URL.
    fn log(&self) -> String {
        self.log.try_iter().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `node cli args…` with stdout and stderr into `out` (stripped of the
/// suite's colours), killed after [`SCENARIO_TIMEOUT`].
fn run_cli(node: &Path, cli: &Path, args: &[&str], out: &Path) -> (Option<ExitStatus>, String) {
    let file = File::create(out).unwrap();
    let mut child = Command::new(node)
        .arg(cli)
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .expect("node runs");
    let deadline = Instant::now() + SCENARIO_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(out).unwrap_or_default();
    (status, strip_ansi(&text))
}

/// `text` without ANSI escape sequences (the suite colours its output
/// whatever `NO_COLOR` says).
fn strip_ansi(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// The server scenarios this version of the suite has, from `list --server`.
fn listed_scenarios(node: &Path, cli: &Path, dir: &Path) -> BTreeSet<String> {
    let (status, text) = run_cli(node, cli, &["list", "--server"], &dir.join("list.txt"));
    assert!(
        status.is_some_and(|s| s.success()),
        "conformance list --server failed:\n{text}"
    );
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// One scenario's checks, from the `checks.json` the suite saves under
/// `dir`: (id, status, error message).
fn checks(dir: &Path) -> Vec<(String, String, String)> {
    let Some(file) = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("checks.json"))
        .find(|path| path.is_file())
    else {
        return Vec::new();
    };
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let field =
        |check: &serde_json::Value, name: &str| check[name].as_str().unwrap_or_default().to_owned();
    json.as_array()
        .into_iter()
        .flatten()
        .map(|check| {
            (
                field(check, "id"),
                field(check, "status"),
                field(check, "errorMessage"),
            )
        })
        .collect()
}

#[test]
fn the_example_server_passes_the_mcp_conformance_suite() {
    let (Some(node), Some(cli)) = (node22(), conformance_cli()) else {
        idem_testkit::skip(
            "the_example_server_passes_the_mcp_conformance_suite",
            "Node 22 with @modelcontextprotocol/conformance (run .ci/mcp-conformance-setup.sh, \
             which installs both in target/node22, or set IDEM_NODE22 and IDEM_MCP_CONFORMANCE)",
        );
        return;
    };
    let dir = crate::mcp_example::TempDir::new();

    // Every scenario of the suite is either run or excluded with a reason:
    // a new version's new scenario has to be looked at.
    let listed = listed_scenarios(&node, &cli, &dir.0);
    let known: BTreeSet<String> = RUN
        .iter()
        .copied()
        .chain(EXCLUDED.iter().map(|(name, _)| *name))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        listed, known,
        "the suite's server scenarios (left) are not those this test runs or excludes (right): \
         add each new one to RUN or EXCLUDED"
    );

    let example = crate::mcp_example::binary();
    let server = Server::start(&example, &dir.0);
    let started = Instant::now();
    println!("conformance suite against {}", server.url);
    for (name, why) in EXCLUDED {
        println!("excluded {name}: {why}");
    }

    // The scenarios at once, each a client of its own (about 0.6 s each).
    let results: Vec<_> = std::thread::scope(|scope| {
        let runs: Vec<_> = RUN
            .iter()
            .map(|&scenario| {
                let (node, cli, url) = (&node, &cli, &server.url);
                let results = dir.0.join(scenario);
                scope.spawn(move || {
                    let results_dir = results.to_str().unwrap().to_owned();
                    let (status, output) = run_cli(
                        node,
                        cli,
                        &[
                            "server",
                            "--url",
                            url,
                            "--scenario",
                            scenario,
                            "--output-dir",
                            &results_dir,
                        ],
                        &results.with_extension("txt"),
                    );
                    (scenario, status, output, checks(&results))
                })
            })
            .collect();
        runs.into_iter().map(|run| run.join().unwrap()).collect()
    });

    let mut failed = Vec::new();
    for (scenario, status, output, checks) in &results {
        println!("=== {scenario} ===\n{output}");
        let failures: Vec<_> = checks
            .iter()
            .filter(|(_, status, _)| status == "FAILURE")
            .map(|(id, _, error)| format!("{id}: {error}"))
            .collect();
        let passed = checks.iter().any(|(_, status, _)| status == "SUCCESS");
        match status {
            None => failed.push(format!("{scenario}: timed out")),
            Some(status) if !status.success() => {
                failed.push(format!("{scenario} ({status}): {failures:?}"));
            }
            Some(_) if !failures.is_empty() => failed.push(format!("{scenario}: {failures:?}")),
            Some(_) if !passed => failed.push(format!("{scenario}: no check passed")),
            Some(_) => {}
        }
    }
    println!(
        "{} scenarios run, {} excluded, in {:.1?}",
        RUN.len(),
        EXCLUDED.len(),
        started.elapsed()
    );
    assert!(
        failed.is_empty(),
        "conformance scenarios failed:\n{}\n\nthe server's log:\n{}",
        failed.join("\n"),
        server.log()
    );
}
