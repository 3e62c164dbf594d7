//! The demo's tools as an MCP server for the clients people chat in
//! (Claude Desktop, VS Code, Cursor, Claude Code):
//!
//! ```text
//! cargo run --features mcp,http-auth --example mcp_server   # over stdio
//! # streamable HTTP at /mcp, for anyone on this machine
//! cargo run --features mcp,http-auth --example mcp_server -- --http 127.0.0.1:8931
//! # for the callers of a principals file, or of an OAuth issuer
//! cargo run --features mcp,http-auth --example mcp_server -- \
//!     --http 0.0.0.0:8931 --principals principals.toml
//! cargo run --features mcp,http-auth --example mcp_server -- \
//!     --http 0.0.0.0:8931 --oauth-issuer https://login.example.com \
//!     --oauth-resource https://mcp.example.com/mcp
//! ```
//!
//! Over HTTP, `--principals FILE` (`idem principal NAME` makes its
//! entries) and `--oauth-issuer URL --oauth-resource URL [--oauth-jwks
//! URL]` (OAuth 2.1 access tokens) say who may call, with
//! `idem::mcp::auth`: a request without a valid bearer token is answered
//! 401, and each caller's records are kept in a namespace of their own, so
//! one caller's call never answers another's. An address other than
//! loopback is refused without them. (Put TLS in front of it: the example
//! serves plain HTTP.)
//!
//! Every write is recorded in the embedded SQLite store (`IDEM_STORE`,
//! default `sqlite://idem.db` in the working directory), so a repeated call
//! (a retry after a timeout, a model calling again "to be sure", a restart
//! of this server) is answered from the record and its effect happens once.
//! The tools show each kind of write:
//!
//! * `create_customer`: keyed by the email address (a natural key), so
//!   the same customer is found rather than created twice;
//! * `send_email`: an idempotent write (the mail provider deduplicates);
//! * `charge_card`: a non-idempotent write, keyed by what it does when the
//!   client sends no key: the same charge within ten minutes is one charge,
//!   and the model can mean a second one (`intended_repeat`);
//! * `delete_account`: irreversible, so the person in the chat is asked
//!   (MCP elicitation) before it runs; an operator can decide instead
//!   (`idem approve`, `idem serve`), and a client that takes MCP tasks
//!   gets a task that completes when they do.
//!
//! The server is an application's own rmcp server: a `#[tool_router]` with
//! a tool of its own (`store`), merged with the router fragment of the idem
//! tools. rmcp's `#[tool]` is in scope here, so the idem tools (in
//! `common`) are written `#[idem::tool]`.
//!
//! On stdio, stdout carries the protocol; the log goes to stderr. For the
//! tests: with `IDEM_DEMO_LEDGER=FILE` the demo's providers append one JSON
//! line per effect to FILE; `IDEM_DEMO_REPEAT_WINDOW=SECONDS` shortens the
//! ten-minute window; `IDEM_DEMO_SLOW_CHARGE_MS=N` makes the payment
//! provider answer N ms after each charge; `IDEM_DEMO_TASKS_AFTER_MS=N`
//! answers a write still running after N ms with an MCP task (ten seconds
//! otherwise).
//!
//! Several instances behind one load balancer, on one shared store
//! (PostgreSQL, Redis), are one server to their clients when they share
//! `--state-secret-file FILE` (32 bytes or more, e.g. `head -c 32
//! /dev/urandom > FILE`): an approval question asked by one is answered
//! through another, and a task made by one is read on another.

#![allow(unreachable_pub)] // `pub` for the other modules of this target
mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::{charge_card, delete_account, lookup_customer, send_email, App, Ledger};
use idem::approval::{ApprovalDecision, Callback};
use idem::mcp::auth::{Authenticator, OAuthOptions, Principals};
use idem::mcp::{McpServer, Unkeyed};
use idem::store::url::redact;
use idem::{tools, Dispatcher, Executor};
use idem::{State, ToolError};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{GetTaskParams, GetTaskResult, Implementation, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt};

/// The application's MCP server.
#[derive(Clone)]
struct DemoServer {
    /// The store, as `Store::describe` names it: password hidden.
    store: String,
    /// The idem tools, for their capabilities and their tasks.
    idem: McpServer<App>,
    tool_router: ToolRouter<DemoServer>,
}

