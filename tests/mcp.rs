//! idem tools served over MCP, called by rmcp's own client: in process over
//! a `tokio::io::duplex` pipe, over rmcp's streamable HTTP service, and
//! end to end against `examples/mcp_server.rs` spawned over stdio.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem::mcp::{
    CallToolRequestParamsExt, McpServer, Unkeyed, CLASS_META, DEDUPLICATED_META, ERROR_META,
    IDEMPOTENCY_KEY_META, KEYING_META, KEY_META, REPEAT_ARGUMENT, RUN_ID_META, STEP_META,
};
use idem::{tools, Dispatcher, Executor, MemoryStore, Registry, State, ToolError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ListToolsResult, PaginatedRequestParams, RequestMetaObject, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceError, ServiceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::{Notify, Semaphore};

#[cfg(feature = "sqlite")]
mod mcp_example;

// ---------------------------------------------------------------------------
// The tools: a payment provider without idempotency keys, so every charge
// that reaches it is a charge.

#[derive(Clone)]
struct Ledger {
    charges: Arc<AtomicUsize>,
    customers: Arc<AtomicUsize>,
    /// `slow_charge` has started (its key is claimed).
    started: Arc<Notify>,
    /// `slow_charge` waits for a permit before it charges.
    gate: Arc<Semaphore>,
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
    fn charges(&self) -> usize {
        self.charges.load(Ordering::SeqCst)
    }

    fn charge(&self, args: &Charge) -> Receipt {
        let n = self.charges.fetch_add(1, Ordering::SeqCst) + 1;
        Receipt {
            charge_id: format!("ch_{n}"),
            cents: args.cents,
        }
    }
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct Charge {
    customer: String,
    cents: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Receipt {
    charge_id: String,
    cents: u64,
}

/// Charge a customer's card.
#[idem::tool(class = "non_idempotent_write")]
async fn charge_card(args: Charge, State(ledger): State<Ledger>) -> Result<Receipt, ToolError> {
    Ok(ledger.charge(&args))
}

/// Charge a customer's card through a slow payment provider.
#[idem::tool(class = "non_idempotent_write")]
async fn slow_charge(args: Charge, State(ledger): State<Ledger>) -> Result<Receipt, ToolError> {
    ledger.started.notify_one();
    ledger.gate.acquire().await.unwrap().forget();
    Ok(ledger.charge(&args))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct Email {
    to: String,
    subject: String,
}

/// Send an email.
#[idem::tool(class = "idempotent_write")]
async fn send_email(args: Email) -> Result<String, ToolError> {
    Ok(format!("sent to {}", args.to))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct Lookup {
    email: String,
}

/// Look a customer up.
#[idem::tool(class = "read")]
async fn find_customer(args: Lookup) -> Result<Value, ToolError> {
    Ok(json!({ "email": args.email, "plan": "pro" }))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct NewCustomer {
    email: String,
    name: String,
}

/// Create a customer unless one with this email exists.
#[idem::tool(class = "non_idempotent_write", key = natural(fields(email)))]
async fn create_customer(
    args: NewCustomer,
    State(ledger): State<Ledger>,
) -> Result<String, ToolError> {
    let n = ledger.customers.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("cus_{n} ({})", args.name))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct Account {
    customer: String,
}

/// Delete a customer's account.
#[idem::tool(class = "irreversible")]
async fn delete_account(args: Account) -> Result<String, ToolError> {
    Ok(format!("deleted {}", args.customer))
}

fn registry() -> Registry<Ledger> {
    tools![
        find_customer,
        send_email,
        charge_card,
        slow_charge,
        create_customer,
        delete_account
    ]
}

fn server(ledger: &Ledger) -> McpServer<Ledger> {
    let executor = Executor::builder(MemoryStore::new())
        .state(ledger.clone())
        .approvals(idem::approval::AllowList::new(["delete_account"]))
        .build();
    McpServer::new(Dispatcher::new(executor, registry()))
}

// ---------------------------------------------------------------------------
// The client side.

type Client = RunningService<RoleClient, ()>;

/// rmcp's client connected to `server` over an in-process pipe.
async fn connect<H: ServerHandler>(server: H) -> Client {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(client_io).await.expect("the client connects")
}

fn call(tool: &'static str, arguments: Value) -> CallToolRequestParams {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    CallToolRequestParams::new(tool).with_arguments(arguments)
}

fn charge(customer: &str, cents: u64) -> CallToolRequestParams {
    call(
        "charge_card",
        json!({ "customer": customer, "cents": cents }),
    )
}

fn with_meta(mut params: CallToolRequestParams, meta: Value) -> CallToolRequestParams {
    let Value::Object(meta) = meta else {
        panic!("_meta is an object")
    };
    params.meta = Some(RequestMetaObject(meta.into()));
    params
}

/// The text of a result, as JSON.
fn text(result: &CallToolResult) -> Value {
    let text = &result.content[0].as_text().expect("text content").text;
    serde_json::from_str(text).expect("the text is JSON")
}

/// The `{"code", "message", …}` of an error result, from its `_meta`; its
/// text is written for a model, in words.
fn error_of(result: &CallToolResult) -> Value {
    assert_eq!(result.is_error, Some(true), "an error result: {result:?}");
    let words = &result.content[0].as_text().expect("text content").text;
    assert!(
        serde_json::from_str::<Value>(words).is_err() && words.ends_with('.'),
        "sentences for a model: {words}"
    );
    result.meta.as_ref().expect("result _meta")[ERROR_META].clone()
}

/// The text of an error result.
fn words(result: &CallToolResult) -> &str {
    &result.content[0].as_text().expect("text content").text
}

fn deduplicated(result: &CallToolResult) -> bool {
    result.meta.as_ref().expect("result _meta")[DEDUPLICATED_META]
        .as_bool()
        .expect("a boolean")
}

// ---------------------------------------------------------------------------
// tools/list

#[tokio::test]
async fn tools_list_shows_each_tool_as_the_registry_exports_it() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let tools = client.list_all_tools().await.unwrap();

    // Name, input schema, annotations from the class and the output
    // schema: what each tool of the registry says of itself, in order, but
    // for what the server adds: `_meta` with the class and keying, and for
    // a tool keyed by a window the optional repeat argument and a sentence
    // in the description.
    let exported: Vec<Value> = registry()
        .iter()
        .map(|t| {
            let spec = t.spec();
            let mut tool = json!({
                "name": spec.name,
                "description": spec.description,
                "inputSchema": t.input_schema(),
                "annotations": t.class().annotations(),
            });
            if let Some(output) = t.mcp_output_schema() {
                tool["outputSchema"] = output;
            }
            tool
        })
        .collect();
    assert_eq!(tools.len(), exported.len());
    for (tool, exported) in tools.iter().zip(&exported) {
        let mut listed = serde_json::to_value(tool).unwrap();
        let meta = listed.as_object_mut().unwrap().remove("_meta").unwrap();
        assert_eq!(
            meta[CLASS_META],
            exported["annotations"]["readOnlyHint"]
                .as_bool()
                .map_or(json!(null), |_| meta[CLASS_META].clone())
        );
        let description = listed["description"].as_str().unwrap().to_owned();
        assert!(
            description.starts_with(exported["description"].as_str().unwrap()),
            "{description}"
        );
        if meta[KEYING_META] == "window" {
            assert!(description.contains(REPEAT_ARGUMENT), "{description}");
            let properties = listed["inputSchema"]["properties"].as_object_mut().unwrap();
            let repeat = properties.remove(REPEAT_ARGUMENT).unwrap();
            assert_eq!(repeat["type"], "integer");
        }
        listed["description"] = exported["description"].clone();
        assert_eq!(&listed, exported);
    }
    let keying = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        let meta = tool.meta.as_ref().unwrap();
        (meta[CLASS_META].clone(), meta[KEYING_META].clone())
    };
    assert_eq!(keying("find_customer"), (json!("read"), json!("none")));
    assert_eq!(
        keying("send_email"),
        (json!("idempotent_write"), json!("each-call"))
    );
    assert_eq!(
        keying("charge_card"),
        (json!("non_idempotent_write"), json!("window"))
    );
    assert_eq!(
        keying("create_customer"),
        (json!("non_idempotent_write"), json!("natural"))
    );
    assert_eq!(
        keying("delete_account"),
        (json!("irreversible"), json!("window"))
    );
    let by_name = |name: &str| tools.iter().find(|t| t.name == name).unwrap().clone();
    let hints = |name: &str| by_name(name).annotations.unwrap();
    assert_eq!(hints("find_customer").read_only_hint, Some(true));
    assert_eq!(hints("send_email").idempotent_hint, Some(true));
    assert_eq!(hints("send_email").read_only_hint, Some(false));
    assert_eq!(hints("charge_card").idempotent_hint, Some(false));
    assert_eq!(hints("charge_card").destructive_hint, Some(false));
    assert_eq!(hints("delete_account").destructive_hint, Some(true));

    // `Receipt` is an object with a JSON Schema. A read returning any JSON
    // and a write returning a string declare none: their output is text.
    let receipt = by_name("charge_card").output_schema.unwrap();
    assert_eq!(receipt["type"], "object");
    assert_eq!(receipt["properties"]["charge_id"]["type"], "string");
    assert!(by_name("find_customer").output_schema.is_none());
    assert!(by_name("send_email").output_schema.is_none());
    assert_eq!(
        by_name("charge_card").input_schema["required"],
        json!(["customer", "cents"])
    );
    // `cents: u64` keeps its range, without schemars' `format: uint64`,
    // which strict validators (Ajv's, in MCP clients) refuse.
    let cents = &by_name("charge_card").input_schema["properties"]["cents"];
    assert_eq!(cents["minimum"], 0, "{cents:?}");
    assert!(cents.get("format").is_none(), "{cents:?}");
    let listed = serde_json::to_string(&tools).unwrap();
    for format in ["uint", "int8", "int16", "int32", "int64", "float", "double"] {
        assert!(
            !listed.contains(&format!("\"format\":\"{format}")),
            "{listed}"
        );
    }
}

#[test]
fn get_tool_answers_for_registered_tools_only() {
    let ledger = Ledger::default();
    let server = server(&ledger);
    assert_eq!(server.get_tool("send_email").unwrap().name, "send_email");
    assert!(server.get_tool("send_emails").is_none());
}

// ---------------------------------------------------------------------------
// Keys

#[tokio::test]
async fn the_same_write_twice_with_the_same_meta_key_charges_once_and_answers_the_same() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;

    let first = client
        .call_tool(charge("cus_17", 4_900).with_idempotency_key("order-17-payment"))
        .await
        .unwrap();
    // The client timed out and sends the call again: a new JSON-RPC id, the
    // same key.
    let retry = client
        .call_tool(charge("cus_17", 4_900).with_idempotency_key("order-17-payment"))
        .await
        .unwrap();

    assert_eq!(ledger.charges(), 1);
    assert_eq!(first.is_error, Some(false));
    assert_eq!(retry.content, first.content);
    assert_eq!(retry.structured_content, first.structured_content);
    assert_eq!(
        first.structured_content,
        Some(json!({"charge_id": "ch_1", "cents": 4900}))
    );
    assert!(!deduplicated(&first));
    assert!(deduplicated(&retry));
    let key = &first.meta.as_ref().unwrap()[KEY_META];
    assert_eq!(key.as_str().unwrap().len(), 64);
    assert_eq!(&retry.meta.as_ref().unwrap()[KEY_META], key);
}

#[tokio::test]
async fn a_different_meta_key_is_a_second_charge() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    for key in ["order-17-payment", "order-18-payment"] {
        let result = client
            .call_tool(charge("cus_17", 4_900).with_idempotency_key(key))
            .await
            .unwrap();
        assert!(!deduplicated(&result));
    }
    assert_eq!(ledger.charges(), 2);
}

#[tokio::test]
async fn a_write_without_a_key_is_refused_when_the_server_says_so_and_nothing_runs() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger).unkeyed(Unkeyed::Refuse)).await;
    // A progress token is new on every request, like the JSON-RPC id:
    // neither is a key.
    let result = client
        .call_tool(with_meta(
            charge("cus_17", 4_900),
            json!({"progressToken": "progress-1"}),
        ))
        .await
        .unwrap();
    let error = error_of(&result);
    assert_eq!(error["code"], "invalid_key");
    assert!(error["message"].as_str().unwrap().contains("nothing ran"));
    // The model is told to stop, not to put a key into the arguments.
    let words = words(&result);
    assert!(words.contains(IDEMPOTENCY_KEY_META), "{words}");
    assert!(words.contains("Nothing ran"), "{words}");
    assert!(
        words.contains("into the arguments does not help"),
        "{words}"
    );
    assert_eq!(ledger.charges(), 0);
    assert!(!deduplicated(&result));
}

