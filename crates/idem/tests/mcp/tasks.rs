//! Long waits as MCP Tasks, for a client that declared the tasks
//! extension: a call that waits for an operator's approval, and a write
//! that runs longer than the server's `tasks_after`. The task is the call's
//! record: it completes once, with the call's own result.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use idem::mcp::{McpServer, DEDUPLICATED_META, KEY_META};
use idem::{tools, Dispatcher, Executor, MemoryStore, State, Store, ToolError};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, GetTaskParams, TaskPayload, TaskStatus,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::chat::{
    code, connect, deduplicated, delete, operator_decides, server, server_on, words, Chat, Client,
    Decision, World,
};

fn task_of(response: CallToolResponse) -> String {
    match response {
        CallToolResponse::Task(created) => {
            assert_eq!(created.task.status, TaskStatus::Working);
            created.task.task_id
        }
        other => panic!("expected a task, got {other:?}"),
    }
}

async fn poll(client: &Client, id: &str) -> (TaskStatus, Option<CallToolResult>) {
    let got = client.get_task(GetTaskParams::new(id)).await.unwrap();
    let result = match &got.task.payload {
        TaskPayload::Completed { result } => {
            Some(serde_json::from_value(Value::Object(result.clone())).unwrap())
        }
        _ => None,
    };
    (got.task.status(), result)
}

#[tokio::test]
async fn a_call_waiting_for_an_operator_is_a_task_that_completes_once_when_approved() {
    let world = World::default();
    let (server, store) = server(&world);
    let client = connect(server, Chat::taking_tasks()).await;

    let id = task_of(client.call_tool_once(delete(json!({}))).await.unwrap());
    let (status, _) = poll(&client, &id).await;
    assert_eq!(status, TaskStatus::Working);
    assert_eq!(World::count(&world.deletions), 0);

    // Persisted before the answer: the operator sees it and approves it.
    operator_decides(&store, Decision::Approve).await;

    let (status, result) = poll(&client, &id).await;
    assert_eq!(status, TaskStatus::Completed);
    assert_eq!(words(&result.unwrap()), "deleted ada");
    // Polled again, or the call repeated: the same deletion.
    let (_, again) = poll(&client, &id).await;
    assert_eq!(words(&again.unwrap()), "deleted ada");
    assert!(deduplicated(
        &client.call_tool(delete(json!({}))).await.unwrap()
    ));
    assert_eq!(World::count(&world.deletions), 1);
}

#[tokio::test]
async fn a_denied_task_completes_with_the_denial_and_a_forged_id_is_refused() {
    let world = World::default();
    let (server, store) = server(&world);
    let client = connect(server, Chat::taking_tasks()).await;
    let id = task_of(client.call_tool_once(delete(json!({}))).await.unwrap());
    operator_decides(&store, Decision::Deny("ada asked to keep her account")).await;
    let (status, result) = poll(&client, &id).await;
    assert_eq!(status, TaskStatus::Completed);
    let result = result.unwrap();
    assert_eq!(code(&result), "approval_denied");
    assert!(
        words(&result).contains("keep her account"),
        "{}",
        words(&result)
    );

    let forged = client
        .get_task(GetTaskParams::new(format!("{id}x")))
        .await
        .unwrap_err();
    assert!(
        forged.to_string().contains("does not know task"),
        "{forged}"
    );
    assert_eq!(World::count(&world.deletions), 0);
}

#[tokio::test]
async fn an_approval_that_lands_long_after_the_window_still_runs_the_task_once() {
    let world = World::default();
    let clock = Arc::new(idem::clock::ManualClock::new(1_796_083_200_000));
    let (server, store) = server_on(&world, Some(clock.clone()));
    let client = connect(server, Chat::taking_tasks()).await;
    let id = task_of(client.call_tool_once(delete(json!({}))).await.unwrap());

    // The operator gets to it an hour later: six windows on.
    clock.advance(std::time::Duration::from_secs(3600));
    operator_decides(&store, Decision::Approve).await;
    let (status, result) = poll(&client, &id).await;
    assert_eq!(status, TaskStatus::Completed);
    assert_eq!(words(&result.unwrap()), "deleted ada");
    assert_eq!(World::count(&world.deletions), 1);
}