#[tool_router]
impl DemoServer {
    /// Where this server records its calls: the idem store, password
    /// hidden.
    #[tool(annotations(read_only_hint = true))]
    fn store(&self) -> String {
        self.store.clone()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for DemoServer {
    /// The idem tools' capabilities: tools, the tasks extension (a deletion
    /// waiting for an operator is a task), and which key fields are read.
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(self.idem.capabilities())
            .with_server_info(Implementation::new("idem-demo", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Customer tools of the idem demo. Every write is recorded: calling a tool again \
                 with the same arguments returns what the first call did instead of doing it \
                 twice. Deleting an account asks the user first.",
            )
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.idem.get_task(request, context).await
    }
}

/// A new customer.
#[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct NewCustomer {
    /// The customer's email address: one customer per address.
    email: String,
    name: String,
}

/// An email address as the key compares it: `Ada@Example.com` and
/// `ada@example.com ` are one customer.
fn email_key(email: &str) -> String {
    email.trim().to_lowercase()
}

/// Create a customer, unless one with this email address exists (then
/// return that one).
#[idem::tool(class = "non_idempotent_write", key = natural(fields(email = email_key)))]
async fn create_customer(
    args: NewCustomer,
    State(ledger): State<Arc<Ledger>>,
) -> Result<String, ToolError> {
    ledger.record("customer", &args.email);
    Ok(format!("customer {} <{}> created", args.name, args.email))
}

/// A whole number from the environment variable `name`, if set.
fn number_from_env(name: &str) -> Result<Option<u64>, String> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(text) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("{name} must be a whole number, not `{text}`")),
    }
}

/// Where to serve, who may call over HTTP, and the secret shared with the
/// other instances behind one balancer.
struct Args {
    serve: Serve,
    state_secret: Option<PathBuf>,
}

/// Where to serve, and who may call over HTTP.
enum Serve {
    Stdio,
    Http { address: SocketAddr, auth: AuthArgs },
}

/// `--principals` and `--oauth-*`.
#[derive(Default)]
struct AuthArgs {
    principals: Option<PathBuf>,
    oauth_issuer: Option<String>,
    oauth_resource: Option<String>,
    oauth_jwks: Option<String>,
}

const USAGE: &str = "usage: mcp_server [--http ADDRESS [--principals FILE] \
                     [--oauth-issuer URL --oauth-resource URL [--oauth-jwks URL]]] \
                     [--state-secret-file FILE]";

/// The command line: nothing (stdio) or `--http ADDRESS` with who may call.
fn from_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut address = None;
    let mut auth = AuthArgs::default();
    let mut state_secret = None;
    while let Some(flag) = args.next() {
        let mut value = |what: &str| args.next().ok_or_else(|| format!("{flag} needs {what}"));
        match flag.as_str() {
            "--http" => {
                address = Some(value("an address to listen on, such as 127.0.0.1:8931")?);
            }
            "--principals" => auth.principals = Some(value("a principals file")?.into()),
            "--oauth-issuer" => auth.oauth_issuer = Some(value("the issuer's URL")?),
            "--oauth-resource" => auth.oauth_resource = Some(value("this server's URL")?),
            "--oauth-jwks" => auth.oauth_jwks = Some(value("the issuer's key set URL")?),
            "--state-secret-file" => {
                state_secret = Some(value("a file of 32 bytes or more")?.into())
            }
            _ => return Err(USAGE.into()),
        }
    }
    let Some(address) = address else {
        if !auth.is_empty() {
            return Err("--principals and --oauth-* are for --http".into());
        }
        return Ok(Args {
            serve: Serve::Stdio,
            state_secret,
        });
    };
    let address = address.parse().map_err(|_| {
        format!("`{address}` is not an address to listen on; write it as 127.0.0.1:8931")
    })?;
    Ok(Args {
        serve: Serve::Http { address, auth },
        state_secret,
    })
}

impl AuthArgs {
    fn is_empty(&self) -> bool {
        self.principals.is_none()
            && self.oauth_issuer.is_none()
            && self.oauth_resource.is_none()
            && self.oauth_jwks.is_none()
    }

