//! The `idem` program end to end, on every store: real tool calls made by
//! an executor in this process, and the real binary settling them from the
//! command line — as an operator would, in another process.
//!
//! Each scenario is written once against a store URL and runs on a SQLite
//! file, and on the Redis and PostgreSQL servers of `idem_testkit::servers`
//! (skipped loudly when their binaries are missing; a failure under
//! `IDEM_REQUIRE_SERVERS=1`). The Redis and PostgreSQL stores are shared by
//! the scenarios, so each works in a namespace of its own.

mod support;

use std::time::Duration;

use idem::approval::Approval;
use idem::key::{derive_key, IdempotencyKey, KeyInput, KeySource};
use idem::prelude::*;
use idem::record::CallInfoRef;
use idem::store::ClaimRequest;
use serde_json::{json, Value};

use support::tools::{
    charge_card, delete_account, delete_call, dispatcher, executor, ns, save_card, tenant, App,
    Charge, Charged, DeleteAccount, SaveCard, ASK,
};
use support::{claim_directly, listed, schema, unique, Idem};

/// How long a waiting caller waits for a person.
const PATIENCE: Duration = Duration::from_secs(30);

idem_testkit::on_every_store! {
    stores: [sqlite, redis, postgres],
    run: |scenario, store| scenario(store.url()).await,
    tests: [
        a_timed_out_charge_is_listed_as_unknown_resolved_and_the_duplicate_gets_the_resolution,
        unknown_outcomes_resolved_as_failed_or_released,
        a_pending_approval_approved_from_the_cli_runs_the_tool_exactly_once,
        callers_waiting_for_approval_run_the_tool_once_when_approved_from_the_cli,
        a_denial_from_the_cli_reaches_the_waiting_caller_and_every_later_duplicate,
        json_output_matches_the_documented_schema,
        bad_input_is_one_line_a_nonzero_exit_and_changes_nothing,
        an_unknown_outcome_says_it_never_expires_and_a_resolution_keeps_the_ttl_asked_for,
        idem_log_shows_a_release_and_a_delete_after_their_records_are_gone,
    ],
}

/// `idem log` keeps what `resolve --release` and `delete` did (who, when,
/// why, state before and after) after the records are gone, by full key
/// or prefix, as a table and as the documented JSON.
async fn idem_log_shows_a_release_and_a_delete_after_their_records_are_gone(url: &str) {
    let idem = Idem::new(url);
    let namespace = unique("tenant");
    let app = App::default();
    let exec = executor(url, &app, Duration::ZERO).await;
    let call_id = timed_out_charge(&exec, &app, &namespace).await;
    let key = key_from_transcript("charge_card", &call_id, &namespace).await;
    idem.run(&[
        "resolve",
        &key,
        "--release",
        "--by",
        "ada",
        "--reason",
        "the bank never saw it",
    ])
    .await
    .ok();
    idem.run(&["show", &key]).await.fails(3, "no record");

    let log = idem.run(&["log", &key[..10], "--json"]).await.json();
    schema::check(&log, "log");
    assert_eq!(log["total"], 1, "{log}");
    let event = &log["events"][0];
    assert_eq!(event["action"], "released");
    assert_eq!(event["by"], "ada");
    assert_eq!(event["reason"], "the bank never saw it");
    assert_eq!(event["before"], "unknown");
    assert!(event["after"].is_null());
    assert_eq!(event["tool"], "charge_card");
    assert_eq!(event["namespace"], namespace.as_str());

    // The retry runs again (the release allowed it) and is deleted.
    exec.call(charge_card, ada())
        .call_id(&call_id)
        .namespace(ns(&namespace))
        .await
        .unwrap();
    idem.run(&["delete", &key, "--by", "bo", "--reason", "test charge"])
        .await
        .ok();
    let table = idem.run(&["log", &key, "--since", "1h"]).await;
    let table = table.ok();
    assert!(table.starts_with("AT "), "{table}");
    assert!(
        table.contains("released") && table.contains("unknown → deleted"),
        "{table}"
    );
    assert!(
        table.contains("deleted") && table.contains("succeeded → deleted") && table.contains("bo"),
        "{table}"
    );
    let none = idem
        .run(&["log", &key, "--since", "2099-01-01T00:00:00Z", "--json"])
        .await
        .json();
    assert_eq!(none["total"], 0);
    idem.run(&["log", "xyz"]).await.fails(2, "not a key");
}

