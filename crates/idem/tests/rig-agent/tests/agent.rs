//! A rig agent run (rig-agent 0.44) with a scripted completion model that
//! asks for the same idem tool call twice: the tool's effect happens once.
//! rig does not pass the provider's call id to tools, so the calls are
//! keyed by the run the application names in the run's tool context.

// Helpers shared between test modules are `pub` for one another, not
// for a reader outside this binary.
#![allow(unreachable_pub)]
#[path = "../../common/mod.rs"]
mod common;

use common::*;
use std::sync::atomic::Ordering;

use idem::prelude::*;
use idem::rig::IdemRun;
use rig_agent::{Agent, AgentBuilder};
use rig_core::test_utils::{MockCompletionModel, MockTurn};
use rig_core::tool::ToolContext;
use serde_json::json;

fn email() -> serde_json::Value {
    json!({"to": "ada@example.com", "subject": "Your invoice", "body": "Hello Ada."})
}

/// The model's script: send the email, send it again "to be sure" (a new
/// call id, as a model re-asking gets), then answer.
fn model_asking_twice() -> MockCompletionModel {
    MockCompletionModel::from_turns([
        MockTurn::tool_call("call_Jr8Zr5ddlEvsSWZAUMkLaSKn", "send_email", email()),
        MockTurn::tool_call("call_2Wn4Ut6Ezpa4mJaUQ4ye0jBz", "send_email", email()),
        MockTurn::text("I sent Ada her invoice."),
    ])
}

fn agent(model: MockCompletionModel, dispatcher: &Dispatcher<App>) -> Agent {
    AgentBuilder::new(model)
        .preamble("You are a billing assistant.")
        .dynamic_tools(idem::rig::tools(dispatcher))
        .build()
}

/// The application's world, and an executor on a memory store acting on it.
fn on_memory() -> (App, Executor<App>) {
    let app = App::default();
    let executor = Executor::builder(MemoryStore::new())
        .state(app.clone())
        .build();
    (app, executor)
}

/// What the application gives each agent run.
fn run(id: &str) -> ToolContext {
    let mut context = ToolContext::new();
    context.insert(IdemRun::new(id)).unwrap();
    context
}

#[tokio::test]
async fn an_agent_asking_for_the_same_call_twice_sends_one_email() {
    let (app, executor) = on_memory();
    let dispatcher = Dispatcher::new(executor, registry());
    let model = model_asking_twice();

    let answer = agent(model.clone(), &dispatcher)
        .prompt("Email Ada her invoice.")
        .tool_context(run("run-1"))
        .max_turns(5)
        .await
        .unwrap();

    assert_eq!(answer.output(), "I sent Ada her invoice.");
    // The tool body ran once: one request to the mail provider.
    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 1);
    assert_eq!(app.mail.delivered().len(), 1);
    // The model was answered the same for both calls, and asked three
    // times (two tool turns, then the answer).
    let transcript = serde_json::to_string(&answer.messages).unwrap();
    assert_eq!(transcript.matches("msg_1").count(), 2, "{transcript}");
    assert_eq!(model.request_count(), 3);

    // The run replayed with the same run id (after a crash, from a
    // checkpoint): nothing is sent again. Another run is another intent:
    // the keys are the run's, not the arguments' alone.
    for (run_id, requests) in [("run-1", 1), ("run-2", 2)] {
        agent(model_asking_twice(), &dispatcher)
            .prompt("Email Ada her invoice.")
            .tool_context(run(run_id))
            .max_turns(5)
            .await
            .unwrap();
        assert_eq!(
            app.mail.requests.load(Ordering::SeqCst),
            requests,
            "{run_id}"
        );
    }
}

#[tokio::test]
async fn a_typed_idem_tool_in_an_agent_deduplicates_too() {
    let (app, executor) = on_memory();

    AgentBuilder::new(model_asking_twice())
        .tool(idem::rig::IdemTool::new(executor, send_email))
        .build()
        .prompt("Email Ada her invoice.")
        .tool_context(run("run-1"))
        .max_turns(5)
        .await
        .unwrap();

    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 1);
}
