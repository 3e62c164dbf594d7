//! `idem serve` as a person runs it: the real binary on a store, with an
//! approvers file written by `idem approver`, listening on a free loopback
//! port; and the plain HTTP client (`http.rs`) signed in through its
//! form.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idem::prelude::*;
use idem::{ToolCall, ToolResult};
use idem_testkit::TempDir;
use serde_json::Value;

use super::tools::{charge_card, delete_account, delete_call, dispatcher, tenant, App};
use super::IDEM;

pub use super::http::{hidden, Http, Reply};

/// The approver who may decide, and their password.
pub const DANA: (&str, &str) = ("dana", "correct horse battery staple");
/// The viewer, and their password.
pub const VIC: (&str, &str) = ("vic", "viewer password only");

/// A running `idem serve`, stopped on drop.
pub struct Serve {
    child: Child,
    /// `http://127.0.0.1:PORT` (`https://` when served over TLS).
    pub base: String,
    /// An API token of the approver `bot`.
    pub token: String,
    /// An API token of the viewer `watcher`.
    pub viewer_token: String,
    /// The API tokens of the other approvers ([`Serve::with_rules`]), by
    /// name.
    pub tokens: HashMap<String, String>,
    /// The approvers file.
    pub approvers: std::path::PathBuf,
    /// Its command line, to restart it with.
    args: Vec<std::ffi::OsString>,
    /// The approvers file's directory, shared with [`Serve::another`].
    _dir: std::sync::Arc<TempDir>,
    /// What it said on stderr after the line with its address.
    said: Said,
}

/// A server's stderr, kept as it comes.
type Said = std::sync::Arc<std::sync::Mutex<String>>;