/// An unknown outcome is shown as kept until a person settles it, counted
/// by age in `idem stats`, and `idem resolve --ttl` keeps the resolution as
/// long as asked (a malformed TTL changes nothing).
async fn an_unknown_outcome_says_it_never_expires_and_a_resolution_keeps_the_ttl_asked_for(
    url: &str,
) {
    let idem = Idem::new(url);
    let namespace = unique("tenant");
    let app = App::default();
    let exec = executor(url, &app, Duration::ZERO).await;
    let call_id = timed_out_charge(&exec, &app, &namespace).await;
    let key = key_from_transcript("charge_card", &call_id, &namespace).await;

    let shown = idem.run(&["show", &key[..12]]).await;
    let shown = shown.ok();
    assert!(
        shown.contains("until a person settles it") && shown.contains("never expires"),
        "{shown}"
    );
    assert!(!shown.contains("Expires"), "{shown}");
    let listed = idem
        .run(&["ls", "--state", "unknown", "--namespace", &namespace])
        .await;
    assert!(
        listed.ok().contains("waiting for a person for"),
        "{}",
        listed.stdout
    );
    let stats = idem.run(&["stats", "--json"]).await.json();
    schema::check(&stats, "stats");
    assert!(
        stats["unknown_by_age"]["under_1h"].as_u64().unwrap() >= 1,
        "{stats}"
    );
    assert!(stats["unknown_by_age"]["oldest"].is_string(), "{stats}");

    let refused = idem
        .run(&[
            "resolve",
            &key[..12],
            "--failed",
            "not charged",
            "--ttl",
            "soon",
            "--by",
            "ada",
            "--reason",
            "checked",
        ])
        .await;
    refused.fails(2, "--ttl takes a duration");
    let resolved = idem
        .run(&[
            "resolve",
            &key[..12],
            "--failed",
            "not charged",
            "--ttl",
            "2h",
            "--by",
            "ada",
            "--reason",
            "the dashboard shows no charge",
            "--json",
        ])
        .await
        .json();
    assert_eq!(resolved["status"], "failed");
    let at = |field: &str| idem_cli_time(resolved[field].as_str().unwrap());
    let kept = at("expires_at") - at("completed_at");
    assert!((7_190_000..=7_210_000).contains(&kept), "kept {kept} ms");
}

/// Milliseconds since the epoch of an RFC 3339 time as the program prints
/// it (`2026-05-01T09:00:00.000Z`).
fn idem_cli_time(text: &str) -> i64 {
    let (date, time) = text.trim_end_matches('Z').split_once('T').unwrap();
    let d: Vec<i64> = date.split('-').map(|p| p.parse().unwrap()).collect();
    let (hms, milli) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms.split(':').map(|p| p.parse().unwrap()).collect();
    // Days from civil (Howard Hinnant's algorithm).
    let (y, m) = if d[1] <= 2 {
        (d[0] - 1, d[1] + 9)
    } else {
        (d[0], d[1] - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d[2] - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 24 + t[0]) * 60 + t[1]) * 60_000 + t[2] * 1000 + milli.parse::<i64>().unwrap()
}

fn ada() -> Charge {
    Charge {
        customer: "ada".into(),
        cents: 4900,
    }
}

/// A charge that is made but whose response never arrives: recorded as
/// unknown. Returns the call id.
async fn timed_out_charge(exec: &Executor<App>, app: &App, namespace: &str) -> String {
    let call_id = unique("call");
    app.payments
        .hang_next
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let err = exec
        .call(charge_card, ada())
        .call_id(&call_id)
        .namespace(ns(namespace))
        .await
        .unwrap_err();
    assert!(
        matches!(err, IdemError::OutcomeUnknown { .. }),
        "a timed-out non-idempotent write is unknown, not {err}"
    );
    call_id
}

/// The key of `tool`'s call `call_id` in `namespace`, as `idem key` derives
/// it from a transcript.
async fn key_from_transcript(tool: &str, call_id: &str, namespace: &str) -> String {
    let out = support::run(
        &[
            "key",
            "--tool",
            tool,
            "--call-id",
            call_id,
            "--namespace",
            namespace,
        ],
        &[],
    )
    .await;
    out.ok().trim().to_owned()
}

async fn a_timed_out_charge_is_listed_as_unknown_resolved_and_the_duplicate_gets_the_resolution(
    url: &str,
) {
    let idem = Idem::new(url);
    let namespace = unique("tenant");
    let app = App::default();
    let exec = executor(url, &app, Duration::ZERO).await;

    let call_id = timed_out_charge(&exec, &app, &namespace).await;
    assert_eq!(app.charges(), 1);

    // The operator finds it: by state, and from the transcript's call id.
    let key = key_from_transcript("charge_card", &call_id, &namespace).await;
    let page = idem
        .run(&[
            "ls",
            "--state",
            "unknown",
            "--namespace",
            &namespace,
            "--json",
        ])
        .await
        .json();
    assert_eq!(page["total"], 1);
    let record = &page["records"][0];
    assert_eq!(record["key"], key.as_str());
    assert_eq!(record["status"], "unknown");
    assert_eq!(record["tool"], "charge_card");
    assert_eq!(record["call_id"], call_id.as_str());
    assert_eq!(record["worker"], "test-worker:1");
    assert_eq!(
        record["arguments"],
        json!({"customer": "ada", "cents": 4900})
    );
    assert!(record["outcome"]["message"]
        .as_str()
        .unwrap()
        .contains("timed out"));
    let table = idem
        .run(&["ls", "--state", "unknown", "--namespace", &namespace])
        .await;
    let table = table.ok();
    assert!(table.starts_with("KEY "), "{table}");
    assert!(
        table.contains(&key[..12]) && table.contains("unknown") && table.contains("charge_card"),
        "{table}"
    );

    // It is settled from the command line, by a key prefix.
    let out = idem
        .run(&[
            "resolve",
            &key[..12],
            "--succeeded",
            r#"{"charge_id": "ch_from_the_dashboard"}"#,
            "--by",
            "ada",
            "--reason",
            "the payment dashboard shows the charge",
        ])
        .await;
    assert!(out.ok().starts_with("resolved "), "{}", out.stdout);

    // The model's retry gets the resolved output; the card is not charged
    // again.
    let again = exec
        .call(charge_card, ada())
        .call_id(&call_id)
        .namespace(ns(&namespace))
        .await
        .unwrap();
    assert!(again.meta.deduplicated);
    assert_eq!(
        again.output,
        Charged {
            charge_id: "ch_from_the_dashboard".into()
        }
    );
    assert_eq!(app.charges(), 1);

    // The record says who settled it and why.
    let shown = idem.run(&["show", &key, "--json"]).await.json();
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["audit"][0]["by"], "ada");
    assert_eq!(shown["audit"][0]["action"], "resolved_succeeded");
    assert_eq!(
        shown["audit"][0]["reason"],
        "the payment dashboard shows the charge"
    );
    let described = idem.run(&["show", &key[..8]]).await;
    let described = described.ok();
    assert!(
        described.contains("resolved_succeeded by ada: the payment dashboard shows the charge"),
        "{described}"
    );
}