#[tokio::test]
async fn a_write_without_a_key_is_one_effect_within_the_window_and_the_model_is_told() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let first = client.call_tool(charge("cus_17", 4_900)).await.unwrap();
    assert_eq!(first.is_error, Some(false), "{first:?}");
    let again = client.call_tool(charge("cus_17", 4_900)).await.unwrap();
    assert_eq!(ledger.charges(), 1);
    assert!(deduplicated(&again));
    let said = words(&again);
    assert!(said.starts_with("Already done"), "{said}");
    assert!(said.contains(REPEAT_ARGUMENT), "{said}");
    // The output as the first time, after the sentence.
    assert_eq!(again.content[1..], first.content[..]);
    assert_eq!(again.structured_content, first.structured_content);

    // A deliberate second charge, and its retry.
    let mut second = charge("cus_17", 4_900);
    second
        .arguments
        .as_mut()
        .unwrap()
        .insert(REPEAT_ARGUMENT.into(), 1.into());
    let charged = client.call_tool(second.clone()).await.unwrap();
    assert!(!deduplicated(&charged));
    assert!(deduplicated(&client.call_tool(second).await.unwrap()));
    assert_eq!(ledger.charges(), 2);

    let mut bad = charge("cus_17", 4_900);
    bad.arguments
        .as_mut()
        .unwrap()
        .insert(REPEAT_ARGUMENT.into(), "twice".into());
    let refused = client.call_tool(bad).await.unwrap();
    assert_eq!(error_of(&refused)["code"], "invalid_arguments");
    assert_eq!(ledger.charges(), 2);
}

