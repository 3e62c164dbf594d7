//! Approval rules kept with the store, as a program meets them: once a
//! team's rules are in force on a store, the library's own operator obeys
//! them like every other surface — no approving one's own call, two
//! distinct approvers where the rule says two, nobody outside the
//! approvers — and the asker is the principal the call was made by, never
//! a part of its namespace.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use idem::approval::rules::{RuleEntry, RuleRefusal, Rules};
use idem::approval::{Approval, ApprovalDecision, Callback};
use idem::dispatch::{Arguments, ToolCall};
use idem::key::IdempotencyKey;
use idem::operator::{Approving, OperatorError};
use idem::prelude::*;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A refund's arguments.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Refund {
    cents: u64,
}

/// Refund a charge: money leaves.
#[idem::tool(class = "irreversible")]
pub async fn refund(args: Refund, State(paid): State<Arc<AtomicUsize>>) -> Result<u64, ToolError> {
    paid.fetch_add(1, Ordering::SeqCst);
    Ok(args.cents)
}

/// Two of dana, erin and mallory/erin approve a refund, never the one
/// who asked.
fn two_people() -> Rules {
    let mut rule = RuleEntry::default();
    rule.name = Some("refunds".into());
    rule.tools = vec!["refund".into()];
    rule.required = 2;
    rule.forbid_self_approval = true;
    let approvers = ["dana", "erin", "mallory/erin"].map(String::from);
    Rules::check(vec![rule], &approvers).unwrap()
}

/// A refund asked for by the principal `by`, parked for a person: the
/// record.
async fn asked(
    store: &Arc<dyn Store>,
    paid: &Arc<AtomicUsize>,
    by: &str,
) -> (
    Dispatcher<Arc<AtomicUsize>>,
    ToolCall,
    RunContext,
    idem::record::Record,
) {
    let exec = Executor::builder_shared(store.clone())
        .state(paid.clone())
        .approvals(Callback::new(|_| async {
            Ok(ApprovalDecision::Pending {
                message: "a person decides".into(),
            })
        }))
        .build();
    let dispatcher = Dispatcher::new(exec.clone(), idem::tools![refund]);
    let call = ToolCall {
        id: Some(format!("call-{by}")),
        name: "refund".into(),
        arguments: Arguments::Json(json!({ "cents": 1999 })),
    };
    // The proxy's namespace for an OAuth subject: `mcp/pay/` and the
    // subject, slash and all.
    let run = RunContext::default()
        .namespace(Namespace::new(format!("mcp/pay/{by}")).unwrap())
        .principal(by);
    let first = dispatcher.dispatch_one(call.clone(), &run).await;
    let Err(IdemError::ApprovalPending { key, .. }) = first.result else {
        panic!("expected a pending approval: {:?}", first.result);
    };
    let record = exec.operator().show(&key).await.unwrap();
    (dispatcher, call, run, record)
}

/// The rules' refusal `e` is.
pub fn refusal(e: OperatorError) -> RuleRefusal {
    match e {
        OperatorError::Rule(refused) => *refused,
        other => panic!("not a refusal of the rules: {other}"),
    }
}

#[tokio::test]
async fn the_library_operator_obeys_the_rules_in_force_on_the_store() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    two_people().publish(store.as_ref()).await.unwrap();
    let paid = Arc::new(AtomicUsize::new(0));
    let (agent, call, run, record) = asked(&store, &paid, "mallory/erin").await;
    assert_eq!(record.asker().as_deref(), Some("mallory/erin"));
    let operator = idem::operator::Operator::new(store.clone());

    // The asker, however the program approves.
    let own = operator
        .approve_record(&record, Approval::granted_by("mallory/erin"))
        .await
        .unwrap_err();
    assert!(own
        .to_string()
        .starts_with("Rule “refunds” forbids approving your own call: mallory/erin asked for it"));
    assert!(matches!(refusal(own), RuleRefusal::OwnCall { .. }));
    let own = operator
        .add_approval(&record, Approval::granted_by("mallory/erin"), 1)
        .await
        .unwrap_err();
    assert!(matches!(refusal(own), RuleRefusal::OwnCall { .. }));
    // Someone the rules do not know, to approve or to deny.
    let bot = operator
        .approve_record(&record, Approval::granted_by("ops-bot"))
        .await
        .unwrap_err();
    assert!(matches!(refusal(bot), RuleRefusal::NotAnApprover { .. }));
    let bot = operator
        .deny_record(&record, "ops-bot", "no")
        .await
        .unwrap_err();
    assert!(matches!(bot, OperatorError::Rule(_)), "{bot}");

    // erin is not mallory/erin: her approval counts, as one of two, even
    // through `approve_record`.
    let after = operator
        .approve_record(&record, Approval::granted_by("erin"))
        .await
        .unwrap();
    assert_eq!(after.status(), idem::record::Status::AwaitingApproval);
    let again = agent.dispatch_one(call.clone(), &run).await;
    assert!(matches!(
        again.result,
        Err(IdemError::ApprovalPending { .. })
    ));
    let done = operator
        .add_approval(&after, Approval::granted_by("dana"), 1)
        .await
        .unwrap();
    assert!(matches!(done, Approving::Granted(_)), "{done:?}");
    let ran = agent.dispatch_one(call, &run).await;
    assert_eq!(ran.result.unwrap().output, json!(1999));
    assert_eq!(paid.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn without_rules_in_force_one_approval_from_anyone_runs_the_call() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let paid = Arc::new(AtomicUsize::new(0));
    let (agent, call, run, record) = asked(&store, &paid, "ada").await;
    let operator = idem::operator::Operator::new(store.clone());
    assert!(Rules::in_force(store.as_ref()).await.unwrap().is_none());
    operator
        .approve_record(&record, Approval::granted_by("ada"))
        .await
        .unwrap();
    assert!(agent.dispatch_one(call, &run).await.result.is_ok());
    assert_eq!(paid.load(Ordering::SeqCst), 1);
}