async fn unknown_outcomes_resolved_as_failed_or_released(url: &str) {
    let idem = Idem::new(url);
    let namespace = unique("tenant");
    let app = App::default();
    let exec = executor(url, &app, Duration::ZERO).await;

    // Resolved as failed: the retry gets the failure and nothing runs.
    let failed = timed_out_charge(&exec, &app, &namespace).await;
    let key = key_from_transcript("charge_card", &failed, &namespace).await;
    idem.run(&[
        "resolve",
        &key,
        "--failed",
        "card declined (seen at the bank)",
        "--by",
        "ada",
        "--reason",
        "bank statement",
    ])
    .await
    .ok();
    let err = exec
        .call(charge_card, ada())
        .call_id(&failed)
        .namespace(ns(&namespace))
        .await
        .unwrap_err();
    assert!(err.is_deduplicated(), "{err}");
    assert!(
        err.to_string().contains("card declined (seen at the bank)"),
        "{err}"
    );
    assert_eq!(app.charges(), 1);

    // Released: the record is gone and the retry charges the card.
    let released = timed_out_charge(&exec, &app, &namespace).await;
    let key = key_from_transcript("charge_card", &released, &namespace).await;
    let out = idem
        .run(&[
            "resolve",
            &key[..10],
            "--release",
            "--by",
            "ada",
            "--reason",
            "the bank never saw it",
        ])
        .await;
    assert!(out.ok().starts_with("released "), "{}", out.stdout);
    idem.run(&["show", &key]).await.fails(3, "no record");
    let again = exec
        .call(charge_card, ada())
        .call_id(&released)
        .namespace(ns(&namespace))
        .await
        .unwrap();
    assert!(!again.meta.deduplicated);
    assert_eq!(app.charges(), 3);

    // A call whose owner vanished (its lease ran out, nobody took it over)
    // is settled the same way.
    let vanished = unique("call");
    let key = claim_directly(
        url,
        &namespace,
        &vanished,
        Some("{}"),
        Duration::from_millis(200),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shown = idem.run(&["show", key.as_str(), "--json"]).await.json();
    assert_eq!(shown["status"], "in_flight");
    assert_eq!(shown["lease"]["expired"], true);
    let described = idem.run(&["show", key.as_str()]).await;
    assert!(
        described.ok().contains("the owner vanished"),
        "{}",
        described.stdout
    );
    let resolved = idem
        .run(&[
            "resolve",
            key.as_str(),
            "--failed",
            "the worker died before charging",
            "--by",
            "ada",
            "--reason",
            "no charge at the bank",
            "--json",
        ])
        .await
        .json();
    assert_eq!(resolved["status"], "failed");
    assert_eq!(resolved["outcome"]["code"], "permanent");
    assert_eq!(resolved["audit"][0]["action"], "resolved_failed");
}

async fn a_pending_approval_approved_from_the_cli_runs_the_tool_exactly_once(url: &str) {
    let idem = Idem::new(url);
    let namespace = unique("tenant");
    let app = App::default();
    let agent = dispatcher(url, &app, Duration::ZERO).await;
    let call = delete_call(&unique("call"), "mallory");

    // The policy leaves the call to a person: the model is told it waits.
    let first = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
    let Err(IdemError::ApprovalPending { key, message, .. }) = &first.result else {
        panic!("expected a pending approval: {:?}", first.result)
    };
    assert_eq!(message, ASK);
    let key = key.as_str().to_owned();
    assert_eq!(app.deletions(), 0);

    let page = idem
        .run(&[
            "ls",
            "--state",
            "awaiting-approval",
            "--namespace",
            &namespace,
            "--json",
        ])
        .await
        .json();
    assert_eq!(page["total"], 1);
    assert_eq!(page["records"][0]["key"], key.as_str());
    assert_eq!(page["records"][0]["approval"]["message"], ASK);
    assert_eq!(page["records"][0]["approval"]["approved_by"], Value::Null);
    assert_eq!(
        page["records"][0]["arguments"],
        json!({"customer": "mallory"})
    );

    // Asking again before anyone decided: still waiting, nothing ran.
    let again = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
    assert!(
        matches!(again.result, Err(IdemError::ApprovalPending { .. })),
        "{:?}",
        again.result
    );

    let out = idem
        .run(&[
            "approve",
            &key[..12],
            "--by",
            "ada",
            "--note",
            "ticket OPS-7",
        ])
        .await;
    assert!(out.ok().starts_with("approved "), "{}", out.stdout);
    assert_eq!(app.deletions(), 0, "approving runs nothing by itself");

    // A second decision is refused and changes nothing.
    idem.run(&["approve", &key, "--by", "bob"])
        .await
        .fails(1, "already approved (by ada)");
    idem.run(&["deny", &key, "--by", "bob", "--reason", "no"])
        .await
        .fails(1, "already approved");
    idem.run(&["resolve", &key, "--release", "--by", "bob", "--reason", "r"])
        .await
        .fails(1, "approve or deny it instead");
    let shown = idem.run(&["show", &key, "--json"]).await.json();
    assert_eq!(shown["status"], "approved");
    assert_eq!(shown["approval"]["approved_by"], "ada");
    assert_eq!(shown["approval"]["note"], "ticket OPS-7");

    // The agent calls again: the tool runs, once.
    let ran = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
    let output = ran.result.as_ref().expect("runs once approved");
    assert!(!output.meta.deduplicated);
    assert_eq!(output.output, json!("deleted mallory"));
    let dup = agent.dispatch_one(call, &tenant(&namespace)).await;
    assert!(dup.deduplicated(), "{:?}", dup.result);
    assert_eq!(app.deletions(), 1);

    let shown = idem.run(&["show", &key, "--json"]).await.json();
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["approval"]["approved_by"], "ada");
    assert_eq!(shown["audit"][0]["action"], "approved");
    assert_eq!(shown["audit"][0]["reason"], "ticket OPS-7");
}