#[tokio::test]
async fn a_malformed_key_is_refused_rather_than_ignored() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    for meta in [
        json!({ IDEMPOTENCY_KEY_META: 17 }),
        json!({ RUN_ID_META: "run-1" }),
        json!({ IDEMPOTENCY_KEY_META: "" }),
    ] {
        let result = client
            .call_tool(with_meta(charge("cus_17", 4_900), meta.clone()))
            .await
            .unwrap();
        assert_eq!(error_of(&result)["code"], "invalid_key", "{meta}");
    }
    assert_eq!(ledger.charges(), 0);
}

#[tokio::test]
async fn run_and_step_in_meta_key_the_call_with_its_arguments() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let at = |step: u64| charge("cus_17", 4_900).with_run_step("run-42", step);

    client.call_tool(at(3)).await.unwrap();
    let replayed = client.call_tool(at(3)).await.unwrap();
    assert!(deduplicated(&replayed));
    assert_eq!(ledger.charges(), 1);

    // The same charge at the next step is a new intent.
    client.call_tool(at(4)).await.unwrap();
    assert_eq!(ledger.charges(), 2);
}

#[tokio::test]
async fn the_meta_key_comes_before_run_and_step() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let meta = |step: u64| json!({ IDEMPOTENCY_KEY_META: "order-17", RUN_ID_META: "run-42", STEP_META: step });
    client
        .call_tool(with_meta(charge("cus_17", 4_900), meta(3)))
        .await
        .unwrap();
    let later = client
        .call_tool(with_meta(charge("cus_17", 4_900), meta(9)))
        .await
        .unwrap();
    assert!(deduplicated(&later));
    assert_eq!(ledger.charges(), 1);
}

