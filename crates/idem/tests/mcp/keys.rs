//! How an MCP call is keyed, through rmcp's own client in process: by the
//! `_meta` key, by run and step, by a key the client derives, by the
//! tool's natural key, or within the repeat window when there is none;
//! reads need none.

use std::sync::atomic::Ordering;

use crate::mcp_support::{
    call, charge, connect, deduplicated, error_of, server, text, with_meta, words, Ledger,
};
use idem::mcp::{
    CallToolRequestParamsExt, Unkeyed, IDEMPOTENCY_KEY_META, KEY_META, REASON_META,
    REPEAT_ARGUMENT, RUN_ID_META, STEP_META,
};
use serde_json::json;

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
        // A reason that is not text: the client meant to send one.
        json!({ IDEMPOTENCY_KEY_META: "order-17", REASON_META: 17 }),
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
