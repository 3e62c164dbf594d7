//! An idem MCP server as chat clients use it, with rmcp's client sending
//! what Claude Code, VS Code, Codex and a client with no keys at all send,
//! and answering the approval questions a person in the chat is asked.
//! Effects are counted by the tools.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use idem::approval::{ApprovalDecision, Callback};
use idem::mcp::{
    McpServer, CLAUDE_CODE_TOOL_USE_META, CODEX_TURN_META, DEDUPLICATED_META, ERROR_META,
    REASON_META, REPEAT_ARGUMENT, VSCODE_CONVERSATION_META, VSCODE_REQUEST_META,
};
use idem::operator::Filter;
use idem::record::{AuditAction, Status};
use idem::{tools, Dispatcher, Executor, MemoryStore, State, Store, ToolError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    FormElicitationCapability, Implementation, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Clone, Default)]
pub struct World {
    pub charges: Arc<AtomicUsize>,
    pub emails: Arc<AtomicUsize>,
    pub deletions: Arc<AtomicUsize>,
}

impl World {
    pub fn count(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct Charge {
    customer: String,
    cents: u32,
}

/// Charge a customer's card.
#[idem::tool(class = "non_idempotent_write")]
async fn charge_card(args: Charge, State(world): State<World>) -> Result<String, ToolError> {
    let n = world.charges.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!(
        "charge ch_{n}: {} cents to {}",
        args.cents, args.customer
    ))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct Status_ {
    ticket: String,
    status: String,
}

/// Set a ticket's status.
#[idem::tool(class = "idempotent_write")]
async fn set_status(args: Status_, State(world): State<World>) -> Result<String, ToolError> {
    world.emails.fetch_add(1, Ordering::SeqCst);
    Ok(format!("{} is {}", args.ticket, args.status))
}

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct Account {
    customer: String,
}

/// Delete a customer's account and all their data.
#[idem::tool(class = "irreversible")]
async fn delete_account(args: Account, State(world): State<World>) -> Result<String, ToolError> {
    world.deletions.fetch_add(1, Ordering::SeqCst);
    Ok(format!("deleted {}", args.customer))
}

/// A server on an in-memory store whose approval policy leaves every
/// deletion to a person.
pub fn server(world: &World) -> (McpServer<World>, Arc<dyn Store>) {
    server_on(world, None)
}

/// [`server`], on `clock` when given.
pub fn server_on(
    world: &World,
    clock: Option<Arc<idem::clock::ManualClock>>,
) -> (McpServer<World>, Arc<dyn Store>) {
    let store: Arc<dyn Store> = match &clock {
        Some(clock) => Arc::new(MemoryStore::with_clock(clock.clone())),
        None => Arc::new(MemoryStore::new()),
    };
    let mut executor = Executor::builder_shared(store.clone());
    if let Some(clock) = clock {
        executor = executor.clock(clock);
    }
    let executor = executor
        .state(world.clone())
        .approvals(Callback::new(|_| async {
            Ok(ApprovalDecision::Pending {
                message: "deleting an account needs a person".into(),
            })
        }))
        .build();
    let registry = tools![charge_card, set_status, delete_account];
    (McpServer::new(Dispatcher::new(executor, registry)), store)
}

/// A chat client: answers approval questions as `answer` says (when it
/// declares elicitation), and keeps what it was asked.
#[derive(Clone)]
pub struct Chat {
    answer: Option<ElicitationAction>,
    asked: Arc<Mutex<Vec<String>>>,
    /// Declares the tasks extension.
    tasks: bool,
}

impl Chat {
    fn answering(answer: ElicitationAction) -> Chat {
        Chat {
            answer: Some(answer),
            asked: Arc::default(),
            tasks: false,
        }
    }

    pub fn without_elicitation() -> Chat {
        Chat {
            answer: None,
            asked: Arc::default(),
            tasks: false,
        }
    }

    pub fn taking_tasks() -> Chat {
        Chat {
            tasks: true,
            ..Chat::without_elicitation()
        }
    }

    fn questions(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl ClientHandler for Chat {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        if self.answer.is_some() {
            let mut elicitation = ElicitationCapability::new();
            elicitation.form = Some(FormElicitationCapability::default());
            capabilities.elicitation = Some(elicitation);
        }
        let mut config = ClientConfig::default();
        config.capabilities = capabilities;
        config.client_info = Implementation::new("test-chat", "1.0");
        config
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            panic!("a form")
        };
        self.asked.lock().unwrap().push(message);
        Ok(ElicitResult::new(
            self.answer.clone().expect("asked only when declared"),
        ))
    }
}

pub type Client = RunningService<RoleClient, Chat>;

pub async fn connect(server: McpServer<World>, chat: Chat) -> Client {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    chat.serve(client_io).await.expect("the client connects")
}

fn call(tool: &'static str, arguments: Value, meta: Value) -> CallToolRequestParams {
    let (Value::Object(arguments), Value::Object(meta)) = (arguments, meta) else {
        panic!("objects")
    };
    let mut params = CallToolRequestParams::new(tool).with_arguments(arguments);
    params.meta = Some(RequestMetaObject(meta.into()));
    params
}

fn charge(meta: Value) -> CallToolRequestParams {
    call(
        "charge_card",
        json!({"customer": "ada", "cents": 4900}),
        meta,
    )
}

pub fn words(result: &CallToolResult) -> &str {
    &result.content[0].as_text().expect("text").text
}

pub fn deduplicated(result: &CallToolResult) -> bool {
    result.meta.as_ref().unwrap()[DEDUPLICATED_META] == true
}

pub fn code(result: &CallToolResult) -> Value {
    result.meta.as_ref().unwrap()[ERROR_META]["code"].clone()
}

/// What the operator decides about the one call awaiting approval.
pub enum Decision {
    Approve,
    Deny(&'static str),
}

/// An operator (`idem approve`, the inbox) decides the one call awaiting
/// approval in `store`.
pub async fn operator_decides(store: &Arc<dyn Store>, decision: Decision) {
    let operator = idem::operator::Operator::new(store.clone());
    let record = operator
        .list(&Filter::default(), None, 10)
        .await
        .unwrap()
        .records
        .remove(0);
    assert_eq!(record.status(), Status::AwaitingApproval);
    match decision {
        Decision::Approve => operator
            .approve_record(
                &record,
                idem::approval::Approval::granted_by("ops@example.com"),
            )
            .await
            .map(drop),
        Decision::Deny(reason) => operator
            .deny_record(&record, "ops@example.com", reason)
            .await
            .map(drop),
    }
    .unwrap();
}

// ---------------------------------------------------------------------------
// Keys from what clients send

#[tokio::test]
async fn claude_code_repeating_a_charge_in_a_later_turn_charges_once() {
    let world = World::default();
    let client = connect(server(&world).0, Chat::without_elicitation()).await;
    let turn = |id: &str| json!({ CLAUDE_CODE_TOOL_USE_META: id });

    let first = client.call_tool(charge(turn("toolu_01"))).await.unwrap();
    assert_eq!(words(&first), "charge ch_1: 4900 cents to ada");
    // The same tool use, re-sent.
    assert!(deduplicated(
        &client.call_tool(charge(turn("toolu_01"))).await.unwrap()
    ));
    // The model calls it again "to be sure", in a later turn: a new tool-use
    // id. Still one charge, and the model is told so.
    let later = client.call_tool(charge(turn("toolu_02"))).await.unwrap();
    assert!(deduplicated(&later));
    assert!(
        words(&later).starts_with("Already done"),
        "{}",
        words(&later)
    );
    assert_eq!(World::count(&world.charges), 1);

    // The user asks for a second charge, and the model means it.
    let mut again = charge(turn("toolu_03"));
    again
        .arguments
        .as_mut()
        .unwrap()
        .insert(REPEAT_ARGUMENT.into(), 1.into());
    let second = client.call_tool(again).await.unwrap();
    assert_eq!(words(&second), "charge ch_2: 4900 cents to ada");
    assert_eq!(World::count(&world.charges), 2);
}

#[tokio::test]
async fn an_idempotent_write_is_one_effect_until_other_arguments_whatever_ids_a_client_sends() {
    let world = World::default();
    let client = connect(server(&world).0, Chat::without_elicitation()).await;
    let status =
        |to: &str, meta: Value| call("set_status", json!({"ticket": "T-7", "status": to}), meta);
    let vscode =
        |request: &str| json!({ VSCODE_CONVERSATION_META: "conv-1", VSCODE_REQUEST_META: request });
    client
        .call_tool(status("closed", vscode("req-1")))
        .await
        .unwrap();
    let resent = client
        .call_tool(status("closed", vscode("req-1")))
        .await
        .unwrap();
    assert!(deduplicated(&resent));
    // The next chat request with the same arguments is the model repeating
    // itself "to be sure": the window holds across the client's ids.
    let repeated = client
        .call_tool(status("closed", vscode("req-2")))
        .await
        .unwrap();
    assert!(deduplicated(&repeated));
    assert_eq!(World::count(&world.emails), 1);

    // Reopened, then closed again: each a change of mind, each run.
    client
        .call_tool(status("open", vscode("req-3")))
        .await
        .unwrap();
    let codex = |turn: &str| json!({ CODEX_TURN_META: json!({"session_id": "s", "thread_id": "th-1", "turn_id": turn}).to_string() });
    let closed = client
        .call_tool(status("closed", codex("turn-1")))
        .await
        .unwrap();
    assert!(!deduplicated(&closed));
    assert_eq!(World::count(&world.emails), 3);

    // No ids at all: the same window.
    let again = client.call_tool(status("closed", json!({}))).await.unwrap();
    assert!(deduplicated(&again));
    assert_eq!(World::count(&world.emails), 3);
}

#[tokio::test]
async fn a_charge_with_no_ids_at_all_is_one_effect_and_the_json_rpc_id_is_never_a_key() {
    let world = World::default();
    let client = connect(server(&world).0, Chat::without_elicitation()).await;
    // Each call is a new JSON-RPC request with a new id and progress token.
    for n in 0..3 {
        let result = client
            .call_tool(charge(json!({ "progressToken": format!("p-{n}") })))
            .await
            .unwrap();
        assert_eq!(deduplicated(&result), n > 0);
    }
    assert_eq!(World::count(&world.charges), 1);
}

// ---------------------------------------------------------------------------
// Approvals asked of the person in the chat

pub fn delete(meta: Value) -> CallToolRequestParams {
    call("delete_account", json!({"customer": "ada"}), meta)
}

#[tokio::test]
async fn accepted_in_the_chat_the_deletion_runs_once_and_the_approver_is_recorded() {
    let world = World::default();
    let (server, store) = server(&world);
    let chat = Chat::answering(ElicitationAction::Accept);
    let client = connect(server, chat.clone()).await;

    // The model's words, trying to pass for the question's own lines.
    let why = "Ada asked to leave.\n\nAccept runs it once.\u{202e} (nothing is deleted)";
    let result = client
        .call_tool(delete(json!({ REASON_META: why })))
        .await
        .unwrap();
    assert_eq!(words(&result), "deleted ada", "{result:?}");
    assert_eq!(World::count(&world.deletions), 1);
    // The person saw the tool, what it does, the exact arguments and the
    // reason given, escaped onto one line.
    let questions = chat.questions();
    assert_eq!(questions.len(), 1);
    assert!(questions[0].contains("delete_account"), "{}", questions[0]);
    assert!(questions[0].contains("all their data"), "{}", questions[0]);
    assert!(
        questions[0].contains("\"customer\": \"ada\""),
        "{}",
        questions[0]
    );
    assert!(
        questions[0].contains(
            "The reason given for it: Ada asked to leave.\\n\\nAccept runs it once.\\u{202e} (nothing is deleted)\n"
        ),
        "{}",
        questions[0]
    );
    assert!(!questions[0].contains('\u{202e}'));

    // The model repeats it: answered, not asked, not run.
    let again = client.call_tool(delete(json!({}))).await.unwrap();
    assert!(deduplicated(&again));
    assert_eq!(chat.questions().len(), 1);
    assert_eq!(World::count(&world.deletions), 1);

    let operator = idem::operator::Operator::new(store);
    let record = &operator
        .list(&Filter::default(), None, 10)
        .await
        .unwrap()
        .records[0];
    assert_eq!(
        record.info.reason.as_ref().map(|r| r.as_str()),
        Some(why),
        "recorded as given"
    );
    let trail: Vec<_> = record
        .audit
        .iter()
        .map(|e| (e.action, e.by.clone(), e.reason.clone()))
        .collect();
    // Recorded under the name the approval rules judge, the client beside.
    assert_eq!(
        trail,
        [(
            AuditAction::Approved,
            "the chat user".to_owned(),
            Some("approved in the chat (test-chat)".to_owned())
        )]
    );
}

#[tokio::test]
async fn declined_in_the_chat_nothing_runs_and_the_model_is_told_not_to_retry() {
    let world = World::default();
    let chat = Chat::answering(ElicitationAction::Decline);
    let client = connect(server(&world).0, chat.clone()).await;
    let result = client.call_tool(delete(json!({}))).await.unwrap();
    assert_eq!(code(&result), "approval_denied");
    assert!(words(&result).contains("declined"), "{}", words(&result));
    assert!(
        words(&result).contains("do not call it again"),
        "{}",
        words(&result)
    );
    assert!(
        !deduplicated(&result),
        "declined in this very request: its own answer"
    );
    let again = client.call_tool(delete(json!({}))).await.unwrap();
    assert_eq!(code(&again), "approval_denied");
    assert!(
        deduplicated(&again),
        "the repeat is answered from the record"
    );
    assert_eq!(chat.questions().len(), 1);
    assert_eq!(World::count(&world.deletions), 0);
}

#[tokio::test]
async fn cancelled_in_the_chat_it_stays_pending_is_never_asked_again_and_an_operator_can_decide() {
    let world = World::default();
    let (server, store) = server(&world);
    let chat = Chat::answering(ElicitationAction::Cancel);
    let client = connect(server, chat.clone()).await;
    let result = client.call_tool(delete(json!({}))).await.unwrap();
    assert_eq!(code(&result), "approval_pending");
    let key = &result.meta.as_ref().unwrap()[idem::mcp::KEY_META];
    assert!(
        key.as_str().is_some_and(|k| k.len() == 64),
        "the pending call's key is in `_meta` for programs: {key}"
    );
    assert!(
        words(&result).contains("waiting for approval"),
        "{}",
        words(&result)
    );
    let again = client.call_tool(delete(json!({}))).await.unwrap();
    assert_eq!(code(&again), "approval_pending");
    assert_eq!(chat.questions().len(), 1, "asked once");
    assert_eq!(World::count(&world.deletions), 0);

    // An operator approves it (`idem approve`, the inbox): the next call
    // runs it once.
    operator_decides(&store, Decision::Approve).await;
    let ran = client.call_tool(delete(json!({}))).await.unwrap();
    assert_eq!(words(&ran), "deleted ada");
    assert_eq!(World::count(&world.deletions), 1);
}

#[tokio::test]
async fn a_client_without_elicitation_gets_a_pending_answer_the_model_can_relay() {
    let world = World::default();
    let client = connect(server(&world).0, Chat::without_elicitation()).await;
    let result = client.call_tool(delete(json!({}))).await.unwrap();
    assert_eq!(code(&result), "approval_pending");
    let said = words(&result);
    assert!(said.contains("needs a person's approval"), "{said}");
    assert!(said.contains("Nothing ran"), "{said}");
    assert!(
        !said.contains("idem approve"),
        "no operator command for a chat: {said}"
    );
    assert_eq!(World::count(&world.deletions), 0);
}

#[tokio::test]
async fn an_approver_who_edits_the_arguments_is_named_to_the_model_with_what_ran() {
    let world = World::default();
    let (server, store) = server(&world);
    let client = connect(server, Chat::without_elicitation()).await;
    let result = client.call_tool(delete(json!({}))).await.unwrap();
    assert_eq!(code(&result), "approval_pending");
    // The approver deletes bob's account instead (`idem approve
    // --edit-args`, the inbox's edit form).
    let operator = idem::operator::Operator::new(store.clone());
    let listed = operator.list(&Filter::default(), None, 10).await.unwrap();
    operator
        .edit_record(
            &listed.records[0],
            idem::dispatch::Arguments::Json(json!({"customer": "bob \u{202e}"})),
            idem::approval::Approval::granted_by("ops@example.com"),
        )
        .await
        .unwrap();
    // The model's retry: the edited call ran, and the model reads who
    // changed what (escaped) before the output.
    for _ in 0..2 {
        let ran = client.call_tool(delete(json!({}))).await.unwrap();
        assert_eq!(ran.is_error, Some(false));
        let said = words(&ran);
        assert!(
            said.starts_with(r#"Edited before it ran: ops@example.com changed the arguments of this `delete_account` call to {"customer":"bob \u202e"}"#),
            "{said}"
        );
        assert!(said.contains("the arguments you sent never ran"), "{said}");
        let output = ran.content.last().unwrap().as_text().unwrap();
        assert_eq!(output.text, "deleted bob \u{202e}");
    }
    assert_eq!(World::count(&world.deletions), 1);
}

#[tokio::test]
async fn an_operator_only_tool_is_not_asked_in_the_chat() {
    let world = World::default();
    let server = server(&world)
        .0
        .approver("delete_account", idem::mcp::Approver::Operator);
    let chat = Chat::answering(ElicitationAction::Accept);
    let client = connect(server, chat.clone()).await;
    let result = client.call_tool(delete(json!({}))).await.unwrap();
    assert_eq!(code(&result), "approval_pending");
    assert!(chat.questions().is_empty());
    assert_eq!(World::count(&world.deletions), 0);
}

// ---------------------------------------------------------------------------
// The 2026-07-28 form: an input-required result and a sealed state

/// `_meta` of a request on protocol 2026-07-28, whose client declares form
/// elicitation.
fn newest_protocol() -> Value {
    let mut capabilities = ClientCapabilities::default();
    let mut elicitation = ElicitationCapability::new();
    elicitation.form = Some(FormElicitationCapability::default());
    capabilities.elicitation = Some(elicitation);
    let meta = RequestMetaObject::with_client_context(
        ProtocolVersion::V_2026_07_28,
        Implementation::new("newest-chat", "2.0"),
        capabilities,
    );
    serde_json::to_value(meta).unwrap()
}

fn input_required(response: CallToolResponse) -> rmcp::model::InputRequiredResult {
    match response {
        CallToolResponse::InputRequired(asked) => asked,
        other => panic!("expected an input-required result, got {other:?}"),
    }
}

fn complete(response: CallToolResponse) -> CallToolResult {
    match response {
        CallToolResponse::Complete(result) => result,
        other => panic!("expected a result, got {other:?}"),
    }
}

/// The question a call is answered with.
async fn question(
    client: &Client,
    params: CallToolRequestParams,
) -> rmcp::model::InputRequiredResult {
    input_required(client.call_tool_once(params).await.unwrap())
}

/// The result a call is answered with.
async fn finished(client: &Client, params: CallToolRequestParams) -> CallToolResult {
    complete(client.call_tool_once(params).await.unwrap())
}

fn answered(
    mut params: CallToolRequestParams,
    asked: &rmcp::model::InputRequiredResult,
    action: &str,
) -> CallToolRequestParams {
    let (id, _) = asked
        .input_requests
        .as_ref()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    params.input_responses = Some([(id.clone(), json!({ "action": action }))].into());
    params.request_state = asked.request_state.clone();
    params
}

#[tokio::test]
async fn on_the_newest_protocol_the_question_is_a_result_and_its_answer_comes_back_once() {
    let world = World::default();
    let client = connect(server(&world).0, Chat::without_elicitation()).await;

    let asked = question(&client, delete(newest_protocol())).await;
    let question = serde_json::to_value(&asked).unwrap();
    let text = question.to_string();
    assert!(
        text.contains("delete_account") && text.contains("ada"),
        "{text}"
    );
    assert_eq!(World::count(&world.deletions), 0);

    // A state that was tampered with is refused, and nothing runs.
    let mut forged = answered(delete(newest_protocol()), &asked, "accept");
    forged.request_state = forged.request_state.map(|s| format!("{s}x"));
    let refused = finished(&client, forged).await;
    assert_eq!(refused.is_error, Some(true));
    assert!(
        words(&refused).contains("could not be verified"),
        "{}",
        words(&refused)
    );
    assert_eq!(World::count(&world.deletions), 0);
    // Nor is an answer for other arguments taken.
    let other = answered(
        call(
            "delete_account",
            json!({"customer": "bob"}),
            newest_protocol(),
        ),
        &asked,
        "accept",
    );
    let refused = finished(&client, other).await;
    assert!(
        words(&refused).contains("other arguments"),
        "{}",
        words(&refused)
    );

    // The person accepts: it runs once.
    let accept = answered(delete(newest_protocol()), &asked, "accept");
    let ran = finished(&client, accept.clone()).await;
    assert_eq!(words(&ran), "deleted ada");
    // The same answer sent again is not a second approval.
    let replayed = finished(&client, accept).await;
    assert!(deduplicated(&replayed));
    assert_eq!(World::count(&world.deletions), 1);
}

#[tokio::test]
async fn on_the_newest_protocol_a_declined_question_denies_and_a_cancelled_one_stays_pending() {
    let world = World::default();
    let client = connect(server(&world).0, Chat::without_elicitation()).await;
    let asked = question(&client, delete(newest_protocol())).await;
    let declined = finished(
        &client,
        answered(delete(newest_protocol()), &asked, "decline"),
    )
    .await;
    assert_eq!(code(&declined), "approval_denied");

    let bob = || {
        call(
            "delete_account",
            json!({"customer": "bob"}),
            newest_protocol(),
        )
    };
    let asked = question(&client, bob()).await;
    let cancelled = finished(&client, answered(bob(), &asked, "cancel")).await;
    assert_eq!(code(&cancelled), "approval_pending");
    // Not asked again.
    let again = finished(&client, bob()).await;
    assert_eq!(code(&again), "approval_pending");
    assert_eq!(World::count(&world.deletions), 0);
}

#[tokio::test]
async fn calls_are_keyed_in_the_executors_namespace_unless_the_server_names_one() {
    let world = World::default();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let executor = Executor::builder_shared(store.clone())
        .state(world.clone())
        .namespace(idem::Namespace::new("acme").unwrap())
        .build();
    let server = McpServer::new(Dispatcher::new(executor, tools![charge_card]));
    let client = connect(server, Chat::without_elicitation()).await;
    client.call_tool(charge(json!({}))).await.unwrap();
    let operator = idem::operator::Operator::new(store);
    let records = operator
        .list(&Filter::default(), None, 10)
        .await
        .unwrap()
        .records;
    assert_eq!(records[0].info.namespace.as_deref(), Some("acme"));
}
