//! Irreversible calls and their approvals: the approval is recorded with
//! the call, a dispatched call needs a policy and its denial is recorded,
//! and an approval slower than the lease is asked once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{fresh, msg, App, DeleteAccount, SendEmail};
use idem_runtime::approval::{AllowList, Approval, DenyAll};
use idem_runtime::store::MemoryStore;
use idem_runtime::store::StoreExt;
use idem_runtime::{Executor, IdemError};

#[tokio::test]
async fn irreversible_calls_record_their_approval_and_run_once() {
    let (exec, world) = fresh();
    let approval = Approval::granted_by("alice").with_note("ticket 42");
    let out = exec
        .call_approved(DeleteAccount, msg("ada"), approval.clone())
        .call_id("c")
        .await
        .unwrap();
    let dup = exec
        .call_approved(DeleteAccount, msg("ada"), approval)
        .call_id("c")
        .await
        .unwrap();
    assert!(dup.meta.deduplicated);
    assert_eq!(world.effects(), ["delete_account:ada"]);
    let record = exec
        .store()
        .get(out.meta.key.as_ref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.steps["idem:approval"]["approver"], "alice");
}

#[tokio::test]
async fn dispatch_of_an_irreversible_tool_needs_a_policy_and_records_denials() {
    use idem_runtime::dispatch::{Arguments, Dispatcher, ToolCall};
    use idem_runtime::registry::Registry;
    use idem_runtime::RunContext;
    let call = || ToolCall {
        id: Some("toolu_1".into()),
        name: "delete_account".into(),
        arguments: Arguments::Json(serde_json::json!({"to": "ada"})),
    };
    let world = App::default();
    let registry = || Registry::new().with(DeleteAccount).with(SendEmail);
    // No policy: refused, nothing recorded, nothing ran.
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .build();
    let d = Dispatcher::new(exec, registry());
    let r = d.dispatch_one(call(), &RunContext::default()).await;
    assert!(
        matches!(r.result, Err(IdemError::ApprovalRequired { .. })),
        "{:?}",
        r.result
    );
    // Denied: recorded, so a replay does not ask again.
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .approvals(DenyAll)
        .build();
    let d = Dispatcher::new(exec, registry());
    let r1 = d.dispatch_one(call(), &RunContext::default()).await;
    let r2 = d.dispatch_one(call(), &RunContext::default()).await;
    assert!(matches!(
        r1.result,
        Err(IdemError::ApprovalDenied {
            deduplicated: false,
            ..
        })
    ));
    assert!(matches!(
        r2.result,
        Err(IdemError::ApprovalDenied {
            deduplicated: true,
            ..
        })
    ));
    assert_eq!(d.executor().metrics().approvals_requested, 1);
    // Allowed.
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .approvals(AllowList::new(["delete_account"]))
        .build();
    let d = Dispatcher::new(exec, registry());
    let r = d.dispatch_one(call(), &RunContext::default()).await;
    assert!(r.result.is_ok(), "{:?}", r.result);
    assert_eq!(world.effects(), ["delete_account:ada"]);
}