// ---------------------------------------------------------------------------
// Calls that run long

#[derive(Clone, Serialize, Deserialize, JsonSchema)]
struct Report {
    quarter: String,
}

/// Export a quarter's report to the shared drive (takes a while).
#[idem::tool(class = "non_idempotent_write")]
async fn export_report(args: Report, State(world): State<World>) -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_millis(600)).await;
    let n = world.emails.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("export #{n} of {}", args.quarter))
}

/// Read a quarter's figures (takes a while).
#[idem::tool(class = "read")]
async fn read_figures(args: Report, State(world): State<World>) -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_millis(400)).await;
    world.charges.fetch_add(1, Ordering::SeqCst);
    Ok(format!("figures of {}", args.quarter))
}

/// A server whose calls become tasks after `after`.
fn slow_server(world: &World, after: Option<Duration>) -> McpServer<World> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let executor = Executor::builder_shared(store).state(world.clone()).build();
    let registry = tools![export_report, read_figures];
    McpServer::new(Dispatcher::new(executor, registry)).tasks_after(after)
}

fn report(tool: &'static str) -> CallToolRequestParams {
    let Value::Object(arguments) = json!({ "quarter": "Q3" }) else {
        unreachable!()
    };
    CallToolRequestParams::new(tool).with_arguments(arguments)
}

/// Poll the task until it completes (within ten seconds).
async fn completed(client: &Client, id: &str) -> CallToolResult {
    for _ in 0..200 {
        if let (TaskStatus::Completed, Some(result)) = poll(client, id).await {
            return result;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("task {id} did not complete in 10 s")
}

#[tokio::test]
async fn a_long_write_becomes_a_task_that_completes_once_with_the_calls_own_result() {
    let world = World::default();
    let client = connect(
        slow_server(&world, Some(Duration::from_millis(100))),
        Chat::taking_tasks(),
    )
    .await;

    let (created, meta) = match client
        .call_tool_once(report("export_report"))
        .await
        .unwrap()
    {
        CallToolResponse::Task(created) => (created.task, created.meta.unwrap()),
        other => panic!("expected a task, got {other:?}"),
    };
    // The record's key, as on every answer.
    assert!(meta.0[KEY_META].as_str().is_some(), "{meta:?}");
    assert_eq!(created.status, TaskStatus::Working);
    assert!(
        created
            .status_message
            .as_deref()
            .unwrap()
            .starts_with("running"),
        "{:?}",
        created.status_message
    );
    let (status, _) = poll(&client, &created.task_id).await;
    assert_eq!(status, TaskStatus::Working, "still running");

    let result = completed(&client, &created.task_id).await;
    assert_eq!(words(&result), "export #1 of Q3");
    assert!(
        !deduplicated(&result),
        "the task's result is the call's own"
    );
    let again = completed(&client, &created.task_id).await;
    assert_eq!(words(&again), "export #1 of Q3");
    // The model calls it again: answered from the record, and said so.
    let repeat = client.call_tool(report("export_report")).await.unwrap();
    assert!(deduplicated(&repeat), "{repeat:?}");
    assert_eq!(World::count(&world.emails), 1, "exported once");
}

#[tokio::test]
async fn a_long_read_or_a_client_without_tasks_is_answered_in_its_request() {
    let world = World::default();
    let after = Some(Duration::from_millis(100));
    // A read has no record a task could be read from: it is answered.
    let tasks = connect(slow_server(&world, after), Chat::taking_tasks()).await;
    let read = tasks.call_tool(report("read_figures")).await.unwrap();
    assert_eq!(words(&read), "figures of Q3");
    // A client that did not declare tasks waits for the write.
    let plain = connect(slow_server(&world, after), Chat::without_elicitation()).await;
    let written = plain.call_tool(report("export_report")).await.unwrap();
    assert_eq!(words(&written), "export #1 of Q3");
    // Nor does a server that says never.
    let never = connect(slow_server(&world, None), Chat::taking_tasks()).await;
    let written = never.call_tool(report("export_report")).await.unwrap();
    assert_eq!(words(&written), "export #2 of Q3");
    assert_eq!(
        written.meta.as_ref().unwrap()[DEDUPLICATED_META],
        json!(false)
    );
}
