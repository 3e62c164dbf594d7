//! Edit, then approve, through the library on SQLite: an approver changes
//! the arguments of a pending call; the edited call is a new call with its
//! own key and record, the original is denied with a pointer to it and
//! never runs; the rules decide the edited arguments, and a hostile edit
//! changes nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use idem::approval::rules::{RuleEntry, RuleRefusal, Rules};
use idem::approval::Approval;
use idem::dispatch::{Arguments, ToolCall};
use idem::operator::{edited_key, Approving, Edited, Operator, OperatorError};
use idem::prelude::*;
use idem::record::{Outcome, Record, Status};
use serde_json::json;

use super::rules::{finance_tables, refund, refusal};

/// The finance team's rules of `rules.rs`, under a ceiling: refunds
/// above 100,000 cents are denied; up to 50,000 take dana or erin; larger
/// ones two people, never the asker.
fn rules() -> Rules {
    let ceiling = json!({"name": "ceiling", "tools": ["refund"], "when": "args.cents > 100000",
                         "decision": "deny", "reason": "over the ceiling"});
    let mut rules = finance_tables();
    rules.insert(0, serde_json::from_value::<RuleEntry>(ceiling).unwrap());
    let approvers = ["alice", "dana", "erin"].map(String::from);
    Rules::check(rules, &approvers).unwrap()
}