async fn callers_waiting_for_approval_run_the_tool_once_when_approved_from_the_cli(url: &str) {
    let idem = Idem::new(url);
    let namespace = unique("tenant");
    let app = App::default();
    let call_id = unique("call");

    // An agent whose calls wait for a person's decision.
    let waiting = dispatcher(url, &app, PATIENCE).await;
    let call = delete_call(&call_id, "eve");
    let context = tenant(&namespace);
    let agent = tokio::spawn(async move { waiting.dispatch_one(call, &context).await });
    let key = listed(&idem, &namespace, "awaiting_approval").await;

    // A typed caller of the same call joins, and waits too.
    let exec = executor(url, &app, Duration::ZERO).await;
    let typed_ns = ns(&namespace);
    let typed_id = call_id.clone();
    let typed = tokio::spawn(async move {
        exec.call_approved(
            delete_account,
            DeleteAccount {
                customer: "eve".into(),
            },
            Approval::granted_by("the agent itself"),
        )
        .call_id(typed_id)
        .namespace(typed_ns)
        .wait_for_approval(PATIENCE)
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!agent.is_finished() && !typed.is_finished());
    assert_eq!(app.deletions(), 0, "nothing runs before a person decides");

    idem.run(&["approve", &key, "--by", "ada"]).await.ok();

    let agent = agent.await.unwrap();
    let typed = typed.await.unwrap();
    let agent = agent.result.expect("the waiting agent's call runs");
    let typed = typed.expect("the waiting typed call gets the output");
    assert_eq!(agent.output, json!("deleted eve"));
    assert_eq!(typed.output, "deleted eve");
    assert_eq!(
        [agent.meta.deduplicated, typed.meta.deduplicated]
            .iter()
            .filter(|d| !**d)
            .count(),
        1,
        "exactly one of them ran the tool"
    );
    assert_eq!(app.deletions(), 1);
    let shown = idem.run(&["show", &key, "--json"]).await.json();
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["approval"]["approved_by"], "ada");
}

async fn a_denial_from_the_cli_reaches_the_waiting_caller_and_every_later_duplicate(url: &str) {
    let idem = Idem::new(url);
    let namespace = unique("tenant");
    let app = App::default();
    let call_id = unique("call");
    let reason = "accounts are closed by support, not by agents";

    let waiting = dispatcher(url, &app, PATIENCE).await;
    let call = delete_call(&call_id, "eve");
    let context = tenant(&namespace);
    let agent = tokio::spawn(async move { waiting.dispatch_one(call, &context).await });
    let key = listed(&idem, &namespace, "awaiting_approval").await;

    let out = idem
        .run(&["deny", &key[..12], "--by", "ada", "--reason", reason])
        .await;
    assert!(out.ok().starts_with("denied "), "{}", out.stdout);

    let answer = agent.await.unwrap();
    match &answer.result {
        Err(IdemError::ApprovalDenied { reason: got, .. }) => assert_eq!(got, reason),
        other => panic!("the waiting caller should get the denial: {other:?}"),
    }
    assert!(answer.content()["error"]["message"]
        .as_str()
        .unwrap()
        .contains(reason));

    // Every later duplicate gets the reason, dispatched or typed.
    let agent = dispatcher(url, &app, Duration::ZERO).await;
    let dup = agent
        .dispatch_one(delete_call(&call_id, "eve"), &tenant(&namespace))
        .await;
    assert!(dup.deduplicated());
    assert!(matches!(&dup.result, Err(IdemError::ApprovalDenied { reason: r, .. }) if r == reason));
    let exec = executor(url, &app, Duration::ZERO).await;
    let typed = exec
        .call_approved(
            delete_account,
            DeleteAccount {
                customer: "eve".into(),
            },
            Approval::granted_by("the agent itself"),
        )
        .call_id(&call_id)
        .namespace(ns(&namespace))
        .await
        .unwrap_err();
    assert!(
        matches!(&typed, IdemError::ApprovalDenied { reason: r, deduplicated: true, .. } if r == reason),
        "{typed}"
    );
    assert_eq!(app.deletions(), 0);

    // Decided is decided.
    idem.run(&["approve", &key, "--by", "bob"])
        .await
        .fails(1, "not awaiting approval (it is failed)");
    idem.run(&["deny", &key, "--by", "bob", "--reason", "again"])
        .await
        .fails(1, "not awaiting approval");
    idem.run(&[
        "resolve",
        &key,
        "--succeeded",
        "{}",
        "--by",
        "bob",
        "--reason",
        "r",
    ])
    .await
    .fails(1, "already failed");

    let shown = idem.run(&["show", &key, "--json"]).await.json();
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["outcome"]["code"], "approval_denied");
    assert_eq!(shown["outcome"]["message"], reason);
    assert_eq!(shown["audit"][0]["action"], "denied");
    assert_eq!(shown["audit"][0]["by"], "ada");
}

