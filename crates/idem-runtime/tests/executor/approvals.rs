//! Irreversible calls and their approvals: the approval is recorded with
//! the call, a dispatched call needs a policy and its denial is recorded,
//! and an approval slower than the lease is asked once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::{fresh, msg, App, DeleteAccount, SendEmail};
use idem_runtime::approval::{AllowList, Approval, DenyAll};
use idem_runtime::store::{MemoryStore, Store};
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
