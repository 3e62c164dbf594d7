//! `idem proxy` in front of MCP servers nobody on this project wrote: the
//! reference servers from npm (`@modelcontextprotocol/server-memory`,
//! `server-filesystem`, `server-everything`, which `.ci/mcp-servers-setup.sh`
//! installs in `target/mcp-servers`), run on the distribution's Node, with
//! the official Python MCP SDK as the client (`target/python-mcp`, or
//! `IDEM_PYTHON`). The client's cases are in `tests/python/proxy_clients.py`;
//! each counts the upstream's effects from the upstream itself, straight
//! and through the proxy. Upstreams are started over stdio, and reached
//! over streamable HTTP (`idem proxy --upstream URL`: server-everything's
//! HTTP mode, and `tests/python/slow_upstream.py` killed and restarted on
//! one listening socket).
//!
//! Without Node, the servers or the SDK the tests are skipped loudly, and
//! fail under `IDEM_REQUIRE_SERVERS=1`.

use std::path::PathBuf;
use std::process::Command;

use crate::support::IDEM;

/// The installed servers: `node_modules/@modelcontextprotocol`.
pub(crate) fn servers() -> Option<PathBuf> {
    let dir = idem_testkit::workspace_root()
        .join("target/mcp-servers/node_modules/@modelcontextprotocol");
    let all = ["server-memory", "server-filesystem", "server-everything"]
        .iter()
        .all(|name| dir.join(name).join("dist/index.js").is_file());
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    (all && node).then_some(dir)
}

pub(crate) const SERVERS: &str =
    "Node and the npm MCP servers (.ci/mcp-servers-setup.sh installs them in target/mcp-servers)";

/// Kept for reading: a file under `target/tmp`.
fn keep(name: &str, text: &str) {
    let dir = idem_testkit::workspace_root().join("target/tmp");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(name), text);
}

fn print_config(servers: &std::path::Path, server: &str, args: &[&str]) -> String {
    let dir = idem_testkit::TempDir::new("idem-proxy-print").unwrap();
    let script = servers.join(server).join("dist/index.js");
    let out = Command::new(IDEM)
        .args(["proxy", "--print-config", "--", "node"])
        .arg(&script)
        .args(args)
        .env(
            "IDEM_STORE",
            format!("sqlite://{}", dir.path().join("idem.db").display()),
        )
        .env("MEMORY_FILE_PATH", dir.path().join("memory.jsonl"))
        .current_dir(dir.path())
        .output()
        .expect("idem runs");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !dir.path().join("idem.db").exists(),
        "--print-config opens no store"
    );
    text
}

/// The class `text` (a printed configuration) gives `tool`.
fn class_of<'a>(text: &'a str, tool: &str) -> &'a str {
    let header = format!("[tools.{tool}]\nclass = \"");
    let at = text
        .find(&header)
        .unwrap_or_else(|| panic!("{tool} in:\n{text}"))
        + header.len();
    let end = text[at..].find('"').unwrap();
    &text[at..at + end]
}

#[test]
fn print_config_infers_each_tool_class_from_the_servers_annotations() {
    let Some(servers) = servers() else {
        idem_testkit::skip(
            "print_config_infers_each_tool_class_from_the_servers_annotations",
            SERVERS,
        );
        return;
    };
    let memory = print_config(&servers, "server-memory", &[]);
    keep("proxy-memory.toml", &memory);
    assert!(memory.contains("name = \"memory-server\""), "{memory}");
    assert_eq!(class_of(&memory, "create_entities"), "non_idempotent_write");
    assert_eq!(class_of(&memory, "delete_entities"), "irreversible");
    assert_eq!(class_of(&memory, "read_graph"), "read");
    // A comment on every guess: each tool's class is guessed here.
    let tools = memory.matches("\n[tools.").count();
    assert_eq!(memory.matches("\n# Guessed: ").count(), tools, "{memory}");

    let files = tempdir_path();
    let filesystem = print_config(&servers, "server-filesystem", &[files.as_str()]);
    keep("proxy-filesystem.toml", &filesystem);
    assert_eq!(class_of(&filesystem, "edit_file"), "irreversible");
    assert_eq!(
        class_of(&filesystem, "create_directory"),
        "idempotent_write"
    );
    assert_eq!(class_of(&filesystem, "read_text_file"), "read");
}

fn tempdir_path() -> String {
    std::env::temp_dir().display().to_string()
}

const PYTHON: &str =
    "Python with the MCP SDK (`mcp` on PyPI; .ci/run installs it in target/python-mcp)";

