//! What a person reads is what is there: text a model or a downstream
//! service wrote into a record (an error, a call id, an argument, an
//! approval message, a worker, a namespace, a tool, a step, an audit entry)
//! reaches the operator's screen with its terminal controls and
//! bidirectional overrides written as visible escapes, so it cannot clear
//! the screen, rewrite the `Arguments:` line, set the window title or
//! reverse the text around it. `--json` keeps the original strings.

use std::time::Duration;

use crate::support::tools::{charge_key, delete_account, delete_call, App};
use crate::support::Idem;
use idem::approval::{ApprovalDecision, Callback};
use idem::key::{derive_key, Fingerprint, KeyInput, KeySource, Namespace};
use idem::prelude::*;
use idem::record::{CallInfoRef, Outcome};
use idem::store::{ClaimOutcome, ClaimRequest};
use idem_testkit::store_cases::request;
use serde_json::{json, Value};

/// Clear the screen, move up, erase the line, return to its start, set the
/// window title, forge an arguments line, reverse what follows; a C1 CSI
/// and DEL for good measure.
const FORGED: &str = "ok\x1b[2J\x1b[1A\x1b[2K\r\x1b]0;approved\x07Arguments: {\"customer\":\"bob\"}\u{202e}lieve\u{9b}2J\u{7f}";

/// None of these may reach stdout or stderr raw.
const RAW: [char; 6] = ['\x1b', '\r', '\x07', '\u{202e}', '\u{9b}', '\u{7f}'];

/// What the operator sees instead, somewhere in each output.
const SHOWN: [&str; 4] = ["\\u{1b}[2J", "\\r", "\\u{1b}]0;approved\\u{7}", "\\u{202e}"];

/// An executor whose approval policy leaves calls pending with `message`,
/// working as `worker`.
async fn executor(url: &str, worker: &str, message: &'static str) -> Executor<App> {
    let store = idem::store::connect(url).await.unwrap();
    Executor::builder_shared(store)
        .state(App::default())
        .worker(worker)
        .approvals(Callback::new(move |_| async move {
            Ok(ApprovalDecision::Pending {
                message: message.to_owned(),
            })
        }))
        .approval_wait(Duration::ZERO)
        .build()
}

/// A call awaiting approval whose call id, argument, namespace, worker,
/// reason and approval message all carry [`FORGED`]; its key.
async fn forged_approval(url: &str, call_id: &str) -> String {
    let exec = executor(url, FORGED, FORGED).await;
    let dispatcher = Dispatcher::new(exec.clone(), idem::tools![delete_account]);
    let run = RunContext::default()
        .namespace(Namespace::new(FORGED).unwrap())
        .reason(FORGED);
    let result = dispatcher
        .dispatch_one(delete_call(call_id, FORGED), &run)
        .await
        .result;
    let Err(IdemError::ApprovalPending { key, .. }) = result else {
        panic!("not pending: {result:?}");
    };
    exec.store().close().await;
    key.as_str().to_owned()
}

/// A record written straight through the store by a tool named [`FORGED`],
/// with a forged run, step, arguments, reason and worker, a step of that
/// name and value, completed as unknown with a forged reason; its key.
async fn forged_unknown(url: &str) -> String {
    let store = idem::store::connect(url).await.unwrap();
    let key = derive_key(&KeyInput {
        version: 1,
        namespace: &Namespace::default(),
        tool: "forged",
        source: KeySource::Custom(FORGED),
    })
    .unwrap();
    let args = json!({ "customer": FORGED }).to_string();
    let fingerprint = Fingerprint::new("a".repeat(64));
    let req = ClaimRequest {
        key: &key,
        tool: FORGED,
        fingerprint: &fingerprint,
        check_fingerprint: true,
        lease: Duration::from_secs(60),
        info: CallInfoRef {
            namespace: Some(FORGED),
            call_id: None,
            run_id: Some(FORGED),
            step: Some(3),
            args: Some(&args),
            ttl: None,
            reason: Some(FORGED),
        },
        worker: Some(FORGED),
        durable: true,
    };
    let ClaimOutcome::Acquired { fence, .. } = store.claim(&req).await.unwrap() else {
        panic!("fresh key not acquired");
    };
    store
        .checkpoint(&key, fence, FORGED, &json!(FORGED), Duration::from_secs(60))
        .await
        .unwrap();
    let outcome = Outcome::Unknown {
        reason: FORGED.to_owned(),
    };
    store
        .complete(&key, fence, &outcome, Duration::from_secs(600))
        .await
        .unwrap();
    store.close().await;
    key.as_str().to_owned()
}

/// No raw control in `text`, and what the operator should see instead.
fn shown_escaped(what: &str, text: &str) {
    for c in RAW {
        assert!(
            !text.contains(c),
            "{what} printed {c:?} raw:\n{}",
            text.escape_debug()
        );
    }
    for escape in SHOWN {
        assert!(
            text.contains(escape),
            "{what} does not show {escape}:\n{text}"
        );
    }
}

/// Every string in `value`, depth first.
fn strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            out.push(k.clone());
            strings(v, out);
        }),
        _ => {}
    }
}

