//! The OpenAI Responses API through the public API: a real-shaped response
//! in (`output` items: reasoning, a message, function calls), keyed by each
//! call's `call_id`, answered with `function_call_output` items; malformed
//! items refused before anything runs; tool definitions in the Responses
//! shape.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use idem::dispatch::{openai_messages, openai_responses_input, DispatchError, ToolResult};
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

/// The JSON text of a `function_call_output` item's `output`.
fn output(item: &Value) -> Value {
    serde_json::from_str(item["output"].as_str().unwrap()).unwrap()
}

/// A response whose `output` is `items`.
fn response(items: Value) -> Value {
    json!({"id": "resp_68b2f1c4a7d0", "object": "response", "status": "completed", "output": items})
}

fn send_email_call(call_id: &str) -> Value {
    json!({
        "id": "fc_68b2f1c8d5f0", "type": "function_call", "status": "completed",
        "call_id": call_id, "name": "send_email",
        "arguments": "{\"to\":\"ada@example.com\",\"subject\":\"Your invoice\",\"body\":\"Hello\"}"
    })
}

#[tokio::test]
async fn a_responses_api_response_is_dispatched_and_answered_with_function_call_outputs() {
    let app = App::default();
    let d = dispatcher(&app);
    let response = transcript("openai_responses.json");

    let results = d
        .openai_responses(&response, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    let input = openai_responses_input(&results);

    // The reasoning and message items are skipped; the calls answered in order.
    assert_eq!(input.len(), 2);
    assert!(input.iter().all(|i| i["type"] == "function_call_output"));
    let call_ids: Vec<&str> = input
        .iter()
        .map(|i| i["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        call_ids,
        [
            "call_TfX2oQk9Lw3hVb8RzN1cYd5E",
            "call_Mv7pGs4Ua0Wq6Kj2Xe9Hn3Bi"
        ]
    );
    assert_eq!(output(&input[0]), json!({"message_id": "msg_1"}));
    assert_eq!(output(&input[1]), json!({"number": 1}));
    assert_eq!(results[0].tool, "send_email");
    assert!(results.iter().all(|r| !r.is_error() && !r.deduplicated()));
    assert_eq!(
        app.mail.delivered(),
        [(
            "msg_1".to_owned(),
            "ada@example.com".to_owned(),
            "Your invoice".to_owned()
        )]
    );
    assert_eq!(*app.tickets.created.lock().unwrap(), ["Invoice question"]);

    // The same response delivered again (a retried request): the same
    // items, from the records; no second email, no second ticket.
    let again = d
        .openai_responses(&response, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    assert_eq!(openai_responses_input(&again), input);
    assert!(again.iter().all(ToolResult::deduplicated));
    assert_eq!(app.mail.delivered().len(), 1);
    assert_eq!(app.tickets.created.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_same_call_twice_runs_once_and_the_second_is_deduplicated() {
    let app = App::default();
    let d = dispatcher(&app).sequential();
    let twice = response(json!([
        send_email_call("call_Rk3nYw8Pq1Zs5Tf0Lb6Jc2Va"),
        send_email_call("call_Rk3nYw8Pq1Zs5Tf0Lb6Jc2Va")
    ]));

    let results = d
        .openai_responses(&twice, &RunContext::default())
        .await
        .unwrap();

    let (first, second) = (results[0].meta().unwrap(), results[1].meta().unwrap());
    assert!(!first.deduplicated && first.attempts == 1);
    assert!(second.deduplicated && second.attempts == 0);
    assert_eq!(first.key, second.key);
    assert_eq!(results[0].content(), results[1].content());
    assert_eq!(app.mail.delivered().len(), 1);
    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 1);
}

/// A call id is the key whichever OpenAI API carried it: a call first run
/// from a chat completion and then seen in a Responses API response (an
/// agent moved between the two) is answered from its record.
#[tokio::test]
async fn one_call_id_is_one_key_on_the_chat_completions_and_responses_routes() {
    let app = App::default();
    let d = dispatcher(&app);
    let run = RunContext::default();
    let call_id = "call_TfX2oQk9Lw3hVb8RzN1cYd5E";
    let chat = json!({"role": "assistant", "content": null, "tool_calls": [{
        "id": call_id, "type": "function",
        "function": {"name": "send_email", "arguments": "{\"to\":\"ada@example.com\",\"subject\":\"Your invoice\",\"body\":\"Hello Ada, your November invoice is attached.\"}"}
    }]});

    let by_chat = d.openai(&chat, &run).await.unwrap();
    let by_responses = d
        .openai_responses(&transcript("openai_responses.json"), &run)
        .await
        .unwrap();

    let chat_key = by_chat[0].meta().unwrap().key.clone().unwrap();
    let responses_meta = by_responses[0].meta().unwrap();
    assert_eq!(responses_meta.key.as_ref(), Some(&chat_key));
    assert!(responses_meta.deduplicated);
    assert_eq!(
        output(&openai_responses_input(&by_responses)[0]),
        serde_json::from_str::<Value>(openai_messages(&by_chat)[0]["content"].as_str().unwrap())
            .unwrap()
    );
    assert_eq!(app.mail.delivered().len(), 1);
    // The other call of the response, new, ran.
    assert!(!by_responses[1].deduplicated());
    assert_eq!(app.tickets.created.lock().unwrap().len(), 1);
}

/// A response whose shape is wrong is a typed error naming the item; none
/// of its calls runs, not even the well-formed ones before the bad item.
#[tokio::test]
async fn malformed_items_are_typed_errors_naming_the_index_and_nothing_runs() {
    let app = App::default();
    let d = dispatcher(&app);
    let good = send_email_call("call_Rk3nYw8Pq1Zs5Tf0Lb6Jc2Va");
    let reasoning = json!({"id": "rs_68b2f1c5e3a4", "type": "reasoning", "summary": []});
    let cases = [
        (
            json!({"type": "function_call", "id": "fc_1", "name": "create_ticket", "arguments": "{}"}),
            "output[2] (function_call) has no string `call_id`",
        ),
        (
            json!({"type": "function_call", "id": "fc_1", "call_id": 17, "name": "create_ticket", "arguments": "{}"}),
            "output[2] (function_call) has no string `call_id`",
        ),
        (
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_x", "arguments": "{}"}),
            "output[2] (function_call) has no string `name`",
        ),
        (
            json!({"id": "fc_1", "call_id": "call_x", "name": "create_ticket", "arguments": "{}"}),
            "output[2] has no string `type`",
        ),
        (json!("function_call"), "output[2] has no string `type`"),
    ];
    for (bad, detail) in cases {
        let err = d
            .openai_responses(
                &response(json!([reasoning, good, bad])),
                &RunContext::default(),
            )
            .await
            .unwrap_err();
        match &err {
            DispatchError::MalformedItem {
                provider, index, ..
            } => assert_eq!((*provider, *index), ("OpenAI Responses", 2)),
            other => panic!("{other:?}"),
        }
        assert!(
            err.to_string().contains(detail),
            "{err} should say {detail}"
        );
    }

    for (bad, detail) in [
        (
            json!({"object": "response", "status": "completed"}),
            "no `output`",
        ),
        (
            response(json!({"0": good})),
            "`output` is an object, not an array",
        ),
    ] {
        let err = d
            .openai_responses(&bad, &RunContext::default())
            .await
            .unwrap_err();
        assert!(matches!(err, DispatchError::Malformed { .. }), "{err:?}");
        assert!(err.to_string().contains(detail), "{err}");
    }

    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 0);
    assert!(app.tickets.created.lock().unwrap().is_empty());
}

/// A well-formed item whose call is bad (unknown tool, arguments that are
/// not JSON) is answered with an error output the model can read, with its
/// `call_id`; the rest of the response runs.
#[tokio::test]
async fn a_bad_call_is_an_error_output_the_model_can_read() {
    let app = App::default();
    let d = dispatcher(&app);
    let items = json!([
        {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "send_emial", "arguments": "{}"},
        {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "create_ticket", "arguments": "{\"title\": \"Inv"},
        send_email_call("call_c")
    ]);
    let results = d
        .openai_responses(&response(items), &RunContext::default())
        .await
        .unwrap();
    let input = openai_responses_input(&results);

    assert_eq!(input[0]["call_id"], "call_a");
    assert_eq!(output(&input[0])["error"]["code"], "unknown_tool");
    assert_eq!(input[1]["call_id"], "call_b");
    assert_eq!(output(&input[1])["error"]["code"], "invalid_arguments");
    assert_eq!(output(&input[2]), json!({"message_id": "msg_1"}));
    assert!(app.tickets.created.lock().unwrap().is_empty());
}

/// The Responses API wants flat function definitions with `strict`; the
/// transcript's `tools` (what the API echoed of the request) are exactly
/// what the registry exports.
#[test]
fn tool_definitions_export_in_the_responses_api_shape() {
    let registry = registry();
    let tools = registry.openai_responses_tools();
    let chat = registry.openai_tools();
    let tools = tools.as_array().unwrap();
    assert_eq!(tools.len(), registry.len());
    for (tool, chat) in tools.iter().zip(chat.as_array().unwrap()) {
        let function = &chat["function"];
        assert_eq!(
            *tool,
            json!({
                "type": "function",
                "name": function["name"],
                "description": function["description"],
                "parameters": function["parameters"],
                "strict": false,
            })
        );
    }
    assert_eq!(tools[1]["name"], "send_email");
    assert_eq!(
        tools[1]["parameters"]["required"],
        json!(["to", "subject", "body"])
    );

    let echoed = transcript("openai_responses.json")["tools"].clone();
    let exported: Vec<&Value> = tools
        .iter()
        .filter(|t| t["name"] == "send_email" || t["name"] == "create_ticket")
        .collect();
    assert_eq!(json!(exported), echoed);
}