/// The Python client's cases: every one but those naming a store server
/// of their own (`cases: None`), or those `cases` name, with `envs`.
pub fn python_cases(
    what: &str,
    cases: Option<&str>,
    envs: &[(&str, &std::ffi::OsStr)],
    keep_as: &str,
) {
    let Some(servers) = servers() else {
        idem_testkit::skip(what, SERVERS);
        return;
    };
    let Some(python) = idem_testkit::python_mcp() else {
        idem_testkit::skip(what, PYTHON);
        return;
    };
    let mut all = vec![
        ("IDEM_BIN", IDEM.as_ref()),
        ("IDEM_MCP_SERVERS", servers.as_os_str()),
    ];
    all.extend_from_slice(envs);
    if let Some(cases) = cases {
        all.push(("IDEM_PROXY_CASES", cases.as_ref()));
    }
    idem_testkit::run_python_clients(
        &python,
        std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/python/proxy_clients.py"
        )),
        &all,
        keep_as,
    );
}

#[test]
fn the_python_sdk_through_idem_proxy_gets_one_upstream_effect_per_intent() {
    python_cases(
        "the_python_sdk_through_idem_proxy_gets_one_upstream_effect_per_intent",
        None,
        &[],
        "proxy-python-transcript.md",
    );
}

/// Two `idem proxy --listen` on one PostgreSQL server, behind a
/// round-robin balancer the Python client runs: a call asked through one
/// and approved is run through the other, once.
#[test]
fn two_proxies_on_one_postgresql_behind_a_balancer_are_one_record_space() {
    on_postgresql(
        "two_proxies_on_one_postgresql_behind_a_balancer_are_one_record_space",
        "two_instances",
        "proxy-two-instances-transcript.md",
    );
}

/// The Python client's case `case`, with instances on a PostgreSQL
/// server of its own.
fn on_postgresql(what: &str, case: &str, keep_as: &str) {
    let Some(server) = idem_testkit::PostgresServer::start() else {
        idem_testkit::skip(what, "PostgreSQL");
        return;
    };
    let url = server.url();
    python_cases(
        what,
        Some(case),
        &[("IDEM_TWO_INSTANCES_STORE", url.as_ref())],
        keep_as,
    );
}

/// `idem proxy --listen` stopped by SIGTERM with three calls under way:
/// each finishes, is answered and recorded, and the proxy exits 0; with a
/// grace shorter than the calls, or on a second SIGTERM, it stops at once
/// and names each call left; Ctrl-C in its terminal (SIGINT to the process
/// group) leaves the upstream it started running until its call is done
/// (`tests/python/proxy_ops.py`).
#[test]
fn sigterm_drains_the_calls_under_way_and_names_those_left() {
    python_cases(
        "sigterm_drains_the_calls_under_way_and_names_those_left",
        Some("drained_on_sigterm grace_runs_out second_signal ctrl_c_in_a_terminal"),
        &[],
        "proxy-stop-transcript.md",
    );
}

/// What an operator reads from `idem proxy --listen`: one access line per
/// call in the JSON log (principal, tool, key, class, outcome,
/// deduplicated, ms; never the bearer token), and a session's `DELETE`
/// answered 204 (`tests/python/proxy_ops.py`).
#[test]
fn each_call_writes_one_access_line_and_a_session_ends_with_204() {
    python_cases(
        "each_call_writes_one_access_line_and_a_session_ends_with_204",
        Some("access_logged session_deleted"),
        &[],
        "proxy-ops-transcript.md",
    );
}

/// `/healthz` and `/readyz` of `idem proxy --listen` (in front of
/// server-everything over HTTP) and of `idem serve`, both on a Redis
/// server: ready; the Redis server stopped, each names the store (and
/// only it) with 503 while `/healthz` stays 200; back, ready; the upstream
/// killed, the proxy names it; restarted, ready (`tests/python/proxy_ops.py`).
#[test]
fn readyz_names_the_store_or_the_upstream_that_is_down() {
    python_cases(
        "readyz_names_the_store_or_the_upstream_that_is_down",
        Some("health_and_readiness"),
        &[],
        "proxy-health-transcript.md",
    );
}

/// `/metrics` of `idem proxy --listen` after three calls (two keys, one
/// sent twice) and during a fourth, read by a scraper that parses
/// Prometheus's text format: the calls of `append` by outcome are 2
/// executed and 1 deduplicated, the store's open records 1 in flight, 0
/// pending, 0 unknown, the store's claims and completions timed, and no
/// label holds a key or an argument (`tests/python/proxy_ops.py`).
#[test]
fn metrics_count_the_calls_made_by_tool_class_and_outcome() {
    python_cases(
        "metrics_count_the_calls_made_by_tool_class_and_outcome",
        Some("metrics_scraped"),
        &[],
        "proxy-metrics-transcript.md",
    );
}

