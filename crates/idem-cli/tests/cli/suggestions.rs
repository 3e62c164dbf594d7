//! Every command idem suggests runs as written: the `idem approve` of an
//! approval-pending error (as the caller and the model read it), and the
//! `Next:` commands `idem show` ends with for a call awaiting approval, an
//! unknown outcome and a call whose owner vanished. Each is taken from the
//! text idem really printed, its upper-case words filled in mechanically
//! (NAME, TEXT, MESSAGE, JSON), and run against a store in the state the
//! text was written for: it must exit 0.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::support::tools::{
    charge_card, charge_key, delete_call, dispatcher, executor, App, Charge,
};
use crate::support::Idem;
use idem::key::Fingerprint;
use idem::prelude::*;
use idem::provider::{OpenAi, Provider};
use idem::record::CallInfoRef;
use idem::store::{ClaimOutcome, ClaimRequest};
use idem_testkit::TempDir;

/// The situations idem writes suggestions for.
#[derive(Debug, Clone, Copy)]
enum Situation {
    /// An irreversible call left pending by the approval policy.
    AwaitingApproval,
    /// A non-idempotent call that timed out: its effect is unknown.
    Unknown,
    /// A call whose owner vanished: in flight, its lease run out.
    LeaseRanOut,
}

/// A fresh store in `situation`: the store, and every text idem wrote
/// about it (errors as the caller and the model read them, `idem show`).
async fn set_up(situation: Situation) -> (TempDir, Idem, Vec<String>) {
    let (dir, url) = crate::support::sqlite();
    let app = App::default();
    let mut texts = Vec::new();
    let key = match situation {
        Situation::AwaitingApproval => {
            let dispatcher = dispatcher(&url, &app, Duration::ZERO).await;
            let result = dispatcher
                .dispatch_one(
                    delete_call("call_delete", "mallory"),
                    &RunContext::default(),
                )
                .await;
            let Err(e @ IdemError::ApprovalPending { key, .. }) = &result.result else {
                panic!("not pending: {:?}", result.result);
            };
            texts.push(e.to_string());
            let message = &OpenAi::reply(std::slice::from_ref(&result))[0];
            texts.push(message["content"].as_str().unwrap().to_owned());
            key.clone()
        }
        Situation::Unknown => {
            let exec = executor(&url, &app, Duration::ZERO).await;
            app.payments.hang_next.store(true, Ordering::SeqCst);
            let e = exec
                .call(
                    charge_card,
                    Charge {
                        customer: "ada".into(),
                        cents: 4900,
                    },
                )
                .call_id("call_charge")
                .await
                .unwrap_err();
            let IdemError::OutcomeUnknown { key, .. } = &e else {
                panic!("not unknown: {e}");
            };
            texts.push(e.to_string());
            key.clone()
        }
        Situation::LeaseRanOut => {
            let store = idem::store::connect(&url).await.unwrap();
            let key = charge_key("call_vanished");
            let claimed = store
                .claim(&ClaimRequest {
                    key: &key,
                    tool: "charge_card",
                    fingerprint: &Fingerprint::new("f".repeat(64)),
                    check_fingerprint: true,
                    lease: Duration::from_millis(20),
                    info: CallInfoRef::EMPTY,
                    worker: Some("worker-that-died:1"),
                    durable: true,
                })
                .await
                .unwrap();
            assert!(matches!(claimed, ClaimOutcome::Acquired { .. }));
            store.close().await;
            tokio::time::sleep(Duration::from_millis(60)).await;
            key
        }
    };
    let idem = Idem::new(&url);
    texts.push(idem.run(&["show", key.as_str()]).await.ok().to_owned());
    (dir, idem, texts)
}

/// The `idem …` commands in `text`: each in backticks, and each line of
/// the list that follows `Next:`.
fn suggested(text: &str) -> Vec<String> {
    let mut found: Vec<String> = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| quoted.starts_with("idem "))
        .map(str::to_owned)
        .collect();
    if let Some((_, next)) = text.split_once("\nNext:\n") {
        found.extend(
            next.lines()
                .map(str::trim)
                .take_while(|line| line.starts_with("idem "))
                .map(str::to_owned),
        );
    }
    found
}

/// `command`'s arguments after `idem`, its upper-case words filled in.
fn filled(command: &str) -> Vec<String> {
    command
        .split_whitespace()
        .skip(1)
        .map(|word| match word {
            "NAME" => "ops".to_owned(),
            "TEXT" => "checked with the provider".to_owned(),
            "MESSAGE" => "the provider has no such charge".to_owned(),
            "JSON" => "\"charged 4900 cents to ada\"".to_owned(),
            word => word.to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn every_suggested_command_runs_as_written_in_the_situation_it_was_written_for() {
    let mut ran = Vec::new();
    for (situation, expected) in [
        (Situation::AwaitingApproval, 4),
        (Situation::Unknown, 3),
        (Situation::LeaseRanOut, 3),
    ] {
        let (_dir, _, texts) = set_up(situation).await;
        let commands: Vec<String> = texts.iter().flat_map(|t| suggested(t)).collect();
        assert!(
            commands.len() >= expected,
            "{situation:?}: {} suggestions, expected {expected} in {texts:#?}",
            commands.len()
        );
        for (i, command) in commands.iter().enumerate() {
            // Each command on a store of its own: approving and denying
            // the same call are alternatives, not a sequence.
            let (_dir, idem, texts) = set_up(situation).await;
            let again: Vec<String> = texts.iter().flat_map(|t| suggested(t)).collect();
            assert_eq!(&again[i], command, "suggestions are not deterministic");
            let args = filled(command);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = idem.run(&args).await;
            assert_eq!(
                out.code, 0,
                "{situation:?}: `{command}` does not run as written: {}{}",
                out.stdout, out.stderr
            );
            ran.push(command.clone());
        }
    }
    assert!(
        ran.iter().any(|c| c.starts_with("idem approve")),
        "{ran:#?}"
    );
    assert!(ran.iter().any(|c| c.starts_with("idem deny")), "{ran:#?}");
    assert!(ran.iter().any(|c| c.contains("--release")), "{ran:#?}");
}