#[tokio::test]
async fn an_approval_slower_than_the_lease_is_asked_once_and_runs_once() {
    use idem_runtime::approval::{ApprovalDecision, Callback};
    use idem_runtime::dispatch::{Arguments, Dispatcher, ToolCall};
    use idem_runtime::registry::Registry;
    use idem_runtime::RunContext;

    let asked = Arc::new(AtomicUsize::new(0));
    let world = App::default();
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .lease(Duration::from_millis(150))
        .approvals(Callback::new({
            let asked = asked.clone();
            move |_| {
                asked.fetch_add(1, Ordering::SeqCst);
                async {
                    // A person takes their time: many leases long.
                    tokio::time::sleep(Duration::from_millis(800)).await;
                    Ok(ApprovalDecision::Approved(Approval::granted_by("ops")))
                }
            }
        }))
        .build();
    let d = Dispatcher::new(exec, Registry::new().with(DeleteAccount));
    let call = || ToolCall {
        id: Some("toolu_1".into()),
        name: "delete_account".into(),
        arguments: Arguments::Json(serde_json::json!({"to": "ada"})),
    };
    let first = tokio::spawn({
        let d = d.clone();
        async move { d.dispatch_one(call(), &RunContext::default()).await }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The model repeats the call while the person is still deciding.
    let second = d.dispatch_one(call(), &RunContext::default()).await;
    let first = first.await.unwrap();
    assert!(first.result.is_ok(), "{:?}", first.result);
    assert!(second.result.is_ok(), "{:?}", second.result);
    assert!(second.deduplicated());
    assert_eq!(first.content(), second.content());
    assert_eq!(asked.load(Ordering::SeqCst), 1, "the policy is asked once");
    assert_eq!(world.effects(), ["delete_account:ada"], "it runs once");
}

/// A two-person rule through the operator API: the first approval is
/// recorded and runs nothing, the same approver again and a decision on
/// the version before it are refused, the second distinct approval runs
/// the call once, and the audit log has both.
#[tokio::test]
async fn a_call_needing_two_approvals_runs_on_the_second_distinct_one() {
    use idem_runtime::approval::{ApprovalDecision, Callback};
    use idem_runtime::audit::AuditQuery;
    use idem_runtime::dispatch::{Arguments, Dispatcher, ToolCall};
    use idem_runtime::operator::{Approving, OperatorError};
    use idem_runtime::record::{AuditAction, Status};
    use idem_runtime::registry::Registry;
    use idem_runtime::RunContext;
    let call = || ToolCall {
        id: Some("toolu_2".into()),
        name: "delete_account".into(),
        arguments: Arguments::Json(serde_json::json!({"to": "ada"})),
    };
    let world = App::default();
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .approvals(Callback::new(|_| async {
            Ok(ApprovalDecision::Pending {
                message: "two of finance".into(),
            })
        }))
        .build();
    let operator = exec.operator();
    let d = Dispatcher::new(exec, Registry::new().with(DeleteAccount));
    let first = d.dispatch_one(call(), &RunContext::default()).await;
    let Err(IdemError::ApprovalPending { key, .. }) = first.result else {
        panic!("{:?}", first.result)
    };
    let asked = operator.show(&key).await.unwrap();

    let one = operator
        .add_approval(&asked, Approval::granted_by("ana").with_note("ok"), 2)
        .await
        .unwrap();
    let Approving::Recorded {
        record,
        given: 1,
        required: 2,
    } = &one
    else {
        panic!("{one:?}")
    };
    assert_eq!(record.status(), Status::AwaitingApproval);
    assert_eq!(record.approvals()[0].approval.approver, "ana");
    assert_eq!(
        record.approvals()[0].approval.fingerprint.as_ref(),
        Some(&record.fingerprint)
    );
    let again = d.dispatch_one(call(), &RunContext::default()).await;
    assert!(matches!(
        again.result,
        Err(IdemError::ApprovalPending { .. })
    ));
    assert!(
        world.effects().is_empty(),
        "one approval of two runs nothing"
    );

    let twice = operator
        .add_approval(record, Approval::granted_by("ana"), 2)
        .await
        .unwrap_err();
    assert!(
        matches!(&twice, OperatorError::ApprovedBefore { by, given: 1, required: 2, .. } if by == "ana"),
        "{twice}"
    );
    let stale = operator
        .add_approval(&asked, Approval::granted_by("bob"), 2)
        .await
        .unwrap_err();
    assert!(matches!(stale, OperatorError::Changed { .. }), "{stale}");

    let two = operator
        .add_approval(record, Approval::granted_by("bob"), 2)
        .await
        .unwrap();
    assert!(matches!(&two, Approving::Granted(r) if r.status() == Status::Approved));
    let ran = d.dispatch_one(call(), &RunContext::default()).await;
    assert!(ran.result.is_ok(), "{:?}", ran.result);
    assert_eq!(world.effects(), ["delete_account:ada"]);

    let log = operator
        .audit(&AuditQuery::for_key(key), None, 100)
        .await
        .unwrap();
    let actions: Vec<(AuditAction, &str)> = log
        .events
        .iter()
        .map(|e| (e.action, e.by.as_str()))
        .collect();
    assert_eq!(
        actions,
        [
            (AuditAction::ApprovalAdded, "ana"),
            (AuditAction::Approved, "bob")
        ]
    );
}

/// A call whose key awaits a person's decision, answered so on the
/// caller's thread (the memory store answers every claim there), waits
/// for the decision when it may, as a call whose claim went to the store
/// does: both callers run nothing until the approval, and the tool runs
/// once after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_of_a_key_awaiting_approval_wait_for_it_and_it_runs_once() {
    use idem_runtime::approval::{ApprovalDecision, Callback};
    use idem_runtime::dispatch::{Arguments, Dispatcher, ToolCall};
    use idem_runtime::registry::Registry;
    use idem_runtime::RunContext;

    let world = App::default();
    let patience = Duration::from_secs(10);
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .approval_wait(patience)
        .approvals(Callback::new(|_| async {
            Ok(ApprovalDecision::Pending {
                message: "a person decides".into(),
            })
        }))
        .build();
    let d = Dispatcher::new(exec.clone(), Registry::new().with(DeleteAccount));
    let call = ToolCall {
        id: Some("toolu_1".into()),
        name: "delete_account".into(),
        arguments: Arguments::Json(serde_json::json!({"to": "ada"})),
    };
    let agent = tokio::spawn(async move { d.dispatch_one(call, &RunContext::default()).await });
    let key = loop {
        let page = exec.store().scan_open(None, 10).await.unwrap();
        if let Some(record) = page.records.first() {
            break record.key.clone();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let typed = tokio::spawn({
        let exec = exec.clone();
        async move {
            exec.call_approved(DeleteAccount, msg("ada"), Approval::granted_by("the agent"))
                .call_id("toolu_1")
                .wait_for_approval(patience)
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !agent.is_finished() && !typed.is_finished(),
        "a caller gave up on the pending approval"
    );
    assert!(world.effects().is_empty(), "nothing runs before a decision");

    exec.approve(&key, Approval::granted_by("ops"))
        .await
        .unwrap();
    let agent = agent.await.unwrap();
    let typed = typed.await.unwrap();
    assert!(agent.result.is_ok(), "{:?}", agent.result);
    assert!(typed.is_ok(), "{typed:?}");
    assert_eq!(world.effects(), ["delete_account:ada"], "it runs once");
}