#[tokio::test]
async fn a_client_derived_key_is_stable_across_retries_of_one_step() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let at = |step: u64| {
        charge("cus_17", 4_900)
            .with_derived_idempotency_key("run-42", step)
            .unwrap()
    };
    client.call_tool(at(3)).await.unwrap();
    assert!(deduplicated(&client.call_tool(at(3)).await.unwrap()));
    client.call_tool(at(4)).await.unwrap();
    assert_eq!(ledger.charges(), 2);
}

#[tokio::test]
async fn a_natural_key_tool_needs_no_key_from_the_client() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let create = |name: &str| {
        call(
            "create_customer",
            json!({ "email": "ada@example.com", "name": name }),
        )
    };
    let first = client.call_tool(create("Ada")).await.unwrap();
    // Reworded, no key: the same customer.
    let again = client.call_tool(create("Ada Lovelace")).await.unwrap();
    assert!(words(&again).starts_with("Already done"), "{again:?}");
    assert_eq!(again.content[1..], first.content[..]);
    // A string output is text as written, not JSON in quotes: what a chat
    // client shows.
    assert_eq!(first.content[0].as_text().unwrap().text, "cus_1 (Ada)");
    assert_eq!(ledger.customers.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn reads_need_no_key_and_are_never_deduplicated() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let read = call("find_customer", json!({"email": "ada@example.com"}));
    let result = client.call_tool(read).await.unwrap();
    assert_eq!(text(&result)["plan"], "pro");
    assert!(!deduplicated(&result));
    // Not recorded, so there is no key to report.
    assert!(result.meta.unwrap().get(KEY_META).is_none());
}