async fn json_output_matches_the_documented_schema(url: &str) {
    let idem = Idem::new(url);
    let namespace = unique("tenant");
    let app = App::default();
    let exec = executor(url, &app, Duration::ZERO).await;
    let agent = dispatcher(url, &app, Duration::ZERO).await;

    // A record in every state.
    exec.call(charge_card, ada())
        .call_id(unique("call"))
        .namespace(ns(&namespace))
        .await
        .unwrap();
    let unknown = timed_out_charge(&exec, &app, &namespace).await;
    let resolved = timed_out_charge(&exec, &app, &namespace).await;
    let resolved = key_from_transcript("charge_card", &resolved, &namespace).await;
    idem.run(&[
        "resolve", &resolved, "--failed", "declined", "--by", "ada", "--reason", "bank",
    ])
    .await
    .ok();
    let pending = delete_call(&unique("call"), "mallory");
    agent.dispatch_one(pending, &tenant(&namespace)).await;
    let approved = delete_call(&unique("call"), "trent");
    let Err(IdemError::ApprovalPending { key: approved, .. }) = agent
        .dispatch_one(approved, &tenant(&namespace))
        .await
        .result
    else {
        panic!("pending")
    };
    let out = idem
        .run(&[
            "approve",
            approved.as_str(),
            "--by",
            "ada",
            "--note",
            "ok",
            "--json",
        ])
        .await;
    let approved_json = out.json();
    schema::check(&approved_json, "record");
    assert_eq!(approved_json["status"], "approved");
    claim_directly(
        url,
        &namespace,
        &unique("call"),
        Some(r#"{"cents":1,"customer":"bob"}"#),
        Duration::from_secs(300),
    )
    .await;
    // A tool that keeps its arguments out of the store: only their
    // fingerprint identifies them.
    let card = SaveCard {
        customer: "ada".into(),
        number: "4242424242424242".into(),
    };
    let saved = exec
        .call(save_card, card.clone())
        .call_id(unique("call"))
        .namespace(ns(&namespace))
        .await
        .unwrap();
    let secret = saved.meta.key.unwrap();
    let fingerprint = idem::key::CanonicalArgs::from_serialize(&card)
        .unwrap()
        .fingerprint;

    let page = idem
        .run(&["ls", "--namespace", &namespace, "--json"])
        .await
        .json();
    schema::check(&page, "ls");
    let statuses: std::collections::BTreeSet<&str> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        [
            "approved",
            "awaiting_approval",
            "failed",
            "in_flight",
            "succeeded",
            "unknown"
        ],
        "a record in every state"
    );
    assert_eq!(page["total"], 7);
    let times: Vec<&str> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["created_at"].as_str().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {times:?}"
    );
    for record in page["records"].as_array().unwrap() {
        let key = record["key"].as_str().unwrap();
        let shown = idem.run(&["show", key, "--json"]).await.json();
        schema::check(&shown, "record");
        assert_eq!(&shown, record, "show and ls describe a record alike");
    }
    let in_flight = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["status"] == "in_flight")
        .unwrap();
    assert_eq!(in_flight["lease"]["expired"], false);
    assert_eq!(in_flight["worker"], "worker-elsewhere:9");
    let secret_json = idem.run(&["show", secret.as_str(), "--json"]).await.json();
    assert_eq!(secret_json["arguments"], Value::Null);
    assert_eq!(secret_json["fingerprint"], fingerprint.as_str());
    let secret_text = idem.run(&["show", secret.as_str()]).await;
    assert!(
        !secret_text.stdout.contains("4242"),
        "{}",
        secret_text.stdout
    );
    assert!(
        secret_text
            .ok()
            .contains(&format!("not stored; fingerprint {fingerprint}")),
        "{}",
        secret_text.stdout
    );

    // Limits cut the list, newest first, and say how many matched.
    let cut = idem
        .run(&["ls", "--namespace", &namespace, "--limit", "2", "--json"])
        .await
        .json();
    schema::check(&cut, "ls");
    assert_eq!(cut["total"], 7);
    assert_eq!(cut["records"].as_array().unwrap().len(), 2);
    assert_eq!(cut["records"][0], page["records"][0]);
    let recent = idem
        .run(&["ls", "--namespace", &namespace, "--since", "10m", "--json"])
        .await
        .json();
    assert_eq!(recent["total"], 7);
    let future = idem
        .run(&[
            "ls",
            "--namespace",
            &namespace,
            "--since",
            "2999-01-01T00:00:00Z",
            "--json",
        ])
        .await
        .json();
    assert_eq!(future["total"], 0);
    let tool = idem
        .run(&[
            "ls",
            "--namespace",
            &namespace,
            "--tool",
            "delete_account",
            "--state",
            "approved,awaiting_approval",
            "--json",
        ])
        .await
        .json();
    assert_eq!(tool["total"], 2);

    // The other commands' JSON.
    let stats = idem.run(&["stats", "--json"]).await.json();
    schema::check(&stats, "stats");
    for status in schema::STATUSES {
        assert!(
            stats["by_status"][status].as_u64().unwrap() >= 1,
            "{status}"
        );
    }
    let unknown_key = key_from_transcript("charge_card", &unknown, &namespace).await;
    let derived = support::run(
        &[
            "key",
            "--tool",
            "charge_card",
            "--call-id",
            &unknown,
            "--namespace",
            &namespace,
            "--args",
            r#"{"customer": "ada", "cents": 4900.0}"#,
            "--json",
        ],
        &[],
    )
    .await
    .json();
    schema::check(&derived, "key");
    assert_eq!(derived["key"], unknown_key.as_str());
    let unknown_json = idem.run(&["show", &unknown_key, "--json"]).await.json();
    assert_eq!(derived["fingerprint"], unknown_json["fingerprint"]);
    let resolved_json = idem
        .run(&[
            "resolve",
            &unknown_key,
            "--succeeded",
            r#""ch_1""#,
            "--by",
            "ada",
            "--reason",
            "seen",
            "--json",
        ])
        .await
        .json();
    schema::check(&resolved_json, "record");
    assert_eq!(resolved_json["outcome"]["output"], "ch_1");
    let deleted = idem
        .run(&[
            "delete",
            secret.as_str(),
            "--by",
            "ada",
            "--reason",
            "cleanup",
            "--json",
        ])
        .await
        .json();
    schema::check(&deleted, "deleted");
    assert_eq!(deleted["key"], secret.as_str());
    let purged = idem.run(&["purge", "--expired", "--json"]).await.json();
    schema::check(&purged, "deleted");
    assert_eq!(purged["key"], Value::Null);
}