/// A store on a fresh SQLite file, the rules in force on it.
async fn store(name: &str) -> Arc<dyn Store> {
    let dir = std::env::temp_dir().join(format!("idem-edit-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store: Arc<dyn Store> = Arc::new(
        idem::store::SqliteStore::open(dir.join("idem.db"))
            .await
            .unwrap(),
    );
    rules().publish(store.as_ref()).await.unwrap();
    store
}

/// A refund of `cents` asked for by alice, parked for a person: the agent,
/// its call and run, and the record.
async fn asked(
    store: &Arc<dyn Store>,
    paid: &Arc<AtomicUsize>,
    cents: u64,
) -> (Dispatcher<Arc<AtomicUsize>>, ToolCall, RunContext, Record) {
    let exec = Executor::builder_shared(store.clone())
        .state(paid.clone())
        .build();
    let dispatcher = Dispatcher::new(exec.clone(), idem::tools![refund]);
    let call = ToolCall {
        id: Some(format!("call-{cents}")),
        name: "refund".into(),
        arguments: Arguments::Json(json!({ "cents": cents })),
    };
    let run = RunContext::default()
        .namespace(Namespace::new("pay/alice").unwrap())
        .principal("alice");
    let first = dispatcher.dispatch_one(call.clone(), &run).await;
    let Err(IdemError::ApprovalPending { key, .. }) = first.result else {
        panic!("expected a pending approval: {:?}", first.result);
    };
    let record = exec.operator().show(&key).await.unwrap();
    (dispatcher, call, run, record)
}

/// alice asks for a refund of `cents` on a fresh store, and dana edits it
/// to `to`: the store, what the tool paid, the call as asked, the edit.
async fn dana_edits(
    name: &str,
    cents: u64,
    to: Arguments,
) -> (
    Arc<dyn Store>,
    Arc<AtomicUsize>,
    (Dispatcher<Arc<AtomicUsize>>, ToolCall, RunContext, Record),
    Edited,
) {
    let store = store(name).await;
    let paid = Arc::new(AtomicUsize::new(0));
    let asked = asked(&store, &paid, cents).await;
    let edited = Operator::new(store.clone())
        .edit_record(&asked.3, to, Approval::granted_by("dana"))
        .await
        .unwrap();
    (store, paid, asked, edited)
}

/// Another agent of alice's on `store`, as another process would run it.
fn asked_again(store: &Arc<dyn Store>, paid: &Arc<AtomicUsize>) -> Dispatcher<Arc<AtomicUsize>> {
    let exec = Executor::builder_shared(store.clone())
        .state(paid.clone())
        .build();
    Dispatcher::new(exec, idem::tools![refund])
}

fn edit_json(arguments: serde_json::Value) -> Arguments {
    Arguments::Json(arguments)
}

fn edit(cents: u64) -> Arguments {
    Arguments::Json(json!({ "cents": cents }))
}

#[tokio::test]
async fn an_edit_is_a_new_call_and_the_original_never_runs() {
    let (store, paid, (agent, call, run, record), edited) =
        dana_edits("new-call", 20_000, edit(15_000)).await;
    let operator = Operator::new(store.clone());
    // The original: denied, pointing to the edited call.
    assert_eq!(edited.original.status(), Status::Failed);
    let to = edited
        .original
        .edited()
        .expect("a pointer to the edited call");
    assert_eq!(to.by, "dana");
    assert_eq!(to.key, edited_key(&record.key, to.fingerprint.as_str()));
    assert_ne!(to.key, record.key);
    // The edited call: its own record, the edited arguments, approved by
    // dana (one approval is all "refunds" needs).
    let Approving::Granted(new) = &edited.edited else {
        panic!("one approval grants it: {:?}", edited.edited);
    };
    assert_eq!(new.key, to.key);
    assert_eq!(new.info.args.as_deref(), Some(r#"{"cents":15000}"#));
    assert_eq!(new.asker().as_deref(), Some("alice"));
    assert_eq!(
        operator.show(&to.key).await.unwrap().status(),
        Status::Approved
    );
    assert_eq!(paid.load(Ordering::SeqCst), 0, "nothing ran at the edit");

    // The original, read by itself: denied, pointing to the edited call.
    let original = operator.show(&record.key).await.unwrap();
    let Some(Outcome::Failure { failure }) = original.outcome() else {
        panic!("the original is denied: {original:?}");
    };
    assert!(failure.message.contains("dana edited the arguments"));
    assert!(failure.message.contains(to.key.as_str()));

    // The model's retry of the original runs the edited call, once, with
    // the edited arguments, and says so; the original never runs.
    for round in 0..3 {
        let again = agent.dispatch_one(call.clone(), &run).await;
        let called = again.result.as_ref().expect("the edited call's output");
        assert_eq!(called.output, json!(15_000), "the edited arguments ran");
        assert_eq!(called.meta.key.as_ref(), Some(&to.key));
        assert_eq!(called.meta.deduplicated, round > 0);
        let told = called.meta.edited.as_deref().expect("told of the edit");
        assert_eq!(told.by, "dana");
        assert_eq!(told.original, record.key);
        assert_eq!(told.arguments, json!({ "cents": 15_000 }));
        // What the model reads: who edited it, to what, and the output.
        assert_eq!(
            again.content(),
            json!({ "edited": { "by": "dana", "arguments": { "cents": 15_000 } },
                    "output": 15_000 })
        );
    }
    assert_eq!(paid.load(Ordering::SeqCst), 1);
    assert_eq!(
        operator.show(&to.key).await.unwrap().status(),
        Status::Succeeded
    );
    // Nothing more to decide on the original, nor to edit again.
    let twice = operator
        .edit(&record.key, edit(10_000), Approval::granted_by("erin"))
        .await
        .unwrap_err();
    assert!(matches!(twice, OperatorError::NotPending { .. }), "{twice}");

    // The audit log: `edited` on the original, `approved` on the new one.
    let actions = |events: idem::audit::AuditPage| {
        events
            .events
            .iter()
            .map(|e| (e.action.to_string(), e.by.clone()))
            .collect::<Vec<_>>()
    };
    let query = |key: &idem::key::IdempotencyKey| idem::audit::AuditQuery::for_key(key.clone());
    let original = operator.audit(&query(&record.key), None, 10).await.unwrap();
    assert!(actions(original).contains(&("edited".into(), "dana".into())));
    let new = operator.audit(&query(&to.key), None, 10).await.unwrap();
    assert_eq!(actions(new), [("approved".into(), "dana".into())]);
}

#[tokio::test]
async fn the_rules_decide_the_edited_arguments() {
    let store = store("rules").await;
    let paid = Arc::new(AtomicUsize::new(0));
    let operator = Operator::new(store.clone());

    // A deny rule on the edited arguments refuses the edit; nothing
    // changes.
    let (_, _, _, small) = asked(&store, &paid, 20_000).await;
    let over = operator
        .edit_record(&small, edit(200_000), Approval::granted_by("dana"))
        .await
        .unwrap_err();
    assert!(matches!(refusal(over), RuleRefusal::Denied { .. }));
    assert_eq!(operator.show(&small.key).await.unwrap(), small);
    // An editor the edited call's rule does not list: alice may approve
    // large refunds, not those of "refunds" (dana, erin).
    let unlisted = operator
        .edit_record(&small, edit(30_000), Approval::granted_by("alice"))
        .await
        .unwrap_err();
    assert!(matches!(refusal(unlisted), RuleRefusal::NotListed { .. }));
    assert_eq!(operator.show(&small.key).await.unwrap(), small);

    // A two-person call: the editor's approval is one of two, even when
    // the edit brings the amount under the one-person rule's.
    let (_, _, _, large) = asked(&store, &paid, 80_000).await;
    for cents in [70_000, 40_000] {
        let (_, _, _, large) = asked(&store, &paid, 60_000 + cents / 10).await;
        let edited = operator
            .edit_record(&large, edit(cents), Approval::granted_by("dana"))
            .await
            .unwrap();
        let Approving::Recorded {
            record,
            given,
            required,
        } = edited.edited
        else {
            panic!("one approval of two: {:?}", edited.edited);
        };
        assert_eq!((given, required), (1, 2));
        assert_eq!(record.status(), Status::AwaitingApproval);
        let again = operator
            .add_approval(&record, Approval::granted_by("dana"), 1)
            .await
            .unwrap_err();
        assert!(
            matches!(again, OperatorError::ApprovedBefore { .. }),
            "{again}"
        );
        let done = operator
            .add_approval(&record, Approval::granted_by("erin"), 1)
            .await
            .unwrap();
        assert!(matches!(done, Approving::Granted(_)), "{done:?}");
    }

    // The asker may not edit their own call under forbid_self_approval.
    let own = operator
        .edit_record(&large, edit(60_000), Approval::granted_by("alice"))
        .await
        .unwrap_err();
    assert!(matches!(refusal(own), RuleRefusal::OwnCall { .. }));
    assert_eq!(operator.show(&large.key).await.unwrap(), large);
    assert_eq!(paid.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_edited_call_that_needs_a_second_approver_waits_then_runs_once() {
    let (store, paid, (agent, call, run, record), edited) =
        dana_edits("second", 80_000, edit(70_000)).await;
    let operator = Operator::new(store.clone());
    let to = edited.original.edited().unwrap();

    // The model's retry: the edited call awaits its second approver, and
    // the model is told of the edit and of the key that waits.
    let waiting = agent.dispatch_one(call.clone(), &run).await;
    let Err(IdemError::ApprovalPending { key, message, .. }) = &waiting.result else {
        panic!("the edited call waits: {:?}", waiting.result);
    };
    assert_eq!(key, &to.key);
    assert!(
        message.starts_with(r#"dana edited the arguments of this call to {"cents":70000}; the edited call awaits approval"#),
        "{message}"
    );
    assert_eq!(paid.load(Ordering::SeqCst), 0);

    // erin approves the edited call; retries of the original from two
    // agents at once (two processes, as far as the store can tell) run it
    // once.
    let pending = operator.show(&to.key).await.unwrap();
    let done = operator
        .add_approval(&pending, Approval::granted_by("erin"), 1)
        .await
        .unwrap();
    assert!(matches!(done, Approving::Granted(_)), "{done:?}");
    let other = asked_again(&store, &paid);
    let (one, two) = tokio::join!(
        agent.dispatch_one(call.clone(), &run),
        other.dispatch_one(call.clone(), &run)
    );
    for result in [one, two] {
        let called = result.result.expect("the edited call's output");
        assert_eq!(called.output, json!(70_000));
        assert_eq!(called.meta.edited.unwrap().original, record.key);
    }
    assert_eq!(paid.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn edited_arguments_the_tool_does_not_take_run_nothing() {
    // JSON the approver may type, which `refund` cannot take: a u64 of
    // cents cannot be negative.
    let unfit = edit_json(json!({ "cents": -5 }));
    let (_, paid, (agent, call, run, _), _) = dana_edits("unfit", 20_000, unfit).await;
    for _ in 0..2 {
        let refused = agent.dispatch_one(call.clone(), &run).await;
        let Err(IdemError::InvalidArguments { detail, .. }) = &refused.result else {
            panic!("refused: {:?}", refused.result);
        };
        assert!(detail.contains("dana edited the arguments"), "{detail}");
        assert!(detail.ends_with("nothing ran"), "{detail}");
    }
    assert_eq!(paid.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_hostile_edit_is_refused_and_changes_nothing() {
    let store = store("hostile").await;
    let paid = Arc::new(AtomicUsize::new(0));
    let (_, _, _, record) = asked(&store, &paid, 20_000).await;
    let operator = Operator::new(store.clone());
    let huge = format!(r#"{{"cents": 1, "pad": "{}"}}"#, "x".repeat(100 * 1024));
    let hostile = [
        Arguments::Text("[1, 2]".into()),
        Arguments::Text(r#""cents""#.into()),
        Arguments::Text(r#"{"cents": NaN}"#.into()),
        Arguments::Text(r#"{"cents": 1e999}"#.into()),
        Arguments::Text(r#"{"cents": 15000"#.into()),
        Arguments::Text(huge),
        Arguments::Json(json!(null)),
        // The arguments it has: nothing to edit.
        Arguments::Json(json!({ "cents": 20_000 })),
        Arguments::Text(r#"{"cents": 20000.0}"#.into()),
    ];
    for arguments in hostile {
        let shown = format!("{arguments:?}")
            .chars()
            .take(60)
            .collect::<String>();
        let refused = operator
            .edit_record(&record, arguments, Approval::granted_by("dana"))
            .await
            .unwrap_err();
        assert!(
            matches!(refused, OperatorError::EditedArguments { .. }),
            "{shown}: {refused}"
        );
        assert!(
            refused.to_string().ends_with("nothing was changed"),
            "{refused}"
        );
        assert_eq!(operator.show(&record.key).await.unwrap(), record);
    }
    let listed = operator
        .list(&idem::operator::Filter::default(), None, 100)
        .await
        .unwrap();
    assert_eq!(listed.records.len(), 1, "no edited call was written");
}