/// `idem proxy --listen --principals FILE`: alice, a call under way in one
/// MCP session, opens 70 more and keeps 64, the busy one among them and
/// the seven idle the longest closed; bob, holding one of hers,
/// can neither use nor end it (404, as for an unknown session), and she
/// still can (`tests/python/proxy_ops.py`).
#[test]
fn a_principal_holds_at_most_64_sessions_and_no_one_uses_anothers() {
    python_cases(
        "a_principal_holds_at_most_64_sessions_and_no_one_uses_anothers",
        Some("sessions_bounded"),
        &[],
        "proxy-sessions-transcript.md",
    );
}

/// `idem proxy --listen`: a body cut short is answered JSON-RPC's `-32700`
/// (rmcp: 415 and text), a `tools/call` with an array of arguments
/// `-32602` (rmcp: `-32601`), and nothing runs (`tests/python/proxy_ops.py`).
#[test]
fn json_rpc_errors_are_json_rpcs_own_over_http() {
    python_cases(
        "json_rpc_errors_are_json_rpcs_own_over_http",
        Some("jsonrpc_errors"),
        &[],
        "proxy-jsonrpc-transcript.md",
    );
}

/// `idem proxy --listen --config FILE`: a tool's `timeout` changed in the
/// file and SIGHUP, and a held call ends after the new second instead of
/// five minutes; a file that changes the tool's class, or cannot be
/// parsed, is not loaded and changes nothing (`tests/python/proxy_ops.py`).
#[test]
fn sighup_reloads_a_tools_timeout_and_refuses_a_change_of_class() {
    python_cases(
        "sighup_reloads_a_tools_timeout_and_refuses_a_change_of_class",
        Some("config_reloaded"),
        &[],
        "proxy-config-reload-transcript.md",
    );
}

/// `idem proxy --listen --principals FILE`: bob added to the file, SIGHUP,
/// and his token works without a restart; a broken file on the next
/// SIGHUP keeps the principals loaded, and says why on stderr
/// (`tests/python/proxy_ops.py`).
#[test]
fn sighup_reloads_the_principals_and_a_broken_file_keeps_the_old_set() {
    python_cases(
        "sighup_reloads_the_principals_and_a_broken_file_keeps_the_old_set",
        Some("principals_reloaded"),
        &[],
        "proxy-reload-transcript.md",
    );
}

