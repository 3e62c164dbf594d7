//! Approvals through the `idem` program, on every store: a call waiting
//! for a person is approved or denied from the command line, the tool runs
//! exactly once, and waiting callers and later duplicates get the
//! decision.
//!
//! Each scenario is written once against a store URL and runs on a SQLite
//! file, and on the Redis and PostgreSQL servers of `idem_testkit::servers`
//! (skipped loudly when their binaries are missing; a failure under
//! `IDEM_REQUIRE_SERVERS=1`). The Redis and PostgreSQL stores are shared by
//! the scenarios, so each works in a namespace of its own.
//!
//! With `--approvers`, `idem approve` and `idem deny` check `--by` against
//! the approval rules of the file (`idem serve`'s).

use std::time::Duration;

use idem::approval::Approval;
use idem::prelude::*;
use serde_json::{json, Value};

use crate::support::tools::{
    delete_account, delete_call, dispatcher, executor, ns, still_waits, tenant, App, DeleteAccount,
    ASK,
};
use crate::support::{listed, operator, unique, Idem};

crate::support::on_every_store_url![
    a_pending_approval_approved_from_the_cli_runs_the_tool_exactly_once,
    callers_waiting_for_approval_run_the_tool_once_when_approved_from_the_cli,
    a_denial_from_the_cli_reaches_the_waiting_caller_and_every_later_duplicate,
    idem_approve_with_the_approvers_file_holds_its_two_person_rule,
];

/// How long a waiting caller waits for a person.
const PATIENCE: Duration = Duration::from_secs(30);

/// bob's decisions on `key` once it is decided: `idem approve`, `idem deny`
/// with the reason of `deny_and_resolve`, and `idem resolve` with its
/// settlement, each refused (exit 1) saying what `says` holds in turn.
async fn later_decisions_by_bob_are_refused(
    idem: &Idem,
    key: &str,
    deny_and_resolve: (&str, &[&str]),
    says: [&str; 3],
) {
    let (reason, settlement) = deny_and_resolve;
    let mut resolve = vec!["resolve", key];
    resolve.extend_from_slice(settlement);
    resolve.extend(["--by", "bob", "--reason", "r"]);
    let decisions = [
        vec!["approve", key, "--by", "bob"],
        vec!["deny", key, "--by", "bob", "--reason", reason],
        resolve,
    ];
    for (args, said) in decisions.iter().zip(says) {
        idem.run(args).await.fails(1, said);
    }
}

/// An agent whose call `call_id` (deleting eve's account) waits for a
/// person's decision, in the background; and the key it waits under, once
/// `idem ls` lists it.
async fn waiting_for_a_person(
    url: &str,
    idem: &Idem,
    app: &App,
    namespace: &str,
    call_id: &str,
) -> (tokio::task::JoinHandle<idem::ToolResult>, String) {
    let waiting = dispatcher(url, app, PATIENCE).await;
    let call = delete_call(call_id, "eve");
    let context = tenant(namespace);
    let agent = tokio::spawn(async move { waiting.dispatch_one(call, &context).await });
    (agent, listed(idem, namespace, "awaiting_approval").await)
}

async fn a_pending_approval_approved_from_the_cli_runs_the_tool_exactly_once(url: &str) {
    let (idem, namespace, app) = operator(url);
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

    let page = idem.ls_json("awaiting-approval", &namespace).await;
    assert_eq!(page["total"], 1);
    assert_eq!(page["records"][0]["key"], key.as_str());
    assert_eq!(page["records"][0]["approval"]["message"], ASK);
    assert_eq!(page["records"][0]["approval"]["approved_by"], Value::Null);
    assert_eq!(
        page["records"][0]["arguments"],
        json!({"customer": "mallory"})
    );

    // Asking again before anyone decided: still waiting, nothing ran.
    still_waits(&agent, &call, &namespace).await;

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
    let refused = [
        "already approved (by ada)",
        "already approved",
        "approve or deny it instead",
    ];
    later_decisions_by_bob_are_refused(&idem, &key, ("no", &["--release"][..]), refused).await;
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
    let (idem, namespace, app) = operator(url);
    let call_id = unique("call");

    // An agent whose calls wait for a person's decision.
    let (agent, key) = waiting_for_a_person(url, &idem, &app, &namespace, &call_id).await;

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
    let (idem, namespace, app) = operator(url);
    let call_id = unique("call");
    let reason = "accounts are closed by support, not by agents";

    let (agent, key) = waiting_for_a_person(url, &idem, &app, &namespace, &call_id).await;

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
    let refused = [
        "not awaiting approval (it is failed)",
        "not awaiting approval",
        "already failed",
    ];
    let settlement = ("again", &["--succeeded", "{}"][..]);
    later_decisions_by_bob_are_refused(&idem, &key, settlement, refused).await;

    let shown = idem.run(&["show", &key, "--json"]).await.json();
    assert_eq!(shown["status"], "failed");
    assert_eq!(shown["outcome"]["code"], "approval_denied");
    assert_eq!(shown["outcome"]["message"], reason);
    assert_eq!(shown["audit"][0]["action"], "denied");
    assert_eq!(shown["audit"][0]["by"], "ada");
}