// ---------------------------------------------------------------------------
// Errors

#[tokio::test]
async fn an_unknown_tool_is_a_protocol_error_with_a_suggestion() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let error = client
        .call_tool(
            call("chrage_card", json!({"customer": "cus_17", "cents": 1}))
                .with_idempotency_key("k"),
        )
        .await
        .unwrap_err();
    let ServiceError::McpError(error) = error else {
        panic!("a JSON-RPC error, got {error:?}")
    };
    assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    assert!(
        error.message.contains("did you mean `charge_card`"),
        "{}",
        error.message
    );
    assert_eq!(error.data.unwrap()["suggestion"], "charge_card");
}

#[tokio::test]
async fn invalid_arguments_are_an_error_result_and_nothing_runs() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let result = client
        .call_tool(
            call(
                "charge_card",
                json!({"customer": "cus_17", "cents": "lots"}),
            )
            .with_idempotency_key("order-17"),
        )
        .await
        .unwrap();
    let error = error_of(&result);
    assert_eq!(error["code"], "invalid_arguments");
    assert!(error["message"].as_str().unwrap().contains("cents"));
    assert_eq!(ledger.charges(), 0);
}

#[tokio::test]
async fn a_key_reused_with_other_arguments_is_an_error_result() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    client
        .call_tool(charge("cus_17", 4_900).with_idempotency_key("order-17"))
        .await
        .unwrap();
    let result = client
        .call_tool(charge("cus_17", 9_900).with_idempotency_key("order-17"))
        .await
        .unwrap();
    assert_eq!(error_of(&result)["code"], "key_reused");
    assert_eq!(ledger.charges(), 1);
}