async fn bad_input_is_one_line_a_nonzero_exit_and_changes_nothing(url: &str) {
    let idem = Idem::new(url);
    let namespace = unique("tenant");
    let app = App::default();
    let exec = executor(url, &app, Duration::ZERO).await;
    let agent = dispatcher(url, &app, Duration::ZERO).await;

    let unknown = timed_out_charge(&exec, &app, &namespace).await;
    let unknown = key_from_transcript("charge_card", &unknown, &namespace).await;
    let done = unique("call");
    exec.call(charge_card, ada())
        .call_id(&done)
        .namespace(ns(&namespace))
        .await
        .unwrap();
    let done = key_from_transcript("charge_card", &done, &namespace).await;
    let Err(IdemError::ApprovalPending { key: pending, .. }) = agent
        .dispatch_one(delete_call(&unique("call"), "mallory"), &tenant(&namespace))
        .await
        .result
    else {
        panic!("pending")
    };
    let pending = pending.as_str().to_owned();
    let live = claim_directly(
        url,
        &namespace,
        &unique("call"),
        Some("{}"),
        Duration::from_secs(300),
    )
    .await;
    let live = live.as_str().to_owned();
    // Two records whose keys share their first four digits.
    let (twin_a, twin_b) = twins(&namespace);
    for id in [&twin_a, &twin_b] {
        exec.call(charge_card, ada())
            .call_id(id.as_str())
            .namespace(ns(&namespace))
            .await
            .unwrap();
    }
    let twin_a = key_from_transcript("charge_card", &twin_a, &namespace).await;
    let twin_b = key_from_transcript("charge_card", &twin_b, &namespace).await;

    let snapshot = || async {
        idem.run(&["ls", "--namespace", &namespace, "--json"])
            .await
            .json()
    };
    let before = snapshot().await;
    assert_eq!(before["total"], 6);

    let by = ["--by", "ada", "--reason", "because"];
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .chain(by.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let cases: Vec<(Vec<String>, i32, String)> = vec![
        // Malformed JSON for --succeeded.
        (
            with(&["resolve", &unknown, "--succeeded", r#"{"charge_id": "#]),
            2,
            "is not JSON".into(),
        ),
        (
            with(&["resolve", &unknown, "--succeeded", "charged"]),
            2,
            "--succeeded takes the tool's output as JSON".into(),
        ),
        // An unknown key, whole or as a prefix.
        (
            with(&["resolve", &"0".repeat(64), "--release"]),
            3,
            format!("no record with key {}", "0".repeat(64)),
        ),
        (
            vec!["show".into(), "0000000f".into()],
            3,
            "no record".into(),
        ),
        // Not a key at all.
        (
            vec!["show".into(), "zz".into()],
            2,
            "is not a key or a key prefix".into(),
        ),
        (
            vec!["show".into(), "abc".into()],
            2,
            "give at least 4".into(),
        ),
        // An ambiguous prefix lists its candidates.
        (
            with(&["resolve", &twin_a[..4], "--release"]),
            4,
            format!("key prefix {} is ambiguous", &twin_a[..4]),
        ),
        // Resolving a live in-flight record, a completed one, a pending
        // approval.
        (
            with(&["resolve", &live, "--release"]),
            1,
            "in flight under a live lease (worker worker-elsewhere:9".into(),
        ),
        (
            with(&["delete", &live]),
            1,
            "in flight under a live lease".into(),
        ),
        (
            with(&["resolve", &done, "--failed", "nope"]),
            1,
            "is already succeeded".into(),
        ),
        (
            with(&["resolve", &pending, "--succeeded", "{}"]),
            1,
            "approve or deny it instead".into(),
        ),
        // Approving or denying what is not pending.
        (
            vec!["approve".into(), done.clone(), "--by".into(), "ada".into()],
            1,
            "is not awaiting approval (it is succeeded)".into(),
        ),
        (
            with(&["deny", &unknown]),
            1,
            "is not awaiting approval (it is unknown)".into(),
        ),
        (
            vec!["approve".into(), live.clone(), "--by".into(), "ada".into()],
            1,
            "is not awaiting approval (it is in_flight)".into(),
        ),
        // Empty names and reasons.
        (
            vec![
                "deny".into(),
                pending.clone(),
                "--by".into(),
                "ada".into(),
                "--reason".into(),
                " ".into(),
            ],
            2,
            "--reason must not be empty".into(),
        ),
        (
            vec!["approve".into(), pending.clone(), "--by".into(), "".into()],
            2,
            "--by must not be empty".into(),
        ),
        // Unreadable filters.
        (
            vec!["ls".into(), "--since".into(), "last tuesday".into()],
            2,
            "--since \"last tuesday\" is neither a duration".into(),
        ),
    ];
    for (args, code, needle) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let line = idem.run(&args).await.fails(*code, needle).to_owned();
        let acting = ["resolve", "approve", "deny", "delete"].contains(&args[0]);
        if acting {
            assert!(line.contains("nothing"), "{line}");
        }
        if *code == 4 {
            assert!(
                line.contains(&twin_a) && line.contains(&twin_b),
                "the candidates are listed: {line}"
            );
        }
    }
    // clap's own usage errors exit with 2 too.
    let missing = idem
        .run(
            &with(&["resolve", &unknown])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        )
        .await;
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(missing.stderr.contains("--succeeded"), "{}", missing.stderr);
    let state = idem.run(&["ls", "--state", "lost"]).await;
    assert_eq!(state.code, 2);
    assert!(
        state.stderr.contains("unknown state `lost`"),
        "{}",
        state.stderr
    );

    assert_eq!(snapshot().await, before, "nothing changed");
    assert_eq!(app.charges(), 4);
    assert_eq!(app.deletions(), 0);
}

/// Two call ids of `charge_card` in `namespace` whose keys share their
/// first four hexadecimal digits.
fn twins(namespace: &str) -> (String, String) {
    let tenant = ns(namespace);
    let mut seen = std::collections::HashMap::new();
    for i in 0.. {
        let id = format!("twin-{i}");
        let key = derive_key(&KeyInput {
            version: 1,
            namespace: &tenant,
            tool: "charge_card",
            source: KeySource::CallId(&id),
        })
        .unwrap();
        if let Some(other) = seen.insert(key.as_str()[..4].to_owned(), id.clone()) {
            return (other, id);
        }
    }
    unreachable!()
}

/// The bytes of a SQLite file and of its `-wal` and `-shm` files (`None`:
/// absent).
fn file_bytes(path: &std::path::Path) -> [Option<Vec<u8>>; 3] {
    let with = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        std::fs::read(name).ok()
    };
    [std::fs::read(path).ok(), with("-wal"), with("-shm")]
}

/// `idem ls`, `show` and `stats` pointed at another application's SQLite
/// database fail as not an idem store and leave it byte for byte as it was
/// (no idem tables, no -wal or -shm file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_another_applications_sqlite_database_fails_and_changes_no_byte() {
    let dir = idem_testkit::TempDir::new("idem-cli").unwrap();
    let path = dir.path().join("other-app.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
             INSERT INTO users (name) VALUES ('ana');",
        )
        .unwrap();
    let before = file_bytes(&path);
    let idem = Idem::new(&format!("sqlite://{}", path.display()));
    for args in [
        &["ls"][..],
        &["stats"],
        &["show", "abcd"],
        &["ls", "--json"],
    ] {
        let line = idem
            .run(args)
            .await
            .fails(5, "is not an idem store")
            .to_owned();
        assert!(line.contains("other-app.db"), "{line}");
        assert_eq!(
            file_bytes(&path),
            before,
            "`idem {args:?}` changed the file"
        );
    }
}