/// `idem proxy` with `args`: its exit code and stderr.
fn refused(args: &[&str]) -> (Option<i32>, String) {
    let dir = idem_testkit::TempDir::new("idem-proxy-refused").unwrap();
    let out = Command::new(IDEM)
        .arg("proxy")
        .args(args)
        .env(
            "IDEM_STORE",
            format!("sqlite://{}", dir.path().join("idem.db").display()),
        )
        .output()
        .expect("idem runs");
    assert!(
        !dir.path().join("idem.db").exists(),
        "a refused command line opens no store"
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A non-loopback `--listen` without TLS is refused before it is bound:
/// with its port already taken, the refusal is still the plain-HTTP one,
/// not "address in use" (before, the proxy bound it first).
#[test]
fn a_refused_listen_address_is_never_bound() {
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let address = format!("0.0.0.0:{}", taken.local_addr().unwrap().port());
    let (code, stderr) = refused(&["--listen", &address, "--", "true"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("not a loopback address"), "{stderr}");
    assert!(!stderr.contains("in use"), "{stderr}");
}

#[test]
fn an_upstream_url_it_cannot_use_is_refused_before_anything_is_sent() {
    // A token from the command line itself is no option: only from a file
    // or the environment, and one that is not there is refused.
    let (code, stderr) = refused(&[
        "--upstream",
        "https://mcp.example.com/mcp",
        "--upstream-token-env",
        "IDEM_TEST_NO_SUCH_VARIABLE",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("IDEM_TEST_NO_SUCH_VARIABLE"), "{stderr}");

    let (code, stderr) = refused(&["--upstream", "ftp://127.0.0.1/mcp"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("ftp://127.0.0.1/mcp"), "{stderr}");

    // An upstream, or a command to start one: not both, and one of them.
    let (code, stderr) = refused(&["--upstream", "http://127.0.0.1:9/mcp", "--", "node"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("cannot be used with"), "{stderr}");
    let (code, stderr) = refused(&[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("required"), "{stderr}");
}

/// `idem proxy [ARGS] -- node SERVER [SERVER_ARGS]` over stdio, recording
/// in `dir`, killed after `seconds`: a request left unanswered fails the
/// test, it does not hang it.
pub(crate) fn stdio_proxy(
    dir: &idem_testkit::TempDir,
    args: &[&std::ffi::OsStr],
    server: &std::path::Path,
    server_args: &[&std::ffi::OsStr],
    seconds: u64,
) -> std::process::Child {
    let proxy = Command::new(IDEM)
        .arg("proxy")
        .args(args)
        .args(["--", "node"])
        .arg(server)
        .args(server_args)
        .env(
            "IDEM_STORE",
            format!("sqlite://{}", dir.path().join("idem.db").display()),
        )
        .env("MEMORY_FILE_PATH", dir.path().join("memory.jsonl"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("idem runs");
    let pid = proxy.id().to_string();
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(seconds));
        let _ = Command::new("kill").args(["-9", &pid]).status();
    });
    proxy
}

/// A client sending broken lines over stdio (malformed JSON, a `_meta`
/// of the wrong type, arguments nested too deep) gets an answer for each,
/// with the request's id where it has one, and the session goes on: no
/// request is left waiting for ever.
#[test]
fn every_broken_request_over_stdio_is_answered_and_the_session_goes_on() {
    use std::io::{BufRead, BufReader, Write};
    let what = "every_broken_request_over_stdio_is_answered_and_the_session_goes_on";
    let Some(servers) = servers() else {
        idem_testkit::skip(what, SERVERS);
        return;
    };
    let dir = idem_testkit::TempDir::new("idem-proxy-broken").unwrap();
    let mut proxy = stdio_proxy(
        &dir,
        &[],
        &servers.join("server-memory/dist/index.js"),
        &[],
        30,
    );
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"read_graph","arguments":{{"a":{}{}}}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list""#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read_graph","arguments":{},"_meta":"x"}}"#,
        &deep,
        r#"{"jsonrpc":"2.0","id":5,"method":"ping"}"#,
    ];
    let mut stdin = proxy.stdin.take().unwrap();
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    let mut answers = BufReader::new(proxy.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    // Four answers after initialize's: three errors, then the ping.
    for _ in 0..5 {
        let line = answers.next().expect("an answer").unwrap();
        let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
        seen.push((answer["id"].clone(), answer["error"]["code"].clone()));
    }
    drop(stdin);
    let _ = proxy.wait();
    use serde_json::json;
    assert_eq!(
        seen[1..],
        [
            (json!(null), json!(-32700)),
            (json!(3), json!(-32602)),
            (json!(4), json!(-32600)),
            (json!(5), json!(null)),
        ],
        "{seen:?}"
    );
}

/// A client that declares MCP's tasks extension, over stdio: a write that
/// runs longer than `[server] tasks_after` is answered with a task while
/// it goes on upstream, `tasks/get` says working, then completes with the
/// upstream's own result; the upstream ran it once.
#[test]
fn a_long_write_through_the_proxy_becomes_a_task_that_completes_with_its_result() {
    use serde_json::{json, Value};
    use std::io::{BufRead, BufReader, Write};
    let what = "a_long_write_through_the_proxy_becomes_a_task_that_completes_with_its_result";
    let Some(servers) = servers() else {
        idem_testkit::skip(what, SERVERS);
        return;
    };
    let dir = idem_testkit::TempDir::new("idem-proxy-task").unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        "[server]\ntasks_after = \"1s\"\n\n[tools.trigger-long-running-operation]\nclass = \"non_idempotent_write\"\n",
    )
    .unwrap();
    let server = servers.join("server-everything/dist/index.js");
    let mut proxy = stdio_proxy(
        &dir,
        &["--config".as_ref(), config.as_os_str()],
        &server,
        &[],
        40,
    );
    let mut stdin = proxy.stdin.take().unwrap();
    let mut lines = BufReader::new(proxy.stdout.take().unwrap()).lines();
    // The answer to request `id` (notifications and progress skipped).
    let mut send = |request: Value| -> Value {
        writeln!(stdin, "{request}").unwrap();
        let Some(id) = request.get("id").cloned() else {
            return Value::Null;
        };
        loop {
            let line = lines.next().expect("an answer").unwrap();
            let answer: Value = serde_json::from_str(&line).unwrap();
            if answer["id"] == id {
                return answer;
            }
        }
    };
    let started = std::time::Instant::now();
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "clientInfo": {"name": "probe", "version": "1"}}}),
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "trigger-long-running-operation",
        "arguments": {"duration": 3, "steps": 3}}});
    let answered = send(call);
    let waited = started.elapsed();
    let task = &answered["result"];
    let id = task["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {answered}"));
    assert_eq!(task["status"], "working", "{answered}");
    assert!(
        waited < std::time::Duration::from_secs(3),
        "answered before the call ended: {waited:?}"
    );
    let mut polls = 0;
    let completed = loop {
        polls += 1;
        let got = send(
            json!({"jsonrpc": "2.0", "id": 100 + polls, "method": "tasks/get",
            "params": {"taskId": id}}),
        );
        assert!(got.get("error").is_none(), "{got}");
        if got["result"]["status"] == "completed" {
            break got;
        }
        assert_eq!(got["result"]["status"], "working", "{got}");
        assert!(polls < 60, "no completion: {got}");
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    let text = completed["result"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.starts_with("Long running operation completed"),
        "the upstream's result as it came: {completed}"
    );
    assert!(polls > 1, "it was working before it completed");
    assert_eq!(
        completed["result"]["result"]["_meta"]["io.idem/deduplicated"],
        json!(false),
        "{completed}"
    );
    drop(stdin);
    let _ = proxy.wait();
}

