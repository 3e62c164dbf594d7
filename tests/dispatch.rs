//! Model output dispatched end to end: real OpenAI- and Anthropic-shaped
//! responses in, provider-shaped tool results out; bad calls become error
//! results the model can read, and nothing runs.

mod common;

use common::*;
use idem::dispatch::{anthropic_reply, openai_messages};
use idem::prelude::*;
use serde_json::{json, Value};

fn transcript(name: &str) -> Value {
    let path = format!("{}/tests/transcripts/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn dispatcher(app: &App) -> Dispatcher<App> {
    let exec = Executor::builder(MemoryStore::new())
        .state(app.clone())
        .build();
    Dispatcher::new(exec, registry())
}

fn content(result: &Value) -> Value {
    serde_json::from_str(result["content"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn an_openai_response_is_dispatched_and_answered_in_order() {
    let app = App::default();
    let d = dispatcher(&app);
    let response = transcript("openai_chat_completion.json");

    let results = d
        .openai(&response, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    let messages = openai_messages(&results);

    assert_eq!(messages.len(), 3);
    let ids: Vec<&str> = messages
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "call_Jr8Zr5ddlEvsSWZAUMkLaSKn",
            "call_2Wn4Ut6Ezpa4mJaUQ4ye0jBz",
            "call_8pVr1FFnsqU6dxGL6kBq2Xk4"
        ]
    );
    assert!(messages.iter().all(|m| m["role"] == "tool"));
    assert_eq!(
        content(&messages[0]),
        json!({"email": "ada@example.com", "plan": "pro"})
    );
    assert_eq!(content(&messages[1]), json!({"message_id": "msg_1"}));
    assert_eq!(content(&messages[2]), json!({"number": 1}));

    // The same response delivered again (a retried request): nothing new.
    let again = d
        .openai(&response, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    assert_eq!(openai_messages(&again), messages);
    assert!(again[1].deduplicated() && again[2].deduplicated());
    assert!(!again[0].deduplicated(), "reads re-execute");
    assert_eq!(app.mail.delivered().len(), 1);
    assert_eq!(app.tickets.created.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_anthropic_message_is_dispatched_and_answered_as_tool_results() {
    let app = App::default();
    let d = dispatcher(&app);
    let message = transcript("anthropic_message.json");

    let results = d
        .anthropic(&message, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    let reply = anthropic_reply(&results);

    assert_eq!(reply["role"], "user");
    let blocks = reply["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 3);
    assert!(blocks
        .iter()
        .all(|b| b["type"] == "tool_result" && b.get("is_error").is_none()));
    assert_eq!(blocks[1]["tool_use_id"], "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
    assert_eq!(content(&blocks[1]), json!({"message_id": "msg_1"}));

    let again = d
        .anthropic(&message, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    assert_eq!(anthropic_reply(&again), reply);
    assert_eq!(app.mail.delivered().len(), 1);
}

/// Each bad call becomes an error result in the provider's shape, naming
/// the problem; none of them runs anything.
#[tokio::test]
async fn bad_calls_are_error_results_and_nothing_runs() {
    let app = App::default();
    let d = dispatcher(&app).max_argument_bytes(1024);
    let huge = "x".repeat(2000);
    let response = json!({
        "role": "assistant",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "send_email", "arguments": "{\"to\": \"ada@example.com\", "}},
            {"id": "c2", "type": "function", "function": {"name": "send_email", "arguments": "{\"to\": 42, \"subject\": \"s\", \"body\": \"b\"}"}},
            {"id": "c3", "type": "function", "function": {"name": "send_emial", "arguments": "{}"}},
            {"id": "c4", "type": "function", "function": {"name": "send_email", "arguments": format!("{{\"to\": \"{huge}\"}}")}},
            {"id": "c5", "type": "function", "function": {"name": "send_email", "arguments": "[\"ada@example.com\"]"}},
            {"id": "c6", "type": "function", "function": {"name": "send_email", "arguments": "{\"to\": \"ada@example.com\", \"subject\": \"s\"}"}}
        ]
    });
    let results = d.openai(&response, &RunContext::default()).await.unwrap();
    let errors: Vec<Value> = openai_messages(&results)
        .iter()
        .map(|m| content(m)["error"].clone())
        .collect();

    let expect = [
        ("invalid_arguments", "not valid JSON"),
        // Worded by the schema check or by deserialization, whichever runs.
        ("invalid_arguments", "string"),
        ("unknown_tool", "did you mean `send_email`?"),
        ("arguments_too_large", "the limit is 1024 bytes"),
        ("invalid_arguments", "must be a JSON object, found an array"),
        ("invalid_arguments", "body"),
    ];
    assert!(
        errors[1]["message"].as_str().unwrap().contains("to`"),
        "{}",
        errors[1]
    );
    for (error, (code, phrase)) in errors.iter().zip(expect) {
        assert_eq!(error["code"], code, "{error}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains(phrase),
            "{message:?} should contain {phrase:?}"
        );
        assert!(message.contains("nothing ran"), "{message}");
    }
    assert!(results.iter().all(|r| r.is_error()));
    assert_eq!(
        app.mail.requests.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

#[tokio::test]
async fn a_write_without_call_id_or_run_is_an_error_result() {
    let app = App::default();
    let d = dispatcher(&app);
    let message = json!({"content": [
        {"type": "tool_use", "name": "create_ticket", "input": {"title": "t", "priority": 1}}
    ]});
    let results = d.anthropic(&message, &RunContext::default()).await.unwrap();
    let block = &anthropic_reply(&results)["content"][0];
    assert_eq!(block["is_error"], true);
    assert_eq!(content(block)["error"]["code"], "invalid_key");
    assert!(app.tickets.created.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_reused_call_id_with_other_arguments_is_an_error_result() {
    let app = App::default();
    let d = dispatcher(&app);
    let call = |title: &str| {
        json!({"content": [
            {"type": "tool_use", "id": "toolu_1", "name": "create_ticket", "input": {"title": title, "priority": 1}}
        ]})
    };
    d.anthropic(&call("first"), &RunContext::default())
        .await
        .unwrap();
    let results = d
        .anthropic(&call("second"), &RunContext::default())
        .await
        .unwrap();
    assert_eq!(
        content(&results[0].to_anthropic())["error"]["code"],
        "key_reused"
    );
    assert_eq!(*app.tickets.created.lock().unwrap(), ["first"]);
}

#[tokio::test]
async fn a_message_in_the_wrong_shape_is_a_typed_error() {
    let d = dispatcher(&App::default());
    let err = d
        .openai(&json!({"tool_calls": {"id": "x"}}), &RunContext::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not an array"), "{err}");
    let err = d
        .anthropic(&json!({"role": "assistant"}), &RunContext::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no `content`"), "{err}");
}

#[test]
fn tool_definitions_export_for_every_provider_from_one_registry() {
    let registry = registry();
    let openai = registry.openai_tools();
    let send = &openai[1];
    assert_eq!(send["type"], "function");
    assert_eq!(send["function"]["name"], "send_email");
    assert_eq!(
        send["function"]["description"],
        "Send an email to a customer."
    );
    assert_eq!(send["function"]["parameters"]["type"], "object");
    assert_eq!(
        send["function"]["parameters"]["required"],
        json!(["to", "subject", "body"])
    );
    assert_eq!(
        send["function"]["parameters"]["properties"]["to"]["description"],
        "Recipient address."
    );

    let anthropic = registry.anthropic_tools();
    assert_eq!(anthropic[1]["input_schema"], send["function"]["parameters"]);

    let mcp = registry.mcp_tools();
    let hints = |i: usize| mcp[i]["annotations"].clone();
    assert_eq!(mcp[0]["name"], "lookup_customer");
    assert_eq!(
        hints(0),
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": true})
    );
    assert_eq!(hints(1)["idempotentHint"], true);
    assert_eq!(hints(1)["readOnlyHint"], false);
    assert_eq!(hints(2)["idempotentHint"], false);
    assert_eq!(hints(5)["destructiveHint"], true);
    assert_eq!(mcp[1]["inputSchema"], send["function"]["parameters"]);
}

/// What only the schema says (here `1 <= priority <= 4`) is checked before
/// the tool runs, not left to the tool.
#[cfg(feature = "schema-validation")]
#[tokio::test]
async fn arguments_that_break_a_schema_rule_are_refused_before_running() {
    let app = App::default();
    let d = dispatcher(&app);
    let message = json!({"content": [
        {"type": "tool_use", "id": "toolu_9", "name": "create_ticket",
         "input": {"title": "Invoice question", "priority": 9}}
    ]});
    let results = d.anthropic(&message, &RunContext::default()).await.unwrap();
    let error = content(&results[0].to_anthropic())["error"].clone();
    assert_eq!(error["code"], "invalid_arguments");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("JSON Schema") && message.contains("/priority"),
        "{message}"
    );
    assert!(app.tickets.created.lock().unwrap().is_empty());
    // Nothing was recorded either: a corrected call with the same id runs.
    let fixed = json!({"content": [
        {"type": "tool_use", "id": "toolu_9", "name": "create_ticket",
         "input": {"title": "Invoice question", "priority": 2}}
    ]});
    let results = d.anthropic(&fixed, &RunContext::default()).await.unwrap();
    assert!(!results[0].is_error(), "{:?}", results[0].result);
}