    /// Who may call, checked before serving (a principals file that
    /// cannot be read, an issuer whose keys cannot be fetched, stop the
    /// server at once); `None`: anyone.
    async fn authenticator(&self) -> Result<Option<Authenticator>, String> {
        let principals = match &self.principals {
            Some(path) => Some(Principals::load(path).map_err(|e| e.to_string())?),
            None => None,
        };
        let oauth = OAuthOptions::from_flags(
            self.oauth_issuer.as_deref(),
            self.oauth_resource.as_deref(),
            self.oauth_jwks.as_deref(),
        )
        .map_err(|e| e.to_string())?;
        if principals.is_none() && oauth.is_none() {
            return Ok(None);
        }
        Authenticator::new(principals, oauth)
            .await
            .map(Some)
            .map_err(|e| e.to_string())
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("idem mcp_server: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let Args {
        serve,
        state_secret,
    } = from_args()?;
    let auth = match &serve {
        Serve::Http { auth, .. } => auth.authenticator().await?,
        Serve::Stdio => None,
    };
    if let Serve::Http { address, .. } = &serve {
        if auth.is_none() && !address.ip().is_loopback() {
            return Err(format!(
                "--http {address}: not a loopback address, so every caller must be known: \
                 name them with --principals FILE (`idem principal NAME` makes a token) or \
                 accept an OAuth issuer's access tokens with --oauth-issuer URL \
                 --oauth-resource URL"
            ));
        }
    }
    // Built with `--features otel` and OTEL_EXPORTER_OTLP_ENDPOINT set:
    // each `tools/call` span (continuing the client's trace) and the
    // executor's metrics go there over OTLP.
    #[cfg(feature = "otel")]
    let _telemetry = common::otel::init("idem-mcp-server").map_err(|e| e.to_string())?;
    // A store URL may hold a password: what this server says about its
    // store (to the model, in the log, in an error) never does.
    let store = idem::store::from_env()
        .await
        .map_err(|e| format!("cannot open the store that records the calls: {e}"))?;
    let described = redact(&store.describe());
    let ledger = Ledger::from_env().map_err(|e| format!("cannot open IDEM_DEMO_LEDGER: {e}"))?;

    let app = App {
        ledger: Arc::new(ledger),
        ..App::default()
    };
    let slow = number_from_env("IDEM_DEMO_SLOW_CHARGE_MS")?.unwrap_or(0);
    app.payments.answer_after_ms.store(slow, Ordering::SeqCst);
    let window = number_from_env("IDEM_DEMO_REPEAT_WINDOW")?.map_or(600, |s| s.max(1));
    let executor = Executor::builder_shared(store)
        .state(app.clone())
        // Every deletion is left to a person: the one in the chat when the
        // client can ask them, otherwise an operator.
        .approvals(Callback::new(|_request| async {
            Ok(ApprovalDecision::Pending {
                message: "deleting an account needs the user's yes".into(),
            })
        }))
        .build();
    let registry = tools![
        lookup_customer,
        create_customer,
        send_email,
        charge_card,
        delete_account
    ];
    let mut idem_tools = McpServer::new(Dispatcher::new(executor, registry))
        .unkeyed(Unkeyed::Window(Duration::from_secs(window)));
    if auth.is_some() {
        // Each caller's records in a namespace of their own.
        idem_tools = idem_tools.principal_from_auth();
    }
    if let Some(path) = &state_secret {
        // Instances behind one balancer seal approval questions and tasks
        // with one secret, so that each reads the others'.
        let secret = std::fs::read(path)
            .map_err(|e| format!("--state-secret-file {}: {e}", path.display()))?;
        idem_tools = idem_tools
            .request_state_secret(&secret)
            .map_err(|e| format!("--state-secret-file {}: {e}", path.display()))?;
    }
    if let Some(ms) = number_from_env("IDEM_DEMO_TASKS_AFTER_MS")? {
        idem_tools = idem_tools.tasks_after(Some(Duration::from_millis(ms)));
    }
    let server = DemoServer {
        store: described.clone(),
        tool_router: DemoServer::tool_router() + idem_tools.tool_router(),
        idem: idem_tools,
    };

    match serve {
        Serve::Stdio => {
            eprintln!("idem mcp_server: serving on stdio, recording in {described}");
            let running = server
                .serve(idem::mcp::stdio())
                .await
                .map_err(|e| format!("the client did not start an MCP session: {e}"))?;
            let reason = running
                .waiting()
                .await
                .map_err(|e| format!("the session failed: {e}"))?;
            eprintln!("idem mcp_server: stopped ({reason:?})");
        }
        Serve::Http { address, .. } => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(|e| format!("cannot listen on {address}: {e}"))?;
            let address = listener.local_addr().map_err(|e| e.to_string())?;
            let config = if address.ip().is_loopback() {
                // Only requests that name this server's own host: a page on
                // another site cannot reach it through DNS rebinding.
                StreamableHttpServerConfig::default().with_allowed_hosts([
                    "localhost".to_owned(),
                    "127.0.0.1".to_owned(),
                    address.to_string(),
                    format!("localhost:{}", address.port()),
                ])
            } else {
                // Reached by names this server cannot know; every request
                // carries a token, which a rebinding page has not.
                StreamableHttpServerConfig::default()
                    .disable_allowed_hosts()
                    .enforce_origin_validation()
            };
            let service = StreamableHttpService::new(
                move || Ok(server.clone()),
                Arc::new(LocalSessionManager::default()),
                config,
            );
            let mut router = axum::Router::new().nest_service("/mcp", service);
            if let Some(auth) = &auth {
                // Anyone may read where to sign in (RFC 9728): the
                // metadata's routes go after the layer.
                router = router.layer(auth.layer()).merge(auth.metadata_router());
            }
            // The line the tests wait for, with the port chosen.
            eprintln!("idem mcp_server: serving on http://{address}/mcp, recording in {described}");
            axum::serve(listener, router)
                .await
                .map_err(|e| format!("the HTTP server stopped: {e}"))?;
        }
    }
    Ok(())
}