/// A finance team's rules, from the approvers file's tables: small
/// refunds run, CI never refunds, mid-sized ones take dana or erin, large
/// ones two people and never the asker; a shadow rule being rolled out.
fn finance() -> Rules {
    let approvers = ["alice", "dana", "erin"].map(String::from);
    Rules::check(finance_tables(), &approvers).unwrap()
}

/// The tables of [`finance`], for a test to add its own rules to (alice,
/// dana and erin approve).
pub fn finance_tables() -> Vec<RuleEntry> {
    let table = |json: serde_json::Value| serde_json::from_value::<RuleEntry>(json).unwrap();
    vec![
        table(
            json!({"name": "no CI refunds", "tools": ["refund"], "principals": ["ci-*"],
                     "decision": "deny", "reason": "CI jobs never refund; a person must ask."}),
        ),
        table(
            json!({"name": "new ceiling", "shadow": true, "tools": ["refund"],
                     "when": "args.cents > 100000", "decision": "deny", "reason": "over the new ceiling"}),
        ),
        table(
            json!({"name": "small refunds", "tools": ["refund"], "when": "args.cents < 5000",
                     "decision": "run"}),
        ),
        table(
            json!({"name": "refunds", "tools": ["refund"], "when": "args.cents <= 50000",
                     "approvers": ["dana", "erin"]}),
        ),
        table(
            json!({"name": "large refunds", "tools": ["refund"], "required": 2,
                     "forbid_self_approval": true}),
        ),
    ]
}

/// An agent of `principal` on `store` (no approval policy of its own: the
/// rules decide), refunding `cents`.
async fn refunding(
    store: &Arc<dyn Store>,
    paid: &Arc<AtomicUsize>,
    principal: &str,
    cents: u64,
) -> (
    Dispatcher<Arc<AtomicUsize>>,
    ToolCall,
    RunContext,
    idem::ToolResult,
) {
    let exec = Executor::builder_shared(store.clone())
        .state(paid.clone())
        .build();
    let dispatcher = Dispatcher::new(exec, idem::tools![refund]);
    let call = ToolCall {
        id: Some(format!("call-{principal}-{cents}")),
        name: "refund".into(),
        arguments: Arguments::Json(json!({ "cents": cents })),
    };
    let run = RunContext::default()
        .namespace(Namespace::new(format!("pay/{principal}")).unwrap())
        .principal(principal);
    let first = dispatcher.dispatch_one(call.clone(), &run).await;
    (dispatcher, call, run, first)
}

