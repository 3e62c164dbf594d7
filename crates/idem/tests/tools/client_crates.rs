//! Tool calls as the client crates people use hand them over: genai (its
//! serialized `ChatResponse`) and async-openai (its typed tool calls,
//! feature `async-openai`). Each gives a call the key the provider's own
//! JSON gives it, so a call seen on both routes runs once.
//!
//! The genai fixtures are real: genai 0.7.2's `Client::exec_chat` was
//! pointed at a loopback server replaying `openai_chat_completion.json` and
//! `anthropic_message.json`, and its `ChatResponse` was written with
//! `serde_json::to_string_pretty` (genai itself is not a dependency: it
//! always brings an HTTP client).

use crate::common::*;
use std::sync::atomic::Ordering;

use idem::dispatch::{Arguments, DispatchError, ToolResult};
use idem::prelude::*;
use idem::provider::{Anthropic, Genai, OpenAi, Provider};
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

/// Each result's key (`None` for reads).
fn keys(results: &[ToolResult]) -> Vec<Option<IdempotencyKey>> {
    results
        .iter()
        .map(|r| r.meta().expect("succeeded").key.clone())
        .collect()
}

/// The JSON text a result message carries, parsed.
fn parsed(text: &Value) -> Value {
    serde_json::from_str(text.as_str().unwrap()).unwrap()
}

/// A conversation first dispatched from the provider's JSON, then from
/// genai's view of the same response (a retried step, an agent moved from
/// one client to the other): the same keys, and the writes answered from
/// their records.
async fn same_keys_as_the_provider_route(provider_json: &[ToolResult], by_genai: &[ToolResult]) {
    assert_eq!(keys(by_genai), keys(provider_json));
    assert!(keys(by_genai)[1..].iter().all(Option::is_some));
    assert!(by_genai[1].deduplicated() && by_genai[2].deduplicated());
    assert!(!by_genai[0].deduplicated(), "reads re-execute");
}

#[tokio::test]
async fn a_genai_response_to_an_openai_completion_has_the_openai_keys() {
    let app = App::default();
    let d = dispatcher(&app);
    let run = RunContext::default();

    let by_openai = d
        .handle::<OpenAi>(&transcript("openai_chat_completion.json"), &run)
        .await
        .unwrap();
    let by_genai = d
        .handle::<Genai>(&transcript("genai_openai_chat_response.json"), &run)
        .await
        .unwrap();

    same_keys_as_the_provider_route(&by_openai, &by_genai).await;
    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 1);
    assert_eq!(app.tickets.created.lock().unwrap().len(), 1);

    // Answered as genai `ToolResponse`s, with the content the OpenAI
    // route sends.
    let responses = Genai::reply(&by_genai);
    let messages = OpenAi::reply(&by_openai);
    for (response, message) in responses.iter().zip(&messages) {
        assert_eq!(response["call_id"], message["tool_call_id"]);
        assert_eq!(parsed(&response["content"]), parsed(&message["content"]));
    }
    assert_eq!(responses[1]["fn_name"], "send_email");
}

#[tokio::test]
async fn a_genai_response_to_an_anthropic_message_has_the_anthropic_keys() {
    let app = App::default();
    let d = dispatcher(&app);
    let run = RunContext::default();

    let by_anthropic = d
        .handle::<Anthropic>(&transcript("anthropic_message.json"), &run)
        .await
        .unwrap();
    let by_genai = d
        .handle::<Genai>(&transcript("genai_anthropic_chat_response.json"), &run)
        .await
        .unwrap();

    same_keys_as_the_provider_route(&by_anthropic, &by_genai).await;
    let blocks = &Anthropic::reply(&by_anthropic)["content"];
    let responses = Genai::reply(&by_genai);
    assert_eq!(responses[2]["call_id"], blocks[2]["tool_use_id"]);
    assert_eq!(
        parsed(&responses[2]["content"]),
        parsed(&blocks[2]["content"])
    );
    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 1);
}