// ---------------------------------------------------------------------------
// Cancellation and concurrency

/// [`McpServer`], and a signal when a `notifications/cancelled` has been
/// handled (rmcp cancels the request's token before it calls
/// `on_cancelled`).
struct Watched {
    inner: McpServer<Ledger>,
    cancelled: Arc<Notify>,
}

impl ServerHandler for Watched {
    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.inner.list_tools(request, context).await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.get_tool(name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.inner.call_tool(request, context).await
    }

    async fn on_cancelled(
        &self,
        _notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        self.cancelled.notify_one();
    }
}

fn slow(customer: &str) -> CallToolRequestParams {
    call(
        "slow_charge",
        json!({ "customer": customer, "cents": 4_900 }),
    )
    .with_idempotency_key("order-17-payment")
}

#[tokio::test]
async fn a_cancelled_call_that_has_claimed_its_key_still_records_its_outcome() {
    let ledger = Ledger::default();
    let cancelled = Arc::new(Notify::new());
    let client = Arc::new(
        connect(Watched {
            inner: server(&ledger),
            cancelled: cancelled.clone(),
        })
        .await,
    );

    // The call claims its key and reaches the payment provider...
    let pending = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool(slow("cus_17")).await }
    });
    ledger.started.notified().await;
    // ...and the client gives up on it: dropping rmcp's request sends
    // `notifications/cancelled`.
    pending.abort();
    tokio::time::timeout(Duration::from_secs(10), cancelled.notified())
        .await
        .expect("the server saw the cancellation");

    // The charge goes through after the request is gone.
    ledger.gate.add_permits(1);
    let retry = tokio::time::timeout(Duration::from_secs(10), client.call_tool(slow("cus_17")))
        .await
        .expect("the retry is answered")
        .unwrap();
    assert_eq!(retry.is_error, Some(false), "{retry:?}");
    assert!(deduplicated(&retry));
    assert_eq!(
        retry.structured_content,
        Some(json!({"charge_id": "ch_1", "cents": 4900}))
    );
    assert_eq!(ledger.charges(), 1);
}

#[tokio::test]
async fn two_concurrent_identical_calls_charge_once() {
    let ledger = Ledger::default();
    let client = Arc::new(connect(server(&ledger)).await);
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool(slow("cus_17")).await.unwrap() }
    });
    ledger.started.notified().await;
    // The duplicate arrives while the first is at the payment provider.
    let second = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool(slow("cus_17")).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    ledger.gate.add_permits(2);

    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(ledger.charges(), 1);
    assert_eq!(first.content, second.content);
    assert!(!deduplicated(&first));
    assert!(deduplicated(&second));
}

// ---------------------------------------------------------------------------
// Next to rmcp's own tools: the `#[tool]` name clash and the router
// fragment.

mod mixed {
    //! A server of the application's own: rmcp's `#[tool]` is in scope (so
    //! a bare `#[tool]` is rmcp's), idem's is written `#[idem::tool]`, and
    //! both kinds of tool are served by one `ToolRouter`.

    use idem::mcp::McpServer;
    use idem::{tools, Dispatcher, Executor, MemoryStore, State, ToolError};
    use rmcp::handler::server::router::tool::ToolRouter;
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::{tool, tool_handler, tool_router, ServerHandler};
    use schemars::JsonSchema;
    use serde::Deserialize;

    use super::{Charge, Ledger, Receipt};

    #[derive(Deserialize, JsonSchema)]
    pub struct Greeting {
        name: String,
    }

    /// An idem tool, in a module where `tool` means rmcp's.
    #[idem::tool(class = "non_idempotent_write")]
    async fn refund(args: Charge, State(ledger): State<Ledger>) -> Result<Receipt, ToolError> {
        Ok(ledger.charge(&args))
    }

    pub struct Shop {
        tool_router: ToolRouter<Shop>,
    }

