//! `idem approve KEY --edit-args JSON` through the program, on every
//! store: the edited call is a new record with its own key and the edited
//! arguments, approved; the original is denied, pointing to it (a step
//! every store keeps), and never runs: the agent's retry of it runs the
//! edited call, once; hostile arguments are refused with nothing changed.

use std::time::Duration;

use idem::prelude::*;
use serde_json::json;

use crate::support::tools::{delete_call, dispatcher, tenant};
use crate::support::{operator, unique};

crate::support::on_every_store_url![an_edit_from_the_cli_is_a_new_call_and_the_original_never_runs,];

async fn an_edit_from_the_cli_is_a_new_call_and_the_original_never_runs(url: &str) {
    let (idem, namespace, app) = operator(url);
    let agent = dispatcher(url, &app, Duration::ZERO).await;
    let call = delete_call(&unique("call"), "mallory");
    let first = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
    let Err(IdemError::ApprovalPending { key, .. }) = &first.result else {
        panic!("expected a pending approval: {:?}", first.result)
    };
    let key = key.as_str().to_owned();

    // Hostile edits: refused, nothing changed.
    let huge = format!(r#"{{"customer": "{}"}}"#, "x".repeat(70 * 1024));
    for (bad, says) in [
        ("[1]", "must be a JSON object, found an array"),
        (r#"{"customer": NaN}"#, "not valid JSON"),
        (r#"{"customer": "mallory"}"#, "approve it instead"),
        (huge.as_str(), "the limit is 65536 bytes"),
    ] {
        let args = ["approve", &key, "--by", "ada", "--edit-args", bad];
        let line = idem.run(&args).await.fails(1, says).to_owned();
        assert!(line.contains("nothing was changed"), "{line}");
    }
    let shown = idem.run(&["show", &key, "--json"]).await.json();
    assert_eq!(shown["status"], "awaiting_approval");

    // ada edits the call to delete eve's account instead, with a quote
    // and a newline in it, shown escaped.
    let edit = json!({"customer": "eve \"the\"\nsecond"}).to_string();
    let out = idem
        .run(&["approve", &key[..12], "--by", "ada", "--edit-args", &edit])
        .await;
    out.says("by ada: denied; it never runs. The edited call is ");
    out.says("approved, with exactly these arguments: it runs once, at the agent's next call of the original");
    out.says("before: {\"customer\":\"mallory\"}\n");
    out.says(r#"after:  {"customer":"eve \"the\"\nsecond"}"#);
    assert_eq!(out.stdout.lines().count(), 3, "{}", out.stdout);

    // The original: denied, pointing to the edited call, on every store.
    let original = idem.run(&["show", &key, "--json"]).await.json();
    assert_eq!(original["status"], "failed", "{original}");
    let pointer = &original["steps"]["idem:edited"];
    assert_eq!(pointer["by"], "ada", "{original}");
    let edited_key = pointer["key"].as_str().expect("the edited call's key");
    assert_ne!(edited_key, key);
    let edited = idem.run(&["show", edited_key, "--json"]).await.json();
    assert_eq!(edited["status"], "approved", "{edited}");
    assert_eq!(
        edited["arguments"],
        json!({"customer": "eve \"the\"\nsecond"})
    );
    assert_eq!(edited["approval"]["approved_by"], "ada");

    // The model's retry of the original runs the edited call, once, and
    // is told of the edit; the original never runs.
    for round in 0..2 {
        let again = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
        let called = again.result.as_ref().expect("the edited call ran");
        assert_eq!(called.output, json!("deleted eve \"the\"\nsecond"));
        assert_eq!(called.meta.deduplicated, round > 0);
        assert_eq!(
            called.meta.key.as_ref().map(|k| k.as_str()),
            Some(edited_key)
        );
        let told = called.meta.edited.as_deref().expect("told of the edit");
        assert_eq!(
            (told.by.as_str(), told.original.as_str()),
            ("ada", key.as_str())
        );
    }
    assert_eq!(app.deletions(), 1);
    let ran = idem.run(&["show", edited_key, "--json"]).await.json();
    assert_eq!(ran["status"], "succeeded", "{ran}");

    // A second edit of the original is refused.
    idem.run(&[
        "approve",
        &key,
        "--by",
        "bob",
        "--edit-args",
        r#"{"customer": "x"}"#,
    ])
    .await
    .fails(1, "is not awaiting approval");
    let log = idem.run(&["log", &key, "--json"]).await.json();
    let actions: Vec<&str> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert!(actions.contains(&"edited"), "{log}");
}