/// The approvers file of a finance team: ada, bob and cyd approve, vic
/// only looks; deleting an account takes two of them, never the asker.
const FINANCE: &str = r#"
[[approver]]
name = "ada"
role = "approver"

[[approver]]
name = "bob"
role = "approver"

[[approver]]
name = "cyd"
role = "approver"

[[approver]]
name = "vic"
role = "viewer"

[[rule]]
name = "account deletions"
tools = ["delete_*"]
required = 2
forbid_self_approval = true
"#;

/// ada's agent asks to delete an account under a two-person rule that
/// forbids approving one's own call: `idem approve --approvers` refuses
/// the viewer, ada herself and bob twice; bob's approval is 1 of 2 and
/// runs nothing; without the file, an approval of a call already under
/// the rule is refused; cyd's makes it run, once; the log has both.
async fn idem_approve_with_the_approvers_file_holds_its_two_person_rule(url: &str) {
    let idem = Idem::new(url);
    let dir = idem_testkit::TempDir::new("idem-rules").unwrap();
    let file = dir.path().join("approvers.toml");
    std::fs::write(&file, FINANCE).unwrap();
    let file = file.to_str().unwrap();
    // The asker is the agent's principal: ada.
    let namespace = format!("{}/ada", unique("finance"));
    let app = App::default();
    let agent = dispatcher(url, &app, Duration::ZERO).await;
    let call = delete_call(&unique("call"), "mallory");
    let asked = tenant(&namespace).principal("ada");
    let first = agent.dispatch_one(call.clone(), &asked).await;
    let Err(IdemError::ApprovalPending { key, .. }) = &first.result else {
        panic!("expected a pending approval: {:?}", first.result)
    };
    let key = key.as_str().to_owned();
    let approve = |by: &'static str| {
        let (idem, key) = (&idem, key.clone());
        async move {
            idem.run(&["approve", &key, "--by", by, "--approvers", file])
                .await
        }
    };

    approve("vic")
        .await
        .fails(1, "--by vic: not an [[approver]] with role = \"approver\"");
    approve("nobody").await.fails(1, "--by nobody: not an");
    approve("ada").await.fails(
        1,
        "Rule “account deletions” forbids approving your own call: ada asked for it",
    );

    let out = approve("bob").await;
    assert!(
        out.ok().starts_with("approval 1 of 2 recorded for "),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("nothing runs until cyd approves too"),
        "{}",
        out.stdout
    );
    let shown = idem.run(&["show", &key, "--json"]).await.json();
    assert_eq!(
        shown["status"], "awaiting_approval",
        "1 of 2 approves nothing"
    );
    assert_eq!(shown["steps"]["idem:approvals"][0]["approver"], "bob");
    let so_far = &shown["approval"]["approvals_so_far"];
    assert_eq!(so_far.as_array().map(Vec::len), Some(1), "{shown}");
    assert_eq!(so_far[0]["by"], "bob");
    crate::support::schema::check(&shown, "record");
    let text = idem.run(&["show", &key]).await;
    text.says("Approvals:    1 so far (by bob)\n");
    still_waits(&agent, &call, &namespace).await;
    assert_eq!(app.deletions(), 0);

    approve("bob").await.fails(
        1,
        "already has an approval by bob (1 of 2); the next approval must come from someone else",
    );
    // Without the file the rule cannot be checked: refused, since the call
    // shows it is under one.
    idem.run(&["approve", &key, "--by", "cyd"])
        .await
        .fails(1, "already has 1 approval(s) towards a rule that needs several (by bob); give --approvers FILE");

    let out = approve("cyd").await;
    assert!(out.ok().starts_with("approved "), "{}", out.stdout);
    let ran = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
    assert_eq!(
        ran.result.expect("runs once approved").output,
        json!("deleted mallory")
    );
    let dup = agent.dispatch_one(call, &tenant(&namespace)).await;
    assert!(dup.deduplicated(), "{:?}", dup.result);
    assert_eq!(app.deletions(), 1);

    let log = idem.run(&["log", &key, "--json"]).await.json();
    let events: Vec<(String, String)> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap().to_owned(),
                e["by"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        events.starts_with(&[
            ("approval_added".to_owned(), "bob".to_owned()),
            ("approved".to_owned(), "cyd".to_owned()),
        ]),
        "{events:?}"
    );
}