    #[tool_router]
    impl Shop {
        /// Say hello (an rmcp tool).
        #[tool]
        fn hello(&self, Parameters(greeting): Parameters<Greeting>) -> String {
            format!("hello, {}", greeting.name)
        }
    }

    #[tool_handler(router = self.tool_router)]
    impl ServerHandler for Shop {}

    impl Shop {
        pub fn new(ledger: &Ledger) -> Shop {
            let executor = Executor::builder(MemoryStore::new())
                .state(ledger.clone())
                .build();
            let idem_tools = McpServer::new(Dispatcher::new(executor, tools![refund]));
            Shop {
                tool_router: Shop::tool_router() + idem_tools.tool_router(),
            }
        }
    }
}

#[tokio::test]
async fn rmcp_tools_and_idem_tools_serve_side_by_side_from_one_router() {
    let ledger = Ledger::default();
    let client = connect(mixed::Shop::new(&ledger)).await;

    let names: Vec<_> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["hello", "refund"]);

    let hello = client
        .call_tool(call("hello", json!({"name": "Ada"})))
        .await
        .unwrap();
    assert_eq!(hello.content[0].as_text().unwrap().text, "hello, Ada");

    // The idem tool behind the fragment is keyed as on `McpServer`: by a
    // window without a key, by the key with one.
    let refund = || call("refund", json!({"customer": "cus_17", "cents": 900}));
    client.call_tool(refund()).await.unwrap();
    let unkeyed = client.call_tool(refund()).await.unwrap();
    assert!(deduplicated(&unkeyed));
    client
        .call_tool(refund().with_idempotency_key("refund-17"))
        .await
        .unwrap();
    let again = client
        .call_tool(refund().with_idempotency_key("refund-17"))
        .await
        .unwrap();
    assert!(deduplicated(&again));
    assert_eq!(ledger.charges(), 2);
}

// ---------------------------------------------------------------------------
// The `Idempotency-Key` header on the streamable HTTP transport

mod http_transport {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    use serde_json::{json, Value};

    use super::{server, Ledger};

    /// A stateless JSON-response service, as a gateway in front of many
    /// workers would run it.
    pub fn service(
        ledger: &Ledger,
    ) -> StreamableHttpService<idem::mcp::McpServer<Ledger>, NeverSessionManager> {
        service_of(server(ledger))
    }

    /// `server` as such a service.
    pub fn service_of(
        server: idem::mcp::McpServer<Ledger>,
    ) -> StreamableHttpService<idem::mcp::McpServer<Ledger>, NeverSessionManager> {
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true);
        StreamableHttpService::new(move || Ok(server.clone()), Default::default(), config)
    }

    /// POST one JSON-RPC request; the JSON-RPC response.
    pub async fn post(
        service: &StreamableHttpService<idem::mcp::McpServer<Ledger>, NeverSessionManager>,
        id: u64,
        params: Value,
        idempotency_key: Option<&str>,
    ) -> Value {
        let key: Vec<_> = idempotency_key
            .map(|k| ("Idempotency-Key", k))
            .into_iter()
            .collect();
        post_with(service, id, params, &key).await
    }

    /// POST one JSON-RPC request with these extra headers.
    pub async fn post_with(
        service: &StreamableHttpService<idem::mcp::McpServer<Ledger>, NeverSessionManager>,
        id: u64,
        params: Value,
        headers: &[(&str, &str)],
    ) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let mut request = http::Request::post("http://localhost/mcp")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let response = service.handle(request).await;
        assert_eq!(response.status(), 200);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&body).unwrap()
    }
}