/// A store written by an older idem (SQLite schema version 1) is listed
/// as it is and stays at version 1; `idem migrate` migrates it and says
/// so, and says when there is nothing left to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_an_older_sqlite_store_does_not_migrate_it_and_idem_migrate_does() {
    let dir = idem_testkit::TempDir::new("idem-cli").unwrap();
    let path = dir.path().join("idem-0.1.db");
    let key = "ab".repeat(32);
    let far = 4_000_000_000_000u64;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        r#"CREATE TABLE idem_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
           CREATE TABLE idem_records (key TEXT PRIMARY KEY NOT NULL, expires_at INTEGER, record BLOB NOT NULL);
           INSERT INTO idem_meta (name, value) VALUES ('next_fence', 2), ('schema_version', 1);
           INSERT INTO idem_records VALUES ('{key}', {far}, CAST('{{"key":"{key}","tool":"send_email","fingerprint":"{fp}","created_at":1700000000000,"state":"completed","fence":1,"outcome":{{"status":"success","output":"{{}}"}},"completed_at":1700000000100,"expires_at":{far}}}' AS BLOB));"#,
        fp = "f".repeat(64),
    ))
    .unwrap();
    let version = || -> i64 {
        conn.query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap()
    };
    let before = file_bytes(&path);
    let idem = Idem::new(&format!("sqlite://{}", path.display()));
    let listed = idem.run(&["ls", "--json"]).await.json();
    assert_eq!(listed["records"][0]["key"], key.as_str());
    idem.run(&["stats"]).await.ok();
    // Version 1 had no audit log: an empty one, and nothing created.
    let log = idem.run(&["log", "--json"]).await.json();
    assert_eq!(log["total"], 0, "{log}");
    assert_eq!(file_bytes(&path), before, "reading wrote to the file");
    assert_eq!(version(), 1);

    let now = idem::store::sqlite::SCHEMA_VERSION;
    let said = idem.run(&["migrate"]).await.ok().to_owned();
    assert!(
        said.contains(&format!("from schema version 1 to {now}")),
        "{said}"
    );
    assert_eq!(version(), i64::from(now));
    let again = idem.run(&["migrate", "--json"]).await.json();
    assert_eq!(
        (again["from"].as_u64(), again["to"].as_u64()),
        (Some(u64::from(now)), Some(u64::from(now)))
    );
    let listed = idem.run(&["ls", "--json"]).await.json();
    assert_eq!(listed["records"][0]["key"], key.as_str());
}

