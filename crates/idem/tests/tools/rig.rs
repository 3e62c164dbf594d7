//! idem tools offered to rig (feature `rig`), called the way rig's agent
//! calls them: the run's tool context in, a tool output or a rig error out.
//! The agent loop itself, with a scripted model, is in
//! `crates/idem/tests/rig-agent/` (it needs rig-agent, which the root crate does not
//! depend on).

use crate::common::*;
use std::sync::atomic::Ordering;

use idem::approval::AllowList;
use idem::prelude::*;
use idem::rig::{CallReport, IdemRun, IdemTool};
use rig_core::tool::{DynamicTool, ToolContext, ToolErrorKind, ToolExecutionError};
use serde_json::{json, Value};

fn dispatcher(app: &App) -> Dispatcher<App> {
    dispatcher_with(app, Executor::builder(MemoryStore::new()))
}

fn dispatcher_with(app: &App, builder: idem::ExecutorBuilder<()>) -> Dispatcher<App> {
    Dispatcher::new(builder.state(app.clone()).build(), registry())
}

fn tool(d: &Dispatcher<App>, name: &str) -> DynamicTool {
    idem::rig::tool(d, name).expect("registered")
}

/// The context an application gives one agent run.
fn run(id: &str) -> ToolContext {
    let mut context = ToolContext::new();
    context.insert(IdemRun::new(id)).unwrap();
    context
}

fn email() -> Value {
    json!({"to": "ada@example.com", "subject": "Your invoice", "body": "Hello Ada."})
}

fn report(context: &ToolContext) -> CallReport {
    context.result::<CallReport>().unwrap().expect("published")
}

#[test]
fn every_registered_tool_is_offered_with_its_description_and_schema() {
    let d = dispatcher(&App::default());
    let tools = idem::rig::tools(&d);
    let names: Vec<String> = tools.iter().map(|t| t.name().to_string()).collect();
    assert_eq!(names, d.registry().names().collect::<Vec<_>>());
    for (rig_tool, idem_tool) in tools.iter().zip(d.registry().iter()) {
        let definition = rig_tool.definition();
        assert_eq!(definition.description, idem_tool.spec().description);
        assert_eq!(definition.parameters, idem_tool.input_schema());
        assert!(definition.parameters.get("$schema").is_none());
    }
    let send = tool(&d, "send_email").definition();
    assert_eq!(send.description, "Send an email to a customer.");
    assert_eq!(send.parameters["properties"]["to"]["type"], "string");
    assert!(idem::rig::tool(&d, "send_emial").is_none());
}

#[test]
fn a_typed_tool_has_the_same_definition_as_the_dynamic_one() {
    let app = App::default();
    let d = dispatcher(&app);
    let typed = IdemTool::new(d.executor().clone(), send_email);
    assert_eq!(
        rig_core::tool::tool_name::<IdemTool<send_email, App>>(),
        "send_email"
    );
    let definition = rig_core::tool::tool_definition(&typed);
    let dynamic = tool(&d, "send_email").definition();
    assert_eq!(definition.name, dynamic.name);
    assert_eq!(definition.description, dynamic.description);
    assert_eq!(definition.parameters, dynamic.parameters);
}