#[test]
fn genai_tool_calls_parse_in_every_form_genai_serializes() {
    let response = transcript("genai_openai_chat_response.json");
    let from_response = Genai::parse(&response).unwrap();
    assert_eq!(from_response.len(), 3);

    // `ChatResponse::tool_calls()`, serialized: the bare calls.
    let bare: Vec<Value> = response["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|part| part["ToolCall"].clone())
        .collect();
    assert_eq!(
        Genai::parse(&Value::from(bare.clone())).unwrap(),
        from_response
    );
    // One `ToolCall`.
    assert_eq!(Genai::parse(&bare[2]).unwrap(), from_response[2..]);
    // A `ChatMessage` (the assistant turn appended to the conversation).
    let message = json!({"role": "Assistant", "content": response["content"]});
    assert_eq!(Genai::parse(&message).unwrap(), from_response);

    assert_eq!(
        from_response[2].id.as_deref(),
        Some("call_8pVr1FFnsqU6dxGL6kBq2Xk4")
    );
    assert_eq!(
        from_response[2].arguments,
        Arguments::Json(json!({"title": "Invoice question", "priority": 2}))
    );
    // Arguments genai could not parse (a streamed call) stay text.
    let unparsed = json!({"call_id": "c", "fn_name": "send_email", "fn_arguments": "{\"to\":"});
    assert_eq!(
        Genai::parse(&unparsed).unwrap()[0].arguments,
        Arguments::Text("{\"to\":".into())
    );
}

/// genai's `Tool` is `{"name", "description", "schema"}` (genai 0.4 to
/// 0.7; `config` and the rest are optional): each tool's name, description
/// and input schema, as the other providers describe it.
#[test]
fn genai_tools_are_genai_tool_values_of_the_registry() {
    let registry = registry();
    let tools = registry.tools_for::<Genai>();
    let chat = registry.tools_for::<OpenAi>();
    assert_eq!(tools, Genai::tools(&registry));
    assert_eq!(tools.as_array().unwrap().len(), registry.len());
    for (tool, chat) in tools
        .as_array()
        .unwrap()
        .iter()
        .zip(chat.as_array().unwrap())
    {
        let function = &chat["function"];
        assert_eq!(
            *tool,
            json!({
                "name": function["name"],
                "description": function["description"],
                "schema": function["parameters"],
            })
        );
    }
    assert_eq!(tools[1]["name"], "send_email");
}

#[tokio::test]
async fn a_malformed_genai_item_is_a_typed_error_and_nothing_runs() {
    let app = App::default();
    let d = dispatcher(&app);
    let mut response = transcript("genai_openai_chat_response.json");
    response["content"][2]["ToolCall"]
        .as_object_mut()
        .unwrap()
        .remove("call_id");

    let err = d
        .handle::<Genai>(&response, &RunContext::default())
        .await
        .unwrap_err();
    assert!(matches!(err, DispatchError::MalformedItem { index: 2, .. }));
    assert!(
        err.to_string()
            .contains("content[2] (ToolCall) has no string `call_id`"),
        "{err}"
    );
    assert!(matches!(
        Genai::parse(&json!({"content": [42]})),
        Err(DispatchError::MalformedItem { index: 0, .. })
    ));
    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 0);
}

#[cfg(feature = "async-openai")]
mod async_openai {
    use super::*;

    use ::async_openai::types::chat::{
        ChatCompletionMessageCustomToolCall, ChatCompletionMessageToolCalls,
        CreateChatCompletionResponse, CustomTool,
    };
    use idem::dispatch::CustomToolCall;

    /// The calls of a response async-openai deserialized, converted.
    fn typed_calls(response: &CreateChatCompletionResponse) -> Vec<idem::ToolCall> {
        response.choices[0]
            .message
            .tool_calls
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(idem::ToolCall::try_from)
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[tokio::test]
    async fn async_openai_tool_calls_have_the_json_route_keys() {
        let app = App::default();
        let d = dispatcher(&app);
        let run = RunContext::default();
        let json = transcript("openai_chat_completion.json");
        // What async-openai's client returns for this provider response.
        let response: CreateChatCompletionResponse = serde_json::from_value(json.clone()).unwrap();

        let calls = typed_calls(&response);
        assert_eq!(calls, OpenAi::parse(&json).unwrap());

        let by_typed = d.dispatch(calls, &run).await;
        let by_json = d.handle::<OpenAi>(&json, &run).await.unwrap();
        assert_eq!(keys(&by_json), keys(&by_typed));
        assert!(by_json[1].deduplicated() && by_json[2].deduplicated());
        assert_eq!(app.mail.requests.load(Ordering::SeqCst), 1);
        assert_eq!(app.tickets.created.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_custom_tool_call_is_not_an_idem_call() {
        let custom = ChatCompletionMessageToolCalls::Custom(ChatCompletionMessageCustomToolCall {
            id: "call_Qm3Kd".into(),
            custom_tool: CustomTool {
                name: "apply_patch".into(),
                input: "*** Begin Patch".into(),
            },
        });
        let err = idem::ToolCall::try_from(custom).unwrap_err();
        assert_eq!(
            err,
            CustomToolCall {
                id: "call_Qm3Kd".into(),
                name: "apply_patch".into()
            }
        );
        assert!(err.to_string().contains("JSON arguments"), "{err}");
    }
}