/// The audit log of `key`: (action, by, reason).
pub async fn trail(store: &Arc<dyn Store>, key: &IdempotencyKey) -> Vec<(String, String, String)> {
    let operator = idem::operator::Operator::new(store.clone());
    let page = operator
        .audit(&idem::audit::AuditQuery::for_key(key.clone()), None, 100)
        .await
        .unwrap();
    page.events
        .iter()
        .map(|e| {
            (
                e.action.to_string(),
                e.by.clone(),
                e.reason.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// A line of the transcript (`cargo test -- --nocapture` shows it).
pub fn say(line: &str) {
    eprintln!("{line}");
}

/// `who` approves `record` through the library's operator.
async fn approve(
    operator: &idem::operator::Operator,
    record: &idem::record::Record,
    who: &str,
) -> Result<idem::record::Record, OperatorError> {
    operator
        .approve_record(record, Approval::granted_by(who))
        .await
}

#[tokio::test]
async fn each_call_is_decided_by_the_first_rule_that_matches_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    finance().publish(store.as_ref()).await.unwrap();
    let paid = Arc::new(AtomicUsize::new(0));
    let operator = idem::operator::Operator::new(store.clone());

    // Under the threshold: runs, with no person, as the rule's approval.
    let (_, _, _, small) = refunding(&store, &paid, "alice", 1999).await;
    let out = small.result.expect("runs with no person");
    assert_eq!(out.output, json!(1999));
    let log = trail(&store, out.meta.key.as_ref().unwrap()).await;
    assert_eq!(log[0].0, "approved_by_policy");
    assert_eq!(log[0].1, "rule “small refunds”", "the audit names the rule");
    say(&format!(
        "alice refund 19.99 € -> ran, no person; audit: {} by {}",
        log[0].0, log[0].1
    ));

    // CI: denied, and the model reads the rule's reason.
    let (_, _, _, ci) = refunding(&store, &paid, "ci-nightly", 1999).await;
    let Err(IdemError::ApprovalDenied { reason, .. }) = &ci.result else {
        panic!("denied: {:?}", ci.result);
    };
    assert_eq!(
        reason,
        "CI jobs never refund; a person must ask. (approval rule “no CI refunds”)"
    );
    say(&format!(
        "ci-nightly refund 19.99 € -> denied; the model reads: {}",
        ci.content()
    ));
    assert!(
        ci.content().to_string().contains("CI jobs never refund"),
        "the model reads it"
    );

    // Mid-sized: waits for dana or erin; alice is not one of them.
    let (agent, call, run, mid) = refunding(&store, &paid, "bob", 20000).await;
    let Err(IdemError::ApprovalPending { key, message, .. }) = &mid.result else {
        panic!("pending: {:?}", mid.result);
    };
    assert!(
        message.contains("Approval rule “refunds”: one approval of dana or erin"),
        "{message}"
    );
    say(&format!("bob refund 200 € -> waits: {message}"));
    let record = operator.show(key).await.unwrap();
    let alice = approve(&operator, &record, "alice").await.unwrap_err();
    say(&format!("  alice approves -> refused: {alice}"));
    assert!(
        alice.to_string().contains("lets only dana and erin decide"),
        "{alice}"
    );
    approve(&operator, &record, "erin").await.unwrap();
    assert_eq!(
        agent.dispatch_one(call, &run).await.result.unwrap().output,
        json!(20000)
    );
    say("  erin approves -> bob's call sent again runs once");

    // Large, asked by alice: two people, never alice; the shadow rule is
    // in the audit log and changed nothing.
    let (agent, call, run, large) = refunding(&store, &paid, "alice", 900000).await;
    let Err(IdemError::ApprovalPending { key, .. }) = &large.result else {
        panic!("pending: {:?}", large.result);
    };
    let log = trail(&store, key).await;
    assert_eq!(
        log[0],
        (
            "shadow_rule".to_owned(),
            "rule “new ceiling” (shadow)".to_owned(),
            "would have decided: deny: over the new ceiling".to_owned()
        )
    );
    say(&format!(
        "alice refund 9,000 € -> waits; audit: {} by {}: {}",
        log[0].0, log[0].1, log[0].2
    ));
    let record = operator.show(key).await.unwrap();
    let own = approve(&operator, &record, "alice").await.unwrap_err();
    say(&format!("  alice approves her own -> refused: {own}"));
    assert!(
        own.to_string()
            .starts_with("Rule “large refunds” forbids approving your own call"),
        "{own}"
    );
    let record = approve(&operator, &record, "dana").await.unwrap();
    say("  dana approves -> 1 of 2, the call sent again still waits");
    assert!(
        matches!(
            agent.dispatch_one(call.clone(), &run).await.result,
            Err(IdemError::ApprovalPending { .. })
        ),
        "1 of 2 runs nothing"
    );
    approve(&operator, &record, "erin").await.unwrap();
    assert_eq!(
        agent.dispatch_one(call, &run).await.result.unwrap().output,
        json!(900000)
    );
    say("  erin approves -> 2 of 2, alice's call sent again runs once");
    assert_eq!(
        paid.load(Ordering::SeqCst),
        3,
        "small, mid and large ran once each; CI never"
    );
}
