//! Per-tool policy in the proxy's configuration file, through `idem proxy`
//! in front of npm's `server-filesystem` on a directory of the test's own,
//! its effects read from the directory itself: a tool's repeat window,
//! a tool that refuses calls without a key, errors the file names
//! transient (not recorded, so the same call runs again once the cause is
//! gone), and the catalog the proxy writes for the inbox. A file that
//! cannot be used is refused naming the tool and the field.

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command};

use serde_json::{json, Value};

use crate::support::serve::{Http, Serve};
use crate::support::IDEM;
use crate::upstreams::{servers, stdio_proxy, SERVERS};

/// A client of the proxy over stdio, speaking JSON-RPC by hand.
struct Session {
    proxy: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Session {
    /// Initialized.
    fn start(mut proxy: Child) -> Session {
        let stdin = proxy.stdin.take().unwrap();
        let lines = BufReader::new(proxy.stdout.take().unwrap()).lines();
        let mut session = Session {
            proxy,
            stdin,
            lines,
            next_id: 0,
        };
        session.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "probe", "version": "1"}}),
        );
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        writeln!(session.stdin, "{initialized}").unwrap();
        session
    }

    /// The result of `method` (notifications skipped).
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{request}").unwrap();
        loop {
            let line = self.lines.next().expect("an answer").unwrap();
            let answer: Value = serde_json::from_str(&line).unwrap();
            if answer["id"] == json!(id) {
                assert!(answer.get("error").is_none(), "{request}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Call `tool` with `arguments`, and `meta` when given.
    fn call(&mut self, tool: &str, arguments: Value, meta: Option<Value>) -> Value {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        self.request("tools/call", params)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.proxy.kill();
        let _ = self.proxy.wait();
    }
}

/// The answer's text.
fn text(answer: &Value) -> String {
    answer["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The entry of `list`'s `tools` (a `tools/list` result, a catalog)
/// called `name`.
fn named(list: &Value, name: &str) -> Value {
    let tools = list["tools"].as_array().unwrap();
    let found = tools.iter().find(|t| t["name"] == name).cloned();
    found.unwrap_or_else(|| panic!("{name} in {list}"))
}

fn deduplicated(answer: &Value) -> bool {
    answer["_meta"]["io.idem/deduplicated"] == json!(true)
}

/// The configuration of the scenario: every option this module is about,
/// and the catalog written to `catalog`.
fn configuration(catalog: &std::path::Path) -> String {
    format!(
        r#"[server]
catalog = "{}"

[tools.move_file]
class = "non_idempotent_write"
description = "Moves a file of the team's share: the old name is gone after."
transient = ["ENOENT"]

[tools.edit_file]
class = "non_idempotent_write"

[tools.write_file]
class = "non_idempotent_write"
window = "1s"

[tools.create_directory]
class = "idempotent_write"
unkeyed = "refuse"
"#,
        catalog.display()
    )
}

#[test]
fn per_tool_windows_refusals_transient_errors_and_descriptions_through_the_proxy() {
    let what = "per_tool_windows_refusals_transient_errors_and_descriptions_through_the_proxy";
    let Some(servers) = servers() else {
        idem_testkit::skip(what, SERVERS);
        return;
    };
    let dir = idem_testkit::TempDir::new("idem-proxy-policy").unwrap();
    let share = dir.path().join("share");
    std::fs::create_dir(&share).unwrap();
    let share = share.canonicalize().unwrap();
    let (config, catalog) = (dir.path().join("proxy.toml"), dir.path().join("tools.json"));
    std::fs::write(&config, configuration(&catalog)).unwrap();
    let proxy = stdio_proxy(
        &dir,
        &["--config".as_ref(), config.as_os_str()],
        &servers.join("server-filesystem/dist/index.js"),
        &[share.as_os_str()],
        60,
    );
    let mut session = Session::start(proxy);
    let path = |name: &str| share.join(name).display().to_string();

    // An error the file names transient: answered as such, not recorded,
    // so the same call runs once its cause is gone.
    let moving = json!({"source": path("a.txt"), "destination": path("b.txt")});
    let failed = session.call("move_file", moving.clone(), None);
    assert_eq!(failed["isError"], json!(true), "{failed}");
    assert_eq!(
        failed["_meta"]["io.idem/error"]["kind"],
        json!("transient"),
        "{failed}"
    );
    let said = text(&failed);
    assert!(
        said.contains("ENOENT") && said.contains("Nothing happened"),
        "{failed}"
    );
    std::fs::write(share.join("a.txt"), "a").unwrap();
    let moved = session.call("move_file", moving, None);
    assert_ne!(moved["isError"], json!(true), "{moved}");
    assert!(!deduplicated(&moved), "{moved}");
    assert!(share.join("b.txt").exists() && !share.join("a.txt").exists());

    // The same error of a tool the file says nothing of: the tool's
    // failure, recorded, and the same call answered with it.
    let editing = json!({"path": path("c.txt"), "edits": [{"oldText": "x", "newText": "y"}]});
    let failed = session.call("edit_file", editing.clone(), None);
    assert_eq!(failed["isError"], json!(true), "{failed}");
    std::fs::write(share.join("c.txt"), "x").unwrap();
    let again = session.call("edit_file", editing, None);
    assert!(deduplicated(&again), "answered from the record: {again}");
    assert_eq!(std::fs::read_to_string(share.join("c.txt")).unwrap(), "x");

    // A window of its own: the same call within a second is one effect;
    // after it, another.
    let writing = json!({"path": path("w.txt"), "content": "w"});
    let first = session.call("write_file", writing.clone(), None);
    assert!(!deduplicated(&first), "{first}");
    let repeat = session.call("write_file", writing.clone(), None);
    assert!(deduplicated(&repeat), "{repeat}");
    std::fs::remove_file(share.join("w.txt")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1300));
    let later = session.call("write_file", writing, None);
    assert!(!deduplicated(&later), "{later}");
    assert!(
        share.join("w.txt").exists(),
        "written again after the window"
    );

    // A tool that refuses calls without a key runs those with one.
    let making = json!({"path": path("d")});
    let refused = session.call("create_directory", making.clone(), None);
    assert_eq!(refused["isError"], json!(true), "{refused}");
    assert!(!share.join("d").exists(), "nothing ran: {refused}");
    let keyed = json!({"io.idem/idempotencyKey": "make-d-1"});
    let made = session.call("create_directory", making, Some(keyed));
    assert_ne!(made["isError"], json!(true), "{made}");
    assert!(share.join("d").is_dir());

    // What the model reads of each tool's keying.
    let listed = session.request("tools/list", json!({}));
    let tool = |name: &str| named(&listed, name);
    assert_eq!(tool("write_file")["_meta"]["io.idem/keying"], "window");
    assert!(
        tool("write_file")["description"]
            .as_str()
            .unwrap()
            .contains("within 1 second"),
        "{}",
        tool("write_file")
    );
    assert_eq!(
        tool("create_directory")["_meta"]["io.idem/keying"],
        "key-required"
    );
    assert_eq!(tool("edit_file")["_meta"]["io.idem/keying"], "window");

    // The catalog for the inbox: the file's description where it gives
    // one, else the upstream's; every tool's class.
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&catalog).unwrap()).unwrap();
    let entry = |name: &str| named(&written, name);
    assert_eq!(
        entry("move_file")["description"],
        "Moves a file of the team's share: the old name is gone after."
    );
    assert_eq!(entry("move_file")["class"], "non_idempotent_write");
    let upstream = tool("edit_file")["description"]
        .as_str()
        .unwrap()
        .to_owned();
    let edit = entry("edit_file")["description"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        !edit.is_empty() && upstream.starts_with(&edit[..20]),
        "{edit}"
    );
    assert_eq!(entry("read_text_file")["class"], "read");

    // `idem serve --tools` with that file shows the person the tool's
    // description beside its record.
    let store = format!("sqlite://{}", dir.path().join("idem.db").display());
    let serve = Serve::start(
        &store,
        Some(&std::fs::read_to_string(&catalog).unwrap()),
        &[],
    );
    let key = moved["_meta"]["io.idem/key"].as_str().expect("a key");
    let page = serve.url(&format!("/api/records/{key}"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let shown = runtime
        .block_on(Http::default().api("GET", &page, &serve.token, None))
        .json();
    assert_eq!(
        shown["description"], "Moves a file of the team's share: the old name is gone after.",
        "{shown}"
    );
    assert_eq!(shown["class"], "non_idempotent_write", "{shown}");
}

/// A file the proxy cannot use is refused before anything starts, with
/// the tool and the field named (a usage error: exit code 2).
#[test]
fn a_tool_option_it_cannot_use_is_refused_naming_the_tool_and_the_field() {
    let dir = idem_testkit::TempDir::new("idem-proxy-bad-policy").unwrap();
    let config = dir.path().join("proxy.toml");
    for (text, expected) in [
        (
            "[tools.git_commit]\nwindow = \"soon\"\n",
            "[tools.\"git_commit\"] window = \"soon\"",
        ),
        (
            "[tools.git_push]\nunkeyed = \"refuse\"\nwindow = \"1m\"\n",
            "[tools.\"git_push\"] sets both unkeyed = \"refuse\" and window",
        ),
        (
            "[tools.git_log]\ntransient = [\"\"]\n",
            "[tools.\"git_log\"] transient = \"\"",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let out = Command::new(IDEM)
            .arg("proxy")
            .arg("--config")
            .arg(&config)
            .args(["--", "node", "no-such-server.js"])
            .env(
                "IDEM_STORE",
                format!("sqlite://{}", dir.path().join("idem.db").display()),
            )
            .output()
            .expect("idem runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
        assert!(!dir.path().join("idem.db").exists(), "no store opened");
    }
}