/// A PostgreSQL schema or Redis prefix no idem store ever used reads as
/// not an idem store, every time (the read created nothing); `idem
/// migrate` creates the store, which then lists as empty.
async fn reading_where_no_idem_store_is_fails_until_idem_migrate_creates_one(url: &str) {
    let idem = Idem::new(url);
    for _ in 0..2 {
        idem.run(&["ls"]).await.fails(5, "is not an idem store");
        idem.run(&["stats", "--json"])
            .await
            .fails(5, "is not an idem store");
    }
    let said = idem.run(&["migrate"]).await.ok().to_owned();
    let version = match url.starts_with("postgres") {
        true => idem::store::postgres::SCHEMA_VERSION,
        false => idem::store::redis::SCHEMA_VERSION,
    };
    assert!(
        said.contains("created the schema") && said.contains(&format!("version {version}")),
        "{said}"
    );
    let listed = idem.run(&["ls", "--json"]).await.json();
    assert_eq!(listed["total"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_postgres_schema_without_idem_fails_and_creates_nothing() {
    let test = "postgres::reading_a_postgres_schema_without_idem";
    if let Some(store) = idem_testkit::stores::postgres(test).await {
        let schema = unique("fresh").replace('-', "_");
        let url = format!("{}?schema={schema}", store.url());
        reading_where_no_idem_store_is_fails_until_idem_migrate_creates_one(&url).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_redis_prefix_without_idem_fails_and_writes_nothing() {
    let test = "redis::reading_a_redis_prefix_without_idem";
    if let Some(store) = idem_testkit::stores::redis(test).await {
        let url = format!("{}?prefix={}", store.url(), unique("fresh"));
        reading_where_no_idem_store_is_fails_until_idem_migrate_creates_one(&url).await;
    }
}

/// One corrupt row: `idem ls` and `idem stats` print the rest, then name
/// the corrupt key on stderr and exit 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_is_named_loudly_and_the_rest_are_listed() {
    let dir = idem_testkit::TempDir::new("idem-cli").unwrap();
    let path = dir.path().join("idem.db");
    let store = idem_runtime::store::SqliteStore::open(&path).await.unwrap();
    let (good, bad) = ("ab".repeat(32), "cd".repeat(32));
    for key in [&good, &bad] {
        let key = IdempotencyKey::parse(key).unwrap();
        let f = idem_runtime::key::Fingerprint::new("f".repeat(64));
        let req = ClaimRequest {
            key: &key,
            tool: "send_email",
            fingerprint: &f,
            check_fingerprint: true,
            lease: Duration::from_secs(30),
            info: CallInfoRef::EMPTY,
            worker: None,
        };
        let idem_runtime::store::ClaimOutcome::Acquired { fence, .. } =
            store.claim(&req).await.unwrap()
        else {
            panic!("a fresh key")
        };
        let done = idem_runtime::record::Outcome::Success {
            output: idem_runtime::record::OutputJson::from_value(&json!({ "id": 1 })),
        };
        store
            .complete(&key, fence, &done, Duration::from_secs(3600))
            .await
            .unwrap();
    }
    store.close().await;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE idem_records SET record = x'00ff13' WHERE key = ?1",
            [&bad],
        )
        .unwrap();
    let idem = Idem::new(&format!("sqlite://{}", path.display()));
    for args in [&["ls", "--json"][..], &["stats", "--json"]] {
        let run = idem.run(args).await;
        assert_eq!(run.code, 6, "{args:?}: {}{}", run.stdout, run.stderr);
        assert!(run.stderr.contains(&format!("{bad:?}")), "{}", run.stderr);
        assert!(run.stderr.contains("could not be read"), "{}", run.stderr);
        let printed: Value = serde_json::from_str(&run.stdout).unwrap();
        assert!(printed.to_string().contains('1'), "{printed}");
    }
    let listed: Value = serde_json::from_str(&idem.run(&["ls", "--json"]).await.stdout).unwrap();
    assert_eq!(listed["records"][0]["key"], good.as_str());
    assert_eq!(listed["total"], 1);
}
