//! The demo's tools over MCP on stdio: `cargo run --example mcp_server`.
//!
//! Every write is recorded in the embedded SQLite store (`IDEM_STORE`,
//! default `sqlite://idem.db` in the working directory), so a client that
//! retries a call with the same key (after a timeout, a reconnect, a restart
//! of this server) receives the recorded result and the effect happens
//! once. See "Serving tools over MCP" in README.md for the key a client
//! sends and for registering this server in an MCP client.
//!
//! The server is an application's own rmcp server: a `#[tool_router]` with
//! a tool of its own (`store`), merged with the router fragment of the idem
//! tools. rmcp's `#[tool]` is in scope here, so the idem tools (in
//! `common`) are written `#[idem::tool]`.
//!
//! stdout carries the protocol; the log goes to stderr.

mod common;

use std::sync::atomic::Ordering;

use common::{charge_card, delete_account, lookup_customer, send_email, App};
use idem::approval::AllowList;
use idem::mcp::McpServer;
use idem::store::url::redact;
use idem::{tools, Dispatcher, Executor};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt};

/// The application's MCP server.
#[derive(Clone)]
struct DemoServer {
    /// The store, as `Store::describe` names it: password hidden.
    store: String,
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

#[tool_handler(
    router = self.tool_router,
    name = "idem-demo",
    instructions = "Customer tools of the idem demo. Writes are recorded under an idempotency key: \
                    a retry with the same key returns the recorded result and does not repeat the effect."
)]
impl ServerHandler for DemoServer {}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A store URL may hold a password: what this server says about its
    // store (to the model, in the log, in an error) never does.
    let store = idem::store::from_env().await.map_err(|e| e.to_string())?;
    let described = redact(&store.describe());

    let app = App::default();
    let executor = Executor::builder_shared(store)
        .state(app.clone())
        .approvals(AllowList::new(["delete_account"]))
        .build();
    let registry = tools![lookup_customer, send_email, charge_card, delete_account];
    let idem_tools = McpServer::new(Dispatcher::new(executor, registry));

    let server = DemoServer {
        store: described.clone(),
        tool_router: DemoServer::tool_router() + idem_tools.tool_router(),
    };
    eprintln!("idem mcp_server: serving on stdio, recording in {described}");
    let running = server
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await?;
    let reason = running.waiting().await?;
    eprintln!(
        "idem mcp_server: stopped ({reason:?}); this process delivered {} email(s) and made {} charge(s)",
        app.mail.sent.lock().unwrap().len(),
        app.payments.charges.load(Ordering::SeqCst),
    );
    Ok(())
}