/// Two `idem proxy --listen` over HTTPS on one PostgreSQL server; one is killed
/// (`SIGKILL`) while its upstream call of a `non_idempotent_write` is
/// running, and the key is retried through the other: answered as unknown
/// within one lease (not after the tool's ten-minute timeout), listed for
/// an operator, run upstream once.
#[test]
fn an_instance_killed_mid_call_is_answered_unknown_through_another_within_a_lease() {
    on_postgresql(
        "an_instance_killed_mid_call_is_answered_unknown_through_another_within_a_lease",
        "dead_instance",
        "proxy-dead-instance-transcript.md",
    );
}

/// PyPI's `mcp-server-git`, which `.ci/run` installs in a virtual
/// environment of its own, `target/mcp-server-git`.
fn mcp_server_git() -> Option<PathBuf> {
    let program = idem_testkit::workspace_root().join("target/mcp-server-git/bin/mcp-server-git");
    program.exists().then_some(program)
}

/// One proxy in front of three upstreams (`[[upstream]]` tables): git
/// (PyPI's `mcp-server-git`, real branches), npm's `server-memory` and
/// the slow upstream over HTTP, killed and started again while the
/// others serve; prefixes, include and exclude lists; one effect per
/// intent, counted at the source.
#[test]
fn one_proxy_serves_three_upstreams_behind_prefixes_and_survives_one_restarting() {
    let what = "one_proxy_serves_three_upstreams_behind_prefixes_and_survives_one_restarting";
    let Some(git) = mcp_server_git() else {
        idem_testkit::skip(
            what,
            "PyPI's mcp-server-git (.ci/run installs it in target/mcp-server-git)",
        );
        return;
    };
    python_cases(
        what,
        Some("gateway"),
        &[("IDEM_MCP_SERVER_GIT", git.as_os_str())],
        "proxy-gateway-transcript.md",
    );
}

/// The soak of the deployed stack: two proxies on one PostgreSQL server,
/// every class (an operator approving the irreversible calls with `idem
/// approve` meanwhile), instances killed (-9) and stopped (SIGTERM) and
/// started again every three seconds, and PostgreSQL restarted (as a crash
/// would stop it) every seven: no non-idempotent or irreversible write runs
/// twice, no success lacks its effect, every intent is answered, no request
/// waits longer than its timeout and a lease. `IDEM_SOAK_CALLS` intents per
/// class (75 by default).
#[test]
fn a_soak_of_two_proxies_with_kills_stops_and_store_restarts_duplicates_and_loses_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let what =
        "a_soak_of_two_proxies_with_kills_stops_and_store_restarts_duplicates_and_loses_nothing";
    let Some(server) = idem_testkit::PostgresServer::start() else {
        idem_testkit::skip(what, "PostgreSQL");
        return;
    };
    let url = server.url();
    let server = Arc::new(Mutex::new(server));
    let done = Arc::new(AtomicBool::new(false));
    let restarts = std::thread::spawn({
        let (server, done) = (server.clone(), done.clone());
        move || {
            let mut restarts = 0;
            'soak: loop {
                for _ in 0..70 {
                    if done.load(Ordering::SeqCst) {
                        break 'soak;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                server.lock().unwrap().restart();
                restarts += 1;
            }
            restarts
        }
    });
    python_cases(
        what,
        Some("soak"),
        &[("IDEM_TWO_INSTANCES_STORE", url.as_ref())],
        "proxy-soak-transcript.md",
    );
    done.store(true, Ordering::SeqCst);
    let restarts = restarts.join().unwrap();
    eprintln!("{what}: PostgreSQL restarted {restarts} times during the soak");
    assert!(restarts >= 1, "the store was restarted under the soak");
}