#[tokio::test]
async fn forged_record_text_is_shown_escaped_by_show_ls_and_stats_and_kept_by_json() {
    let (_dir, url) = crate::support::sqlite();
    let pending = forged_approval(&url, FORGED).await;
    let denied = forged_approval(&url, "call_to_deny").await;
    let unknown = forged_unknown(&url).await;
    let idem = Idem::new(&url);

    // A decision whose approver and reason are forged too: the audit.
    let out = idem
        .run(&["deny", &denied, "--by", FORGED, "--reason", FORGED])
        .await;
    out.ok();
    for c in RAW {
        assert!(
            !out.stdout.contains(c),
            "deny's confirmation: {:?}",
            out.stdout
        );
    }
    assert!(out.stdout.contains("\\u{202e}"), "{}", out.stdout);

    for key in [&pending, &denied, &unknown] {
        let out = idem.run(&["show", key]).await;
        shown_escaped(
            &format!("idem show {key}"),
            &format!("{}{}", out.ok(), out.stderr),
        );
        // One label per line: nothing forged starts a line of its own.
        for line in out.stdout.lines() {
            assert!(
                !line.starts_with("Arguments: {\"customer\":\"bob\"}"),
                "{line}"
            );
        }
    }
    let show = idem.run(&["show", &pending]).await.stdout;
    assert!(
        show.contains("Call:         call id ok\\u{1b}[2J"),
        "{show}"
    );
    assert!(
        show.contains("Reason:       ok\\u{1b}[2J"),
        "the reason through the Rust API: {show}"
    );
    let show = idem.run(&["show", &unknown]).await.stdout;
    assert!(show.contains("Unknown:      ok\\u{1b}[2J"), "{show}");
    assert!(
        show.contains("Reason:       ok\\u{1b}[2J"),
        "the reason through the store: {show}"
    );
    assert!(show.contains("Tool:         ok\\u{1b}[2J"), "{show}");

    let ls = idem.run(&["ls", "--limit", "0"]).await;
    shown_escaped("idem ls", &format!("{}{}", ls.ok(), ls.stderr));
    // Header and one line per record: no forged line break.
    assert_eq!(ls.stdout.lines().count(), 4, "{}", ls.stdout);
    let stats = idem.run(&["stats"]).await;
    shown_escaped("idem stats", &format!("{}{}", stats.ok(), stats.stderr));

    // Colours forced, as on a terminal: only idem's own SGR codes are
    // escape sequences.
    let forced = crate::support::run(
        &["--store", &url, "show", &pending],
        &[("CLICOLOR_FORCE", "1")],
    )
    .await
    .ok()
    .to_owned();
    assert!(forced.contains('\x1b'), "not coloured");
    assert!(
        !forced.contains("\x1b[2J") && !forced.contains("\x1b]0;"),
        "{forced:?}"
    );
    assert!(!forced.contains(['\r', '\u{202e}', '\u{9b}']), "{forced:?}");

    // JSON: valid, no raw control anywhere, the original strings back.
    let mut jsons = vec![
        idem.run(&["ls", "--limit", "0", "--json"]).await,
        idem.run(&["stats", "--json"]).await,
    ];
    for key in [&pending, &denied, &unknown] {
        jsons.push(idem.run(&["show", key, "--json"]).await);
    }
    for out in &jsons {
        assert!(
            !out.stdout.chars().any(|c| c.is_control() && c != '\n')
                && !out.stdout.contains('\u{202e}'),
            "`{}` printed a raw control: {:?}",
            out.command,
            out.stdout
        );
        let mut found = Vec::new();
        strings(&out.json(), &mut found);
        assert!(
            found.iter().any(|s| s == FORGED),
            "`{}` lost the original text: {found:?}",
            out.command
        );
    }
    let record = idem.run(&["show", &unknown, "--json"]).await.json();
    assert_eq!(record["tool"], FORGED);
    assert_eq!(record["run_id"], FORGED);
    assert_eq!(record["reason"], FORGED);
    assert_eq!(record["worker"], FORGED);
    assert_eq!(record["outcome"]["message"], FORGED);
    assert_eq!(record["arguments"]["customer"], FORGED);
    assert_eq!(record["steps"][FORGED], FORGED);
    let record = idem.run(&["show", &pending, "--json"]).await.json();
    assert_eq!(record["call_id"], FORGED);
    assert_eq!(record["namespace"], FORGED);
    assert_eq!(record["reason"], FORGED, "given through RunContext::reason");
    assert_eq!(record["approval"]["message"], FORGED);
    let record = idem.run(&["show", &denied, "--json"]).await.json();
    assert_eq!(record["audit"][0]["by"], FORGED);
    assert_eq!(record["audit"][0]["reason"], FORGED);
}

#[tokio::test]
async fn a_refusal_quoting_a_forged_worker_shows_it_escaped() {
    let (_dir, url) = crate::support::sqlite();
    // A call in flight under a live lease held by a worker named FORGED.
    let store = idem::store::connect(&url).await.unwrap();
    let key = charge_key("call_live");
    let fingerprint = Fingerprint::new("b".repeat(64));
    let claim = ClaimRequest {
        tool: "charge_card",
        lease: Duration::from_secs(600),
        worker: Some(FORGED),
        ..request(&key, &fingerprint)
    };
    assert!(matches!(
        store.claim(&claim).await.unwrap(),
        ClaimOutcome::Acquired { .. }
    ));
    store.close().await;

    let out = Idem::new(&url)
        .run(&[
            "resolve",
            key.as_str(),
            "--release",
            "--by",
            "ops",
            "--reason",
            "stuck",
        ])
        .await;
    let line = out.fails(1, "live lease").to_owned();
    shown_escaped("the live-lease refusal", &format!("{line}{}", out.stderr));
}