/// `idem approver ARGS` with `stdin`: the entry it printed, and stderr.
fn approver(args: &[&str], stdin: &str) -> (String, String) {
    use std::io::Write;
    let mut child = Command::new(IDEM)
        .arg("approver")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run idem approver");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "idem approver {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// A new API token for the approver `name`: the approvers-file entry
/// `idem approver token NAME` writes, and the token.
pub fn token_entry(name: &str) -> (String, String) {
    let (entry, said) = approver(&["token", name], "");
    (entry, said.lines().last().unwrap().trim().to_owned())
}

/// The approvers-file entry `idem approver password NAME` writes for
/// `password`.
pub fn approver_entry(name: &str, password: &str) -> String {
    approver(&["password", name], &format!("{password}\n")).0
}

impl Serve {
    /// `idem serve` on the store at `url`, with approvers dana (approver,
    /// password), vic (viewer, password), bot (approver, token) and
    /// watcher (viewer, token), the tool catalog `catalog` (JSON) and
    /// `extra` arguments.
    pub fn start(url: &str, catalog: Option<&str>, extra: &[&str]) -> Serve {
        Serve::with_rules(url, catalog, extra, &[], "")
    }

    /// [`Serve::start`], with an approver with an API token for each of
    /// `bots`, and `rules` (`[[rule]]` tables) in the approvers file.
    pub fn with_rules(
        url: &str,
        catalog: Option<&str>,
        extra: &[&str],
        bots: &[&str],
        rules: &str,
    ) -> Serve {
        Serve::configured(url, catalog, extra, bots, rules, None)
    }

    /// [`Serve::start`], in a process that may open at most `descriptors`
    /// files and sockets (its soft and hard `RLIMIT_NOFILE`, set by
    /// util-linux's `prlimit`).
    pub fn with_descriptor_limit(url: &str, descriptors: u32) -> Serve {
        Serve::configured(url, None, &[], &[], "", Some(descriptors))
    }

    fn configured(
        url: &str,
        catalog: Option<&str>,
        extra: &[&str],
        bots: &[&str],
        rules: &str,
        descriptors: Option<u32>,
    ) -> Serve {
        let dir = TempDir::new("idem-serve").unwrap();
        let mut file = String::new();
        file.push_str(&approver(&["password", DANA.0], &format!("{}\n", DANA.1)).0);
        file.push_str(
            &approver(
                &["password", VIC.0, "--role", "viewer"],
                &format!("{}\n", VIC.1),
            )
            .0,
        );
        let (entry, said) = approver(&["token", "bot"], "");
        file.push_str(&entry);
        let token = said.lines().last().unwrap().trim().to_owned();
        let (entry, said) = approver(&["token", "watcher", "--role", "viewer"], "");
        file.push_str(&entry);
        let viewer_token = said.lines().last().unwrap().trim().to_owned();
        let mut tokens = HashMap::new();
        for bot in bots {
            let (entry, said) = approver(&["token", bot], "");
            file.push_str(&entry);
            tokens.insert(
                (*bot).to_owned(),
                said.lines().last().unwrap().trim().to_owned(),
            );
        }
        file.push_str(rules);
        let approvers = dir.path().join("approvers.toml");
        std::fs::write(&approvers, file).unwrap();
        let mut command = Command::new(IDEM);
        command
            .args([
                "--store",
                url,
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--refresh",
                "200ms",
            ])
            .arg("--approvers")
            .arg(&approvers);
        if let Some(catalog) = catalog {
            let path = dir.path().join("tools.json");
            std::fs::write(&path, catalog).unwrap();
            command.arg("--tools").arg(path);
        }
        command.args(extra);
        let args: Vec<std::ffi::OsString> = command.get_args().map(|a| a.to_owned()).collect();
        let (child, base, said) = spawn(&args, descriptors);
        Serve {
            child,
            base,
            said,
            token,
            viewer_token,
            tokens,
            approvers,
            args,
            _dir: std::sync::Arc::new(dir),
        }
    }

    /// A second `idem serve` with this one's command line (its store, its
    /// approvers file), on a port of its own: two instances behind one
    /// load balancer.
    pub fn another(&self) -> Serve {
        let (child, base, said) = spawn(&self.args, None);
        Serve {
            child,
            base,
            said,
            token: self.token.clone(),
            viewer_token: self.viewer_token.clone(),
            tokens: self.tokens.clone(),
            approvers: self.approvers.clone(),
            args: self.args.clone(),
            _dir: self._dir.clone(),
        }
    }

    /// `base` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Send the server SIGINT, as Ctrl-C in its terminal would.
    pub fn interrupt(&self) {
        self.signal("INT");
    }

    /// Send the server the signal `name` (`TERM`, `INT`).
    pub fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    /// What the server said on stderr since it said where it listens.
    pub fn said(&self) -> String {
        self.said.lock().unwrap().clone()
    }

    /// Wait (at most 10 s) until the server has said `words` `times` times
    /// on stderr.
    pub fn said_within(&self, words: &str, times: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let said = self.said();
            if said.matches(words).count() >= times || Instant::now() > deadline {
                return said;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How the server exited, if it did within `limit`.
    pub fn exited_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stop the server and start it again on the same port and store, as
    /// an operator's restart would.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.start_again();
    }

    /// Stop the server as Ctrl-C does, and wait for it to exit (killed
    /// after 15 s).
    pub fn stop(&mut self) {
        self.interrupt();
        if self.exited_within(Duration::from_secs(15)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Start the stopped server again on the same port and store.
    pub fn start_again(&mut self) {
        let port = self.base.rsplit(':').next().unwrap().to_owned();
        let args: Vec<std::ffi::OsString> = self
            .args
            .iter()
            .map(|a| match a.to_str() {
                Some("127.0.0.1:0") => format!("127.0.0.1:{port}").into(),
                _ => a.clone(),
            })
            .collect();
        let (child, base, said) = spawn(&args, None);
        assert_eq!(base, self.base, "restarted on the same port");
        self.child = child;
        self.said = said;
    }
}

/// `idem ARGS` as a server: the child, where it listens, and what it says
/// on stderr from then on.
fn spawn(args: &[std::ffi::OsString], descriptors: Option<u32>) -> (Child, String, Said) {
    let mut command = match descriptors {
        Some(n) => {
            let mut prlimit = Command::new("prlimit");
            prlimit.arg(format!("--nofile={n}:{n}")).arg("--").arg(IDEM);
            prlimit
        }
        None => Command::new(IDEM),
    };
    command.args(args);
    for var in ["IDEM_STORE", "IDEM_APPROVERS"] {
        command.env_remove(var);
    }
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start idem serve");
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    // The line that says where it listens; any log line before it is
    // passed on.
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap() > 0 && !line.contains("://") {
        eprint!("[idem serve] {line}");
        line.clear();
    }
    let scheme = if line.contains("https://") {
        "https"
    } else {
        "http"
    };
    let base = line
        .split(&format!("{scheme}://"))
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .map(|addr| format!("{scheme}://{addr}"))
        .unwrap_or_else(|| panic!("idem serve did not say where it listens: {line:?}"));
    // Keep draining stderr so the server never blocks on it.
    let said = Said::default();
    let kept = said.clone();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            eprintln!("[idem serve] {line}");
            let mut kept = kept.lock().unwrap();
            kept.push_str(&line);
            kept.push('\n');
        }
    });
    (child, base, said)
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sign `http` in as `who` through the sign-in form.
pub async fn sign_in(http: &mut Http, serve: &Serve, who: (&str, &str)) {
    let login = http.get(&serve.url("/login")).await;
    let csrf = hidden(&login.body, "csrf").expect("the sign-in form has a CSRF token");
    let done = http.log_in(serve, &csrf, who).await;
    assert_eq!(done.status, 303, "sign in as {}: {}", who.0, done.body);
}

impl Http {
    /// Post the sign-in form of `serve` as `who` (name and password), with
    /// the form's `csrf` token and a new browser key: the reply.
    pub async fn log_in(&mut self, serve: &Serve, csrf: &str, who: (&str, &str)) -> Reply {
        // A new key at every sign-in, as the script makes one.
        self.browser = Some(super::unique("browser"));
        self.form(
            &serve.url("/login"),
            &[("csrf", csrf), ("name", who.0), ("password", who.1)],
        )
        .await
    }

    /// The approver bot's API call to `path`: GET without a body, POST
    /// with one.
    pub async fn bot(&mut self, serve: &Serve, path: &str, body: Option<&Value>) -> Reply {
        let method = if body.is_some() { "POST" } else { "GET" };
        self.api(method, &serve.url(path), &serve.token, body).await
    }
}

/// The application's tool catalog, as `Registry::catalog` writes it.
pub fn catalog() -> String {
    let tools: Registry<App> = idem::tools![charge_card, delete_account];
    tools.catalog().to_json()
}

/// The agent asks, in `run`, to delete `customer`'s account: the call,
/// awaiting approval, and its item in the inbox.
pub async fn waiting_call(
    agent: &Dispatcher<App>,
    http: &mut Http,
    serve: &Serve,
    run: &RunContext,
    customer: &str,
) -> (ToolCall, Value) {
    let call = delete_call(&super::unique("call"), customer);
    let first = agent.dispatch_one(call.clone(), run).await;
    assert!(
        matches!(first.result, Err(IdemError::ApprovalPending { .. })),
        "{:?}",
        first.result
    );
    let namespace = run.namespace.as_ref().expect("a tenant's run");
    (call, listed(http, serve, namespace.as_str()).await)
}

/// Poll the API's inbox until an item of `namespace` is listed: the item.
pub async fn listed(http: &mut Http, serve: &Serve, namespace: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = http
            .bot(serve, &format!("/api/inbox?namespace={namespace}"), None)
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        super::schema::check(&reply.json(), "inbox");
        if let Some(item) = reply.json()["items"].as_array().and_then(|i| i.first()) {
            return item.clone();
        }
        assert!(
            Instant::now() < deadline,
            "nothing of {namespace} in the inbox after 20 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An agent on the store at `url` whose calls wait `wait` for a decision,
/// `idem serve` on the same store, and a namespace of the test's own.
pub struct Scene {
    pub app: App,
    pub agent: Dispatcher<App>,
    pub serve: Serve,
    pub http: Http,
    pub namespace: String,
}

impl Scene {
    pub async fn new(url: &str, wait: Duration) -> Scene {
        Scene::with_args(url, wait, &[]).await
    }

    /// A scene on a fresh SQLite store whose callers do not wait: the
    /// file's guard, its URL and the scene.
    pub async fn on_sqlite() -> (TempDir, String, Scene) {
        let (dir, url) = super::sqlite();
        let scene = Scene::new(&url, Duration::ZERO).await;
        (dir, url, scene)
    }

    /// [`Scene::new`] with `extra` arguments to `idem serve`.
    pub async fn with_args(url: &str, wait: Duration, extra: &[&str]) -> Scene {
        // The store must exist before `idem serve` opens it.
        let app = App::default();
        let agent = dispatcher(url, &app, wait).await;
        Scene {
            serve: Serve::start(url, Some(&catalog()), extra),
            app,
            agent,
            http: Http::default(),
            namespace: super::unique("tenant"),
        }
    }

    /// Ask to delete `customer`'s account and do not wait: the inbox item.
    pub async fn asked(&mut self, customer: &str) -> Value {
        let _ = self
            .agent
            .dispatch_one(
                delete_call(&super::unique("call"), customer),
                &tenant(&self.namespace),
            )
            .await;
        self.listed().await
    }

    pub async fn listed(&mut self) -> Value {
        listed(&mut self.http, &self.serve, &self.namespace).await
    }
}

/// A call of `agent` in `namespace`, made in a task of its own: it waits
/// for a person's decision.
pub fn wait_on(agent: &Dispatcher<App>, call: ToolCall, namespace: &str) -> Waiting {
    wait_on_in(agent, call, tenant(namespace))
}

/// [`wait_on`] with a run context of the caller's (a reason, say).
pub fn wait_on_in(agent: &Dispatcher<App>, call: ToolCall, context: RunContext) -> Waiting {
    let agent = agent.clone();
    Waiting(tokio::spawn(async move {
        agent.dispatch_one(call, &context).await
    }))
}

/// A call waiting for a decision ([`wait_on`]).
pub struct Waiting(tokio::task::JoinHandle<ToolResult>);

impl Waiting {
    /// What the call got once decided (within 20 s).
    pub async fn decided(self) -> ToolResult {
        tokio::time::timeout(Duration::from_secs(20), self.0)
            .await
            .expect("the decision reaches the waiting caller")
            .unwrap()
    }
}
