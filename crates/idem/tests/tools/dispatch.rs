//! Model output dispatched end to end: real OpenAI chat-completions,
//! Anthropic and OpenAI Responses API responses in, provider-shaped tool
//! results out; bad calls become error results the model can read, and
//! nothing runs; numbers read as the tool's JSON Schema reads them.

use crate::common::*;
use std::sync::atomic::Ordering;

use idem::dispatch::{DispatchError, ToolResult};
use idem::prelude::*;
use idem::provider::{Anthropic, OpenAi, OpenAiResponses, Provider};
use serde_json::{json, Value};

fn transcript(name: &str) -> Value {
    let path = format!("{}/tests/transcripts/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn dispatcher(app: &App) -> Dispatcher<App> {
    dispatcher_of(app, registry())
}

/// A dispatcher to the tools of `registry`, with a fresh store.
fn dispatcher_of(app: &App, registry: idem::Registry<App>) -> Dispatcher<App> {
    let exec = Executor::builder(MemoryStore::new())
        .state(app.clone())
        .build();
    Dispatcher::new(exec, registry)
}

/// The string `name` of each of `items`.
fn field<'v>(items: &'v [Value], name: &str) -> Vec<&'v str> {
    items.iter().map(|i| i[name].as_str().unwrap()).collect()
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
        .handle::<OpenAi>(&response, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    let messages = OpenAi::reply(&results);

    assert_eq!(messages.len(), 3);
    assert_eq!(
        field(&messages, "tool_call_id"),
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
        .handle::<OpenAi>(&response, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    assert_eq!(OpenAi::reply(&again), messages);
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
        .handle::<Anthropic>(&message, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    let reply = Anthropic::reply(&results);

    assert_eq!(reply["role"], "user");
    let blocks = reply["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 3);
    assert!(blocks
        .iter()
        .all(|b| b["type"] == "tool_result" && b.get("is_error").is_none()));
    assert_eq!(blocks[1]["tool_use_id"], "toolu_01T1x1fJ34qAmk2tNTrN7Up6");
    assert_eq!(content(&blocks[1]), json!({"message_id": "msg_1"}));

    let again = d
        .handle::<Anthropic>(&message, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    assert_eq!(Anthropic::reply(&again), reply);
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
    let run = RunContext::default();
    let results = d.handle::<OpenAi>(&response, &run).await.unwrap();
    let errors: Vec<Value> = OpenAi::reply(&results)
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
    let run = RunContext::default();
    let results = d.handle::<Anthropic>(&message, &run).await.unwrap();
    let block = &Anthropic::reply(&results)["content"][0];
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
    d.handle::<Anthropic>(&call("first"), &RunContext::default())
        .await
        .unwrap();
    let results = d
        .handle::<Anthropic>(&call("second"), &RunContext::default())
        .await
        .unwrap();
    assert_eq!(
        content(&Anthropic::result(&results[0]))["error"]["code"],
        "key_reused"
    );
    assert_eq!(*app.tickets.created.lock().unwrap(), ["first"]);
}

#[tokio::test]
async fn a_message_in_the_wrong_shape_is_a_typed_error() {
    let d = dispatcher(&App::default());
    let err = d
        .handle::<OpenAi>(&json!({"tool_calls": {"id": "x"}}), &RunContext::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not an array"), "{err}");
    let err = d
        .handle::<Anthropic>(&json!({"role": "assistant"}), &RunContext::default())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no `content`"), "{err}");

    // A bad item is named by its index, and none of the calls runs.
    let err = d
        .handle::<OpenAi>(
            &json!({"tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup_customer", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"arguments": "{}"}}
            ]}),
            &RunContext::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        err,
        idem::dispatch::DispatchError::MalformedItem {
            provider: "OpenAI",
            index: 1,
            detail: "tool_calls[1].function has no string `name`".into(),
        }
    );
}

#[test]
fn tool_definitions_export_for_every_provider_from_one_registry() {
    let registry = registry();
    let openai = registry.tools_for::<OpenAi>();
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

    let anthropic = registry.tools_for::<Anthropic>();
    assert_eq!(anthropic[1]["input_schema"], send["function"]["parameters"]);

    // MCP: each tool's annotations come from its class.
    let hints = |i: usize| json!(registry.iter().nth(i).unwrap().class().annotations());
    assert_eq!(registry.names().next(), Some("lookup_customer"));
    assert_eq!(
        hints(0),
        json!({"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": true})
    );
    assert_eq!(hints(1)["idempotentHint"], true);
    assert_eq!(hints(1)["readOnlyHint"], false);
    assert_eq!(hints(2)["idempotentHint"], false);
    assert_eq!(hints(5)["destructiveHint"], true);
    #[cfg(feature = "mcp")]
    {
        let mcp = serde_json::to_value(idem::mcp::tool_definitions(&registry)).unwrap();
        assert_eq!(mcp[0]["name"], "lookup_customer");
        for i in 0..registry.len() {
            assert_eq!(mcp[i]["annotations"], hints(i));
        }
        assert_eq!(mcp[1]["inputSchema"], send["function"]["parameters"]);
    }
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
    let run = RunContext::default();
    let results = d.handle::<Anthropic>(&message, &run).await.unwrap();
    let error = content(&Anthropic::result(&results[0]))["error"].clone();
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
    let results = d.handle::<Anthropic>(&fixed, &run).await.unwrap();
    assert!(!results[0].is_error(), "{:?}", results[0].result);
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Transfer {
    /// Whole cents.
    amount_cents: u32,
    /// Any number.
    rate: f64,
}

/// Credit an amount to the ledger; answers what it credited.
#[tool(class = "idempotent_write")]
async fn transfer(
    args: Transfer,
    State(ledger): State<std::sync::Arc<Ledger>>,
) -> Result<Transfer, ToolError> {
    ledger.add(i64::from(args.amount_cents)).await;
    Ok(args)
}

fn transfer_dispatcher(app: &App) -> Dispatcher<App> {
    dispatcher_of(app, idem::tools![transfer])
}

/// One chat-completions call of `transfer` with `arguments` as sent.
fn transfer_call(id: &str, arguments: &str) -> Value {
    json!({"tool_calls": [
        {"id": id, "type": "function", "function": {"name": "transfer", "arguments": arguments}}
    ]})
}

/// JSON Schema counts `1000.0` and `1e3` as integers; so does the
/// dispatcher: the tool runs, with the key and recorded result of `1000`.
#[tokio::test]
async fn an_integral_float_is_an_integer_with_the_same_key_and_result() {
    let mut answers = Vec::new();
    for amount in ["1000", "1000.0", "1e3", "10E2"] {
        let app = App::default();
        let arguments = format!(r#"{{"amount_cents": {amount}, "rate": 2.5}}"#);
        let results = transfer_dispatcher(&app)
            .handle::<OpenAi>(
                &transfer_call("call_q7Zt", &arguments),
                &RunContext::default(),
            )
            .await
            .unwrap();
        let meta = results[0]
            .meta()
            .unwrap_or_else(|| panic!("{amount}: {:?}", results[0].result));
        assert_eq!(app.ledger.balance(), 1000, "{amount}: the tool ran once");
        answers.push((meta.key.clone().unwrap(), results[0].content()));
    }
    assert_eq!(
        answers[0].1,
        json!({"amount_cents": 1000, "rate": 2.5}),
        "the float field keeps 2.5"
    );
    assert!(answers.iter().all(|a| *a == answers[0]), "{answers:?}");

    // In one store: `1000.0` after `1000` under the same call id is the same
    // call (same fingerprint, no key reuse), answered from the record; an
    // Anthropic `input` holding the float itself too.
    let app = App::default();
    let d = transfer_dispatcher(&app);
    let run = RunContext::default();
    let mut answers = Vec::new();
    for amount in ["1000", "1000.0"] {
        let arguments = format!(r#"{{"amount_cents": {amount}, "rate": 2.5}}"#);
        let call = transfer_call("call_q7Zt", &arguments);
        answers.extend(d.handle::<OpenAi>(&call, &run).await.unwrap());
    }
    let anthropic = json!({"content": [{"type": "tool_use", "id": "call_q7Zt", "name": "transfer",
                                        "input": {"amount_cents": 1e3, "rate": 2.5}}]});
    answers.extend(d.handle::<Anthropic>(&anthropic, &run).await.unwrap());
    let (first, duplicates) = answers.split_first().unwrap();
    for duplicate in duplicates {
        assert!(duplicate.deduplicated(), "{:?}", duplicate.result);
        assert_eq!(duplicate.content(), first.content());
        assert_eq!(duplicate.meta().unwrap().key, first.meta().unwrap().key);
    }
    assert_eq!(app.ledger.balance(), 1000);
}

#[tokio::test]
async fn a_fractional_number_for_an_integer_field_is_refused() {
    let app = App::default();
    let results = transfer_dispatcher(&app)
        .handle::<OpenAi>(
            &transfer_call("call_q7Zt", r#"{"amount_cents": 1000.5, "rate": 2.5}"#),
            &RunContext::default(),
        )
        .await
        .unwrap();
    let error = results[0].content()["error"].clone();
    assert_eq!(error["code"], "invalid_arguments", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("amount_cents") && message.contains("nothing ran"),
        "{message}"
    );
    assert_eq!(app.ledger.balance(), 0);
}

/// A float field takes what it is sent: `2.5` stays `2.5`, and `2.0` (now
/// read as the integer 2) is still the float 2.0 to the tool.
#[tokio::test]
async fn a_float_field_keeps_its_value() {
    let app = App::default();
    let d = transfer_dispatcher(&app);
    let results = d
        .handle::<OpenAi>(
            &json!({"tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "transfer",
                 "arguments": "{\"amount_cents\": 1, \"rate\": 2.5}"}},
                {"id": "call_b", "type": "function", "function": {"name": "transfer",
                 "arguments": "{\"amount_cents\": 1, \"rate\": 2.0}"}}
            ]}),
            &RunContext::default(),
        )
        .await
        .unwrap();
    assert_eq!(results[0].content()["rate"].as_f64(), Some(2.5));
    assert_eq!(results[1].content()["rate"].as_f64(), Some(2.0));
    assert_eq!(app.ledger.balance(), 2);
}

// The OpenAI Responses API.

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
        .handle::<OpenAiResponses>(&response, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    let input = OpenAiResponses::reply(&results);

    // The reasoning and message items are skipped; the calls answered in order.
    assert_eq!(input.len(), 2);
    assert!(input.iter().all(|i| i["type"] == "function_call_output"));
    assert_eq!(
        field(&input, "call_id"),
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
        .handle::<OpenAiResponses>(&response, &RunContext::new("run-1", 1))
        .await
        .unwrap();
    assert_eq!(OpenAiResponses::reply(&again), input);
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
        .handle::<OpenAiResponses>(&twice, &RunContext::default())
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

    let by_chat = d.handle::<OpenAi>(&chat, &run).await.unwrap();
    let by_responses = d
        .handle::<OpenAiResponses>(&transcript("openai_responses.json"), &run)
        .await
        .unwrap();

    let chat_key = by_chat[0].meta().unwrap().key.clone().unwrap();
    let responses_meta = by_responses[0].meta().unwrap();
    assert_eq!(responses_meta.key.as_ref(), Some(&chat_key));
    assert!(responses_meta.deduplicated);
    assert_eq!(
        output(&OpenAiResponses::reply(&by_responses)[0]),
        serde_json::from_str::<Value>(OpenAi::reply(&by_chat)[0]["content"].as_str().unwrap())
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
            .handle::<OpenAiResponses>(
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
            .handle::<OpenAiResponses>(&bad, &RunContext::default())
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
        .handle::<OpenAiResponses>(&response(items), &RunContext::default())
        .await
        .unwrap();
    let input = OpenAiResponses::reply(&results);

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
    let tools = registry.tools_for::<OpenAiResponses>();
    let chat = registry.tools_for::<OpenAi>();
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