#[tokio::test]
async fn the_model_asking_twice_in_one_run_sends_one_email() {
    let app = App::default();
    let send = tool(&dispatcher(&app), "send_email");
    let mut context = run("run-1");

    let first = send.execute_with(&mut context, email()).await.unwrap();
    let first_report = report(&context);
    let again = send.execute_with(&mut context, email()).await.unwrap();

    assert_eq!(first.as_json(), Some(&json!({"message_id": "msg_1"})));
    assert_eq!(again.as_json(), first.as_json());
    assert!(!first_report.deduplicated && first_report.attempts == 1);
    let again_report = report(&context);
    assert!(again_report.deduplicated && again_report.attempts == 0);
    assert_eq!(again_report.key, first_report.key);
    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_key_is_the_run_step_tool_and_arguments() {
    let app = App::default();
    let d = dispatcher(&app);
    let send = tool(&d, "send_email");

    let mut step_1 = run("run-1");
    send.execute_with(&mut step_1, email()).await.unwrap();
    // The same as a dispatch from model output without a call id.
    let keyed = d
        .dispatch_one(
            idem::ToolCall {
                id: None,
                name: "send_email".into(),
                arguments: idem::dispatch::Arguments::Json(email()),
            },
            &RunContext::new("run-1", 0),
        )
        .await;
    assert!(keyed.deduplicated());
    assert_eq!(
        report(&step_1).key.as_deref(),
        keyed.meta().unwrap().key.as_ref().map(|k| k.as_str())
    );

    // Another step, another run, other arguments: other keys, other emails.
    let mut step_2 = ToolContext::new();
    step_2.insert(IdemRun::new("run-1").step(2)).unwrap();
    send.execute_with(&mut step_2, email()).await.unwrap();
    send.execute_with(&mut run("run-2"), email()).await.unwrap();
    let mut other = email();
    other["subject"] = json!("Your receipt");
    send.execute_with(&mut run("run-1"), other).await.unwrap();
    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn the_typed_tool_keys_and_deduplicates_like_the_dynamic_one() {
    use rig_core::tool::Tool as _;

    let app = App::default();
    let d = dispatcher(&app);
    let typed = IdemTool::new(d.executor().clone(), send_email);
    let mut context = run("run-1");
    typed.call(&mut context, email()).await.unwrap();
    // The dynamic tool shares the executor (and its store): same key.
    tool(&d, "send_email")
        .execute_with(&mut run("run-1"), email())
        .await
        .unwrap();
    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_write_without_a_run_is_refused_and_says_how_to_key_it() {
    let app = App::default();
    let d = dispatcher(&app);

    let error = tool(&d, "send_email")
        .execute(email())
        .await
        .expect_err("refused");
    assert_eq!(error.code(), Some("invalid_key"));
    assert_eq!(error.retryable(), Some(false));
    assert!(error.message().contains("idem::rig::IdemRun"), "{error}");
    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 0);

    // A read needs no key.
    let customer = tool(&d, "lookup_customer")
        .execute(json!({"email": "ada@example.com"}))
        .await
        .unwrap();
    assert_eq!(customer.as_json().unwrap()["plan"], "pro");
}

#[tokio::test]
async fn an_irreversible_tool_goes_through_the_approval_policy() {
    let args = json!({"account": "acme"});

    // No policy: refused, nothing ran.
    let d = dispatcher(&App::default());
    let error = tool(&d, "delete_account")
        .execute_with(&mut run("run-1"), args.clone())
        .await
        .expect_err("needs an approval");
    assert_eq!(error.kind(), ToolErrorKind::PermissionDenied);
    assert_eq!(error.code(), Some("approval_required"));
    assert_eq!(error.retryable(), Some(false));

    // Approved: runs once; the model asking again gets the record.
    let d = dispatcher_with(
        &App::default(),
        Executor::builder(MemoryStore::new()).approvals(AllowList::new(["delete_account"])),
    );
    let delete = tool(&d, "delete_account");
    let mut context = run("run-1");
    let done = delete
        .execute_with(&mut context, args.clone())
        .await
        .unwrap();
    assert_eq!(done.as_json(), Some(&json!("deleted acme")));
    delete.execute_with(&mut context, args).await.unwrap();
    assert!(report(&context).deduplicated);
    assert_eq!(d.executor().metrics().approvals_requested, 1);
}

#[tokio::test]
async fn a_failure_is_a_rig_error_with_the_model_content_and_the_retry_verdict() {
    let app = App::default();
    let d = dispatcher(&app);
    let ticket = tool(&d, "create_ticket");

    let invalid: ToolExecutionError = ticket
        .execute_with(&mut run("run-1"), json!({"title": 5, "priority": 1}))
        .await
        .expect_err("invalid");
    assert_eq!(invalid.kind(), ToolErrorKind::InvalidArgs);
    assert_eq!(invalid.code(), Some("invalid_arguments"));
    assert_eq!(invalid.retryable(), Some(false));
    // The model reads what every idem route sends it.
    let shown = invalid.model_output().as_json().expect("JSON");
    assert_eq!(shown["error"]["code"], "invalid_arguments");
    assert!(shown["error"]["message"]
        .as_str()
        .unwrap()
        .contains("nothing ran"));
    assert!(invalid.downcast_ref::<IdemError>().is_some());
    assert!(app.tickets.created.lock().unwrap().is_empty());
}