#[tokio::test]
async fn the_idempotency_key_header_keys_a_call_on_streamable_http() {
    let ledger = Ledger::default();
    let service = http_transport::service(&ledger);
    let params = json!({"name": "charge_card", "arguments": {"customer": "cus_17", "cents": 4900}});

    // Two requests, two JSON-RPC ids, one key: one charge.
    let first = http_transport::post(&service, 1, params.clone(), Some("\"order-17\"")).await;
    let retry = http_transport::post(&service, 2, params.clone(), Some("order-17")).await;
    assert_eq!(first["result"]["isError"], false, "{first}");
    assert_eq!(retry["result"]["content"], first["result"]["content"]);
    assert_eq!(retry["result"]["_meta"][DEDUPLICATED_META], true);
    assert_eq!(ledger.charges(), 1);

    // A `_meta` key outranks the header.
    let mut with_meta = params.clone();
    with_meta["_meta"] = json!({ IDEMPOTENCY_KEY_META: "order-18" });
    let other = http_transport::post(&service, 3, with_meta, Some("order-17")).await;
    assert_eq!(other["result"]["_meta"][DEDUPLICATED_META], false);
    assert_eq!(ledger.charges(), 2);

    // Without a header nor `_meta`, the charge is keyed by what it does:
    // a third charge, and its re-sent request (a new JSON-RPC id, as the
    // spec requires) is answered from it.
    let unkeyed = http_transport::post(&service, 4, params.clone(), None).await;
    assert_eq!(unkeyed["result"]["_meta"][DEDUPLICATED_META], false);
    let resent = http_transport::post(&service, 5, params, None).await;
    assert_eq!(resent["result"]["_meta"][DEDUPLICATED_META], true);
    assert_eq!(ledger.charges(), 3);
}

#[tokio::test]
async fn one_users_key_or_repeat_never_answers_another_users_call() {
    let ledger = Ledger::default();
    // Who is calling, as the authenticating proxy in front says.
    let server = server(&ledger).principal(|context| {
        let parts = context.extensions.get::<http::request::Parts>()?;
        Some(parts.headers.get("x-user")?.to_str().ok()?.to_owned())
    });
    let service = http_transport::service_of(server);
    let params = json!({"name": "charge_card", "arguments": {"customer": "cus_17", "cents": 4900}});
    let as_user = |user: &'static str, key: Option<&'static str>| {
        let mut headers = vec![("x-user", user)];
        headers.extend(key.map(|k| ("Idempotency-Key", k)));
        headers
    };

    // The same key from two users: two charges, each answered its own.
    let ada =
        http_transport::post_with(&service, 1, params.clone(), &as_user("ada", Some("k-1"))).await;
    let bob =
        http_transport::post_with(&service, 2, params.clone(), &as_user("bob", Some("k-1"))).await;
    assert_eq!(bob["result"]["_meta"][DEDUPLICATED_META], false, "{bob}");
    assert_ne!(
        bob["result"]["structuredContent"],
        ada["result"]["structuredContent"]
    );
    assert_eq!(ledger.charges(), 2);
    // Each user's retry is theirs.
    let ada_again =
        http_transport::post_with(&service, 3, params.clone(), &as_user("ada", Some("k-1"))).await;
    assert_eq!(
        ada_again["result"]["structuredContent"],
        ada["result"]["structuredContent"]
    );

    // The same unkeyed call from two users: two charges too.
    http_transport::post_with(&service, 4, params.clone(), &as_user("ada", None)).await;
    let bob_unkeyed =
        http_transport::post_with(&service, 5, params.clone(), &as_user("bob", None)).await;
    assert_eq!(bob_unkeyed["result"]["_meta"][DEDUPLICATED_META], false);
    assert_eq!(ledger.charges(), 4);
    let ada_repeat = http_transport::post_with(&service, 6, params, &as_user("ada", None)).await;
    assert_eq!(ada_repeat["result"]["_meta"][DEDUPLICATED_META], true);
    assert_eq!(ledger.charges(), 4);
}

// ---------------------------------------------------------------------------
// End to end: `examples/mcp_server.rs` over stdio

#[cfg(feature = "sqlite")]
mod example {
    use std::path::PathBuf;

    use rmcp::transport::TokioChildProcess;

    use super::Client;
    use rmcp::ServiceExt;

    pub use super::mcp_example::{binary, TempDir};

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
    let names: Vec<_> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
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
