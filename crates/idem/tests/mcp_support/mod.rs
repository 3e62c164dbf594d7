//! The tools and the client side shared by the MCP test files
//! (`mod mcp_support;`): a payment provider without idempotency keys, so
//! every charge that reaches it is a charge, the tools an agent calls on
//! it, and rmcp's client connected to an idem server in process.
#![allow(dead_code)] // each test file uses its own subset

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use idem::mcp::{McpServer, DEDUPLICATED_META, ERROR_META};
use idem::{tools, Dispatcher, Executor, MemoryStore, Registry, State, ToolError};
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::{Notify, Semaphore};

#[derive(Clone)]
pub struct Ledger {
    pub charges: Arc<AtomicUsize>,
    pub customers: Arc<AtomicUsize>,
    /// `slow_charge` has started (its key is claimed).
    pub started: Arc<Notify>,
    /// `slow_charge` waits for a permit before it charges.
    pub gate: Arc<Semaphore>,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            charges: Arc::default(),
            customers: Arc::default(),
            started: Arc::default(),
            gate: Arc::new(Semaphore::new(0)),
        }
    }
}

impl Ledger {
    pub fn charges(&self) -> usize {
        self.charges.load(Ordering::SeqCst)
    }

    pub fn charge(&self, args: &Charge) -> Receipt {
        let n = self.charges.fetch_add(1, Ordering::SeqCst) + 1;
        Receipt {
            charge_id: format!("ch_{n}"),
            cents: args.cents,
        }
    }
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct Charge {
    pub customer: String,
    pub cents: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Receipt {
    pub charge_id: String,
    pub cents: u64,
}

/// Charge a customer's card.
#[idem::tool(class = "non_idempotent_write")]
pub async fn charge_card(args: Charge, State(ledger): State<Ledger>) -> Result<Receipt, ToolError> {
    Ok(ledger.charge(&args))
}

/// Charge a customer's card through a slow payment provider.
#[idem::tool(class = "non_idempotent_write")]
pub async fn slow_charge(args: Charge, State(ledger): State<Ledger>) -> Result<Receipt, ToolError> {
    ledger.started.notify_one();
    ledger.gate.acquire().await.unwrap().forget();
    Ok(ledger.charge(&args))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct Email {
    pub to: String,
    pub subject: String,
}

/// Send an email.
#[idem::tool(class = "idempotent_write")]
pub async fn send_email(args: Email) -> Result<String, ToolError> {
    Ok(format!("sent to {}", args.to))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct Lookup {
    pub email: String,
}

/// Look a customer up.
#[idem::tool(class = "read")]
pub async fn find_customer(args: Lookup) -> Result<Value, ToolError> {
    Ok(json!({ "email": args.email, "plan": "pro" }))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct NewCustomer {
    pub email: String,
    pub name: String,
}

/// Create a customer unless one with this email exists.
#[idem::tool(class = "non_idempotent_write", key = natural(fields(email)))]
pub async fn create_customer(
    args: NewCustomer,
    State(ledger): State<Ledger>,
) -> Result<String, ToolError> {
    let n = ledger.customers.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("cus_{n} ({})", args.name))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
pub struct Account {
    pub customer: String,
}

/// Delete a customer's account.
#[idem::tool(class = "irreversible")]
pub async fn delete_account(args: Account) -> Result<String, ToolError> {
    Ok(format!("deleted {}", args.customer))
}

pub fn registry() -> Registry<Ledger> {
    tools![
        find_customer,
        send_email,
        charge_card,
        slow_charge,
        create_customer,
        delete_account
    ]
}

pub fn server(ledger: &Ledger) -> McpServer<Ledger> {
    let executor = Executor::builder(MemoryStore::new())
        .state(ledger.clone())
        .approvals(idem::approval::AllowList::new(["delete_account"]))
        .build();
    McpServer::new(Dispatcher::new(executor, registry()))
}

pub type Client = RunningService<RoleClient, ()>;

/// rmcp's client connected to `server` over an in-process pipe.
pub async fn connect<H: ServerHandler>(server: H) -> Client {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(client_io).await.expect("the client connects")
}

/// The names of the tools `client`'s server lists, in its order.
pub async fn tool_names(client: &Client) -> Vec<String> {
    let tools = client.list_all_tools().await.unwrap();
    tools.into_iter().map(|t| t.name.to_string()).collect()
}

pub fn call(tool: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    CallToolRequestParams::new(tool).with_arguments(arguments)
}

pub fn charge(customer: &str, cents: u64) -> CallToolRequestParams {
    call(
        "charge_card",
        json!({ "customer": customer, "cents": cents }),
    )
}

pub fn with_meta(mut params: CallToolRequestParams, meta: Value) -> CallToolRequestParams {
    let Value::Object(meta) = meta else {
        panic!("_meta is an object")
    };
    params.meta = Some(RequestMetaObject(meta.into()));
    params
}

/// The text of a result, as JSON.
pub fn text(result: &CallToolResult) -> Value {
    let text = &result.content[0].as_text().expect("text content").text;
    serde_json::from_str(text).expect("the text is JSON")
}

/// The `{"code", "message", …}` of an error result, from its `_meta`; its
/// text is written for a model, in words.
pub fn error_of(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(true), "an error result: {result:?}");
    let words = &result.content[0].as_text().expect("text content").text;
    assert!(
        serde_json::from_str::<Value>(words).is_err() && words.ends_with('.'),
        "sentences for a model: {words}"
    );
    result.meta.as_ref().expect("result _meta")[ERROR_META].clone()
}

/// The text of an error result.
pub fn words(result: &CallToolResult) -> &str {
    &result.content[0].as_text().expect("text content").text
}

pub fn deduplicated(result: &CallToolResult) -> bool {
    result.meta.as_ref().expect("result _meta")[DEDUPLICATED_META]
        .as_bool()
        .expect("a boolean")
}
