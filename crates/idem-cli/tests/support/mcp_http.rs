//! MCP over streamable HTTP without an SDK, for the tests and benches that
//! time or trace `idem proxy --listen` itself: a client that sends raw
//! JSON-RPC (`Session`) and a small upstream server in the process
//! (`serve_upstream`), and `idem proxy --listen` in front of it (`Proxy`).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

/// The HTTP client sessions send with.
pub type Http = Client<HttpConnector, Full<Bytes>>;

/// A plain HTTP client, pooling its connections.
pub fn http() -> Http {
    Client::builder(TokioExecutor::new()).build_http()
}

/// An MCP session over streamable HTTP: its URL and the session id the
/// server gave, if any.
pub struct Session {
    http: Http,
    url: String,
    id: Option<String>,
}

impl Session {
    pub async fn open(http: Http, url: String) -> Self {
        let mut session = Session {
            http,
            url,
            id: None,
        };
        let (id, answer) = session
            .post(json!({
                "jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "proxy_rate", "version": "1"}},
            }))
            .await
            .expect("initialize answered");
        assert!(answer.get("result").is_some(), "initialize: {answer}");
        session.id = id;
        let _ = session
            .post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        session
    }

    /// One `tools/call`; whether it was answered with a result that is not
    /// an error.
    pub async fn call(&self, tool: &str, key: &str, n: u64) -> bool {
        let request = json!({
            "jsonrpc": "2.0", "id": n + 1, "method": "tools/call",
            "params": {"name": tool, "arguments": {"n": n, "key": key},
                       "_meta": {"io.idem/idempotencyKey": key}},
        });
        match self.post(request).await {
            Some((_, answer)) => {
                answer
                    .pointer("/result/isError")
                    .is_some_and(|e| e == &Value::Bool(false))
                    || answer
                        .get("result")
                        .is_some_and(|r| r.get("isError").is_none())
            }
            None => false,
        }
    }

    /// End the session (`DELETE`), as a client does when it leaves: whether
    /// the server knew it.
    pub async fn end(&self) -> bool {
        let Some(id) = &self.id else { return false };
        let request = hyper::Request::delete(&self.url)
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", "2025-06-18")
            .body(Full::new(Bytes::new()));
        match request {
            Ok(request) => self
                .http
                .request(request)
                .await
                .is_ok_and(|r| r.status().is_success()),
            Err(_) => false,
        }
    }

    /// POST one JSON-RPC message: the session id the answer carried, and
    /// the JSON-RPC answer (from a JSON body or an event stream's `data`).
    pub async fn post(&self, message: Value) -> Option<(Option<String>, Value)> {
        let mut request = hyper::Request::post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18");
        if let Some(id) = &self.id {
            request = request.header("mcp-session-id", id);
        }
        let body = Full::new(Bytes::from(message.to_string()));
        let response = self.http.request(request.body(body).ok()?).await.ok()?;
        let id = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = response.into_body().collect().await.ok()?.to_bytes();
        let text = std::str::from_utf8(&bytes).ok()?;
        let answer = serde_json::from_str(text).ok().or_else(|| {
            text.lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
                .find(|v| v.get("id").is_some())
        });
        Some((id, answer.unwrap_or(Value::Null)))
    }
}

/// The upstream: `initialize`, `tools/list` (`echo`, read-only; `write`,
/// idempotent) and `tools/call` answered in JSON, no session.
pub async fn serve_upstream() -> SocketAddr {
    async fn answer(body: Bytes) -> axum::response::Response {
        use axum::response::IntoResponse as _;
        let Ok(message) = serde_json::from_slice::<Value>(&body) else {
            return axum::http::StatusCode::BAD_REQUEST.into_response();
        };
        let Some(id) = message.get("id").cloned() else {
            return axum::http::StatusCode::ACCEPTED.into_response();
        };
        let schema = json!({"type": "object"});
        let result = match message["method"].as_str() {
            Some("initialize") => json!({
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "rate-upstream", "version": "1"},
            }),
            Some("tools/list") => json!({"tools": [
                {"name": "echo", "description": "Says its arguments back.", "inputSchema": schema,
                 "annotations": {"readOnlyHint": true}},
                {"name": "write", "description": "Writes, idempotently.", "inputSchema": schema,
                 "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true}},
            ]}),
            Some("tools/call") => json!({
                "content": [{"type": "text", "text": message["params"]["arguments"].to_string()}],
                "isError": false,
            }),
            Some("ping") => json!({}),
            _ => {
                let error = json!({"jsonrpc": "2.0", "id": id,
                                   "error": {"code": -32601, "message": "method not found"}});
                return axum::Json(error).into_response();
            }
        };
        axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
    }
    let app = axum::Router::new().route(
        "/mcp",
        axum::routing::post(answer).get(|| async { axum::http::StatusCode::METHOD_NOT_ALLOWED }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

/// `idem proxy --listen` in front of the upstream, on SQLite, its log in
/// a file; killed when dropped.
pub struct Proxy {
    child: Child,
    /// Where it serves MCP.
    pub url: String,
    log: std::path::PathBuf,
}

impl Proxy {
    /// Started on a SQLite store in `place`, with `envs` set.
    pub fn start(upstream: SocketAddr, place: &std::path::Path, envs: &[(&str, &str)]) -> Self {
        let log = place.join("proxy.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_idem"))
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--no-auth",
                "--log-level",
                "info",
            ])
            .arg("--upstream")
            .arg(format!("http://{upstream}/mcp"))
            .env(
                "IDEM_STORE",
                format!("sqlite://{}", place.join("idem.db").display()),
            )
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("idem proxy starts");
        let stderr = child.stderr.take().expect("its stderr");
        let (found, lines) = std::sync::mpsc::channel();
        let file = std::fs::File::create(&log).expect("the log file");
        std::thread::spawn(move || {
            use std::io::{BufRead as _, Write as _};
            let mut file = std::io::BufWriter::new(file);
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Some(url) = line
                    .split_whitespace()
                    .find(|w| w.starts_with("http://") && w.ends_with("/mcp"))
                {
                    let _ = found.send(url.to_owned());
                }
                let _ = writeln!(file, "{line}");
            }
        });
        let url = lines
            .recv_timeout(Duration::from_secs(60))
            .expect("the proxy says where it serves");
        Proxy { child, url, log }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The lines it wrote on stderr so far.
    pub fn log_lines(&self) -> usize {
        std::fs::read_to_string(&self.log).map_or(0, |t| t.lines().count())
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
