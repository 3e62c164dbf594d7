//! Approvals that wait for a person, and what an operator settles: through
//! the dispatcher, the executor and the operator API, as an application
//! uses them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem::approval::{ApprovalDecision, Callback};
use idem::clock::ManualClock;
use idem::dispatch::{Arguments, ToolCall, ToolResult};
use idem::operator::{Actor, Filter, OperatorError, Resolution};
use idem::prelude::*;
use idem::record::{AuditAction, Status};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Default)]
struct Bank {
    refunds: AtomicUsize,
    tickets: AtomicUsize,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Refund {
    charge: String,
    cents: u64,
}

/// Refund a charge: money leaves, so a person approves it.
#[idem::tool(class = "irreversible")]
async fn refund(args: Refund, State(bank): State<Arc<Bank>>) -> Result<String, ToolError> {
    let n = bank.refunds.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("re_{n} for {} ({} cents)", args.charge, args.cents))
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Ticket {
    title: String,
}

/// Open a ticket in a system without idempotency keys; it answers slowly.
#[idem::tool(class = "non_idempotent_write", timeout = "50ms")]
async fn open_ticket(args: Ticket, State(bank): State<Arc<Bank>>) -> Result<u64, ToolError> {
    bank.tickets.fetch_add(1, Ordering::SeqCst);
    if args.title.contains("slow") {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    Ok(7)
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Login {
    user: String,
    password: String,
}

/// Log a user in somewhere; the password must not be kept in the store.
#[idem::tool(class = "non_idempotent_write", store_args = false)]
async fn log_in(args: Login) -> Result<String, ToolError> {
    Ok(format!("session for {}", args.user))
}

/// A policy that leaves every refund to a person, counting how often it is
/// asked.
fn ask_a_person(asked: Arc<AtomicUsize>) -> Callback {
    Callback::new(move |_req| {
        asked.fetch_add(1, Ordering::SeqCst);
        async {
            Ok(ApprovalDecision::Pending {
                message: "refunds need a person: ask #payments".into(),
            })
        }
    })
}

struct Setup {
    bank: Arc<Bank>,
    asked: Arc<AtomicUsize>,
    exec: Executor<Arc<Bank>>,
    dispatcher: Dispatcher<Arc<Bank>>,
}

fn setup(store: Arc<dyn Store>, wait: Duration) -> Setup {
    let bank = Arc::new(Bank::default());
    let asked = Arc::new(AtomicUsize::new(0));
    let exec = Executor::builder_shared(store)
        .state(bank.clone())
        .approvals(ask_a_person(asked.clone()))
        .approval_wait(wait)
        .approval_ttl(Duration::from_secs(3600))
        .worker("worker-1")
        .build();
    let dispatcher = Dispatcher::new(exec.clone(), idem::tools![refund, open_ticket]);
    Setup {
        bank,
        asked,
        exec,
        dispatcher,
    }
}

fn refund_call() -> ToolCall {
    ToolCall {
        id: Some("call_refund_1".into()),
        name: "refund".into(),
        arguments: Arguments::Text(r#"{"charge":"ch_42","cents":1999}"#.into()),
    }
}

fn run() -> RunContext {
    RunContext::new("run-7", 3).namespace(Namespace::new("acme").unwrap())
}

fn key_of(result: &ToolResult) -> IdempotencyKey {
    match &result.result {
        Err(IdemError::ApprovalPending { key, .. }) => key.clone(),
        Ok(out) => out.meta.key.clone().unwrap(),
        other => panic!("expected a keyed result, got {other:?}"),
    }
}

#[tokio::test]
async fn a_pending_approval_is_recorded_and_the_model_is_told_nothing_ran() {
    let s = setup(Arc::new(MemoryStore::new()), Duration::ZERO);
    let first = s.dispatcher.dispatch_one(refund_call(), &run()).await;
    assert!(first.is_error());
    let content = first.content();
    assert_eq!(content["error"]["code"], "approval_pending");
    let message = content["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("awaits approval") && message.contains("ask #payments"),
        "{message}"
    );
    assert_eq!(s.bank.refunds.load(Ordering::SeqCst), 0);

    // The model retries before anyone decided: still pending, and the
    // policy is not asked again.
    let retry = s.dispatcher.dispatch_one(refund_call(), &run()).await;
    assert!(matches!(
        retry.result,
        Err(IdemError::ApprovalPending { .. })
    ));
    assert_eq!(s.asked.load(Ordering::SeqCst), 1);

    let pending = s.exec.pending(&Filter::default()).await.unwrap();
    assert_eq!(pending.len(), 1);
    let record = &pending[0];
    assert_eq!(record.key, key_of(&first));
    assert_eq!(record.tool, "refund");
    assert_eq!(record.status(), Status::AwaitingApproval);
    assert_eq!(record.info.namespace.as_deref(), Some("acme"));
    assert_eq!(record.info.call_id.as_deref(), Some("call_refund_1"));
    assert_eq!(record.info.run_id.as_deref(), Some("run-7"));
    assert_eq!(record.info.step, Some(3));
    assert_eq!(
        record.info.args.as_deref(),
        Some(r#"{"cents":1999,"charge":"ch_42"}"#)
    );
    assert_eq!(record.worker.as_deref(), Some("worker-1"));
}

/// Why a call was made, in the caller's words: given with a typed call
/// (`CallBuilder::reason`) or a batch (`RunContext::reason`), recorded with
/// the first claim, handed to the approval policy, never part of the key.
#[tokio::test]
async fn the_reason_a_call_gives_is_recorded_once_and_shown_to_the_policy() {
    let s = setup(Arc::new(MemoryStore::new()), Duration::ZERO);
    let ticket = |why: &str| {
        let title = "printer on fire".to_owned();
        s.exec
            .call(open_ticket, Ticket { title })
            .call_id("call_ticket_1")
            .reason(why)
    };
    let first = ticket("The user said the printer is on fire.")
        .await
        .unwrap();
    // A retry in other words is the same call: answered, not re-run.
    let again = ticket("Retrying to be sure.").await.unwrap();
    assert!(again.meta.deduplicated);
    assert_eq!(s.bank.tickets.load(Ordering::SeqCst), 1);
    let record = s
        .exec
        .store()
        .get(first.meta.key.as_ref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.info.reason.as_ref().map(|r| r.as_str()),
        Some("The user said the printer is on fire.")
    );

    // The policy that asks a person is handed the reason.
    let seen = Arc::new(std::sync::Mutex::new(None));
    let exec = Executor::builder(MemoryStore::new())
        .state(s.bank.clone())
        .approvals(Callback::new({
            let seen = seen.clone();
            move |req| {
                *seen.lock().unwrap() = req.reason.clone();
                async {
                    Ok(ApprovalDecision::Pending {
                        message: "ask #payments".into(),
                    })
                }
            }
        }))
        .approval_wait(Duration::ZERO)
        .build();
    let dispatcher = Dispatcher::new(exec.clone(), idem::tools![refund]);
    let why = "The customer was charged twice for order 17.";
    let pending = dispatcher
        .dispatch_one(refund_call(), &run().reason(why))
        .await;
    assert!(matches!(
        pending.result,
        Err(IdemError::ApprovalPending { .. })
    ));
    assert_eq!(seen.lock().unwrap().as_ref().map(|r| r.as_str()), Some(why));
    let record = &exec.pending(&Filter::default()).await.unwrap()[0];
    assert_eq!(record.info.reason.as_ref().map(|r| r.as_str()), Some(why));
    assert_eq!(s.bank.refunds.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn after_an_approval_the_next_call_runs_exactly_once() {
    let s = setup(Arc::new(MemoryStore::new()), Duration::ZERO);
    let first = s.dispatcher.dispatch_one(refund_call(), &run()).await;
    let key = key_of(&first);

    let approved = s
        .exec
        .approve(
            &key,
            Approval::granted_by("ana").with_note("customer called, ticket 88"),
        )
        .await
        .unwrap();
    assert_eq!(approved.status(), Status::Approved);
    // A second approval is refused and changes nothing.
    match s.exec.approve(&key, Approval::granted_by("bo")).await {
        Err(OperatorError::AlreadyApproved { by, .. }) => assert_eq!(by, "ana"),
        other => panic!("expected AlreadyApproved, got {other:?}"),
    }

    let resumed = s.dispatcher.dispatch_one(refund_call(), &run()).await;
    assert_eq!(resumed.content(), json!("re_1 for ch_42 (1999 cents)"));
    assert!(!resumed.deduplicated());
    let again = s.dispatcher.dispatch_one(refund_call(), &run()).await;
    assert!(again.deduplicated());
    assert_eq!(again.content(), resumed.content());
    assert_eq!(s.bank.refunds.load(Ordering::SeqCst), 1);
    assert_eq!(
        s.asked.load(Ordering::SeqCst),
        1,
        "the person is asked once"
    );

    let record = s.exec.operator().show(&key).await.unwrap();
    assert_eq!(record.status(), Status::Succeeded);
    assert_eq!(record.audit.len(), 1);
    assert_eq!(record.audit[0].by, "ana");
    assert_eq!(record.audit[0].action, AuditAction::Approved);
    assert_eq!(
        record.audit[0].reason.as_deref(),
        Some("customer called, ticket 88")
    );
    assert_eq!(record.approval().unwrap().approver, "ana");
    // Approving a call that already ran is refused.
    assert!(matches!(
        s.exec.approve(&key, Approval::granted_by("bo")).await,
        Err(OperatorError::NotPending {
            status: Status::Succeeded,
            ..
        })
    ));
}

#[tokio::test]
async fn a_denial_is_recorded_and_every_later_call_gets_its_reason() {
    let s = setup(Arc::new(MemoryStore::new()), Duration::ZERO);
    let key = key_of(&s.dispatcher.dispatch_one(refund_call(), &run()).await);
    s.exec
        .deny(&key, "ana", "the charge was already refunded by hand")
        .await
        .unwrap();
    for _ in 0..2 {
        let later = s.dispatcher.dispatch_one(refund_call(), &run()).await;
        match &later.result {
            Err(IdemError::ApprovalDenied {
                reason,
                deduplicated: true,
                ..
            }) => assert_eq!(reason, "the charge was already refunded by hand"),
            other => panic!("expected the recorded denial, got {other:?}"),
        }
    }
    assert_eq!(s.bank.refunds.load(Ordering::SeqCst), 0);
    assert!(matches!(
        s.exec.deny(&key, "bo", "again").await,
        Err(OperatorError::NotPending {
            status: Status::Failed,
            ..
        })
    ));
    let record = s.exec.operator().show(&key).await.unwrap();
    assert_eq!(record.audit[0].action, AuditAction::Denied);
}

/// A refund whose caller waits (30 s) for a person, and the operator on
/// its store that found it pending, with its key.
async fn a_refund_waiting_for_an_operator() -> (
    Setup,
    tokio::task::JoinHandle<ToolResult>,
    idem::operator::Operator,
    IdempotencyKey,
) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let s = setup(store.clone(), Duration::from_secs(30));
    let dispatcher = s.dispatcher.clone();
    let waiting = tokio::spawn(async move { dispatcher.dispatch_one(refund_call(), &run()).await });
    let operator = idem::operator::Operator::new(store);
    let key = loop {
        if let Some(r) = operator.pending(&Filter::default()).await.unwrap().pop() {
            break r.key;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    (s, waiting, operator, key)
}

#[tokio::test]
async fn a_waiting_caller_runs_once_approved_from_elsewhere() {
    // Another part of the system (here: an operator on the same store)
    // finds the request and approves it.
    let (s, waiting, operator, key) = a_refund_waiting_for_an_operator().await;
    assert_eq!(s.bank.refunds.load(Ordering::SeqCst), 0);
    operator
        .approve(&key, Approval::granted_by("ana"))
        .await
        .unwrap();
    let result = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiting caller resumes")
        .unwrap();
    assert_eq!(result.content(), json!("re_1 for ch_42 (1999 cents)"));
    assert_eq!(s.bank.refunds.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_waiting_caller_gets_a_denial_and_a_timeout_returns_pending() {
    let (_, waiting, operator, key) = a_refund_waiting_for_an_operator().await;
    operator
        .deny(&key, "ana", "not without the customer's consent")
        .await
        .unwrap();
    let result = waiting.await.unwrap();
    match &result.result {
        Err(IdemError::ApprovalDenied { reason, .. }) => {
            assert_eq!(reason, "not without the customer's consent")
        }
        other => panic!("expected the denial, got {other:?}"),
    }

    // Nobody answers within the wait: the call returns pending.
    let short = setup(operator.store().clone(), Duration::from_millis(100));
    let mut other = refund_call();
    other.id = Some("call_refund_2".into());
    let started = std::time::Instant::now();
    let result = short.dispatcher.dispatch_one(other, &run()).await;
    assert!(matches!(
        result.result,
        Err(IdemError::ApprovalPending { .. })
    ));
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(short.bank.refunds.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_unanswered_request_lapses_and_a_later_call_asks_again() {
    let clock = ManualClock::new(1_764_460_800_000);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let s = setup(store, Duration::ZERO);
    let key = key_of(&s.dispatcher.dispatch_one(refund_call(), &run()).await);
    clock.advance(Duration::from_secs(3601));
    assert!(matches!(
        s.exec.approve(&key, Approval::granted_by("ana")).await,
        Err(OperatorError::NotFound { .. })
    ));
    let again = s.dispatcher.dispatch_one(refund_call(), &run()).await;
    assert!(matches!(
        again.result,
        Err(IdemError::ApprovalPending { .. })
    ));
    assert_eq!(s.asked.load(Ordering::SeqCst), 2);
}

fn ticket_call(title: &str) -> ToolCall {
    ToolCall {
        id: Some(format!("call_{title}")),
        name: "open_ticket".into(),
        arguments: Arguments::Json(json!({ "title": title })),
    }
}

#[tokio::test]
async fn an_unknown_outcome_settled_by_an_operator_answers_the_next_duplicate() {
    let s = setup(Arc::new(MemoryStore::new()), Duration::ZERO);
    let timed_out = s
        .dispatcher
        .dispatch_one(ticket_call("slow printer"), &run())
        .await;
    assert!(matches!(
        timed_out.result,
        Err(IdemError::Tool { .. } | IdemError::OutcomeUnknown { .. })
    ));
    let operator = s.exec.operator();
    let unknown = operator
        .list(&Filter::status(Status::Unknown), None, 10)
        .await
        .unwrap();
    assert_eq!(unknown.records.len(), 1);
    let key = unknown.records[0].key.clone();
    // By a unique prefix, as a person types it.
    assert_eq!(operator.find(&key.as_str()[..8]).await.unwrap(), key);

    let settled = operator
        .resolve(
            &key,
            Resolution::Succeeded(json!(7)),
            &Actor::new("ana").because("ticket 7 exists in the tracker"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(settled.status(), Status::Succeeded);
    let duplicate = s
        .dispatcher
        .dispatch_one(ticket_call("slow printer"), &run())
        .await;
    assert!(duplicate.deduplicated());
    assert_eq!(duplicate.content(), json!(7));
    assert_eq!(s.bank.tickets.load(Ordering::SeqCst), 1);
    // A settled outcome is never overwritten.
    assert!(matches!(
        operator
            .resolve(&key, Resolution::Release, &Actor::new("bo"))
            .await,
        Err(OperatorError::AlreadySettled { .. })
    ));
    let record = operator.show(&key).await.unwrap();
    assert_eq!(record.audit[0].action, AuditAction::ResolvedSucceeded);
    assert_eq!(
        record.audit[0].reason.as_deref(),
        Some("ticket 7 exists in the tracker")
    );
}

#[tokio::test]
async fn a_released_unknown_outcome_runs_again_and_a_live_call_is_never_overruled() {
    let s = setup(Arc::new(MemoryStore::new()), Duration::ZERO);
    s.dispatcher
        .dispatch_one(ticket_call("slow fax"), &run())
        .await;
    let operator = s.exec.operator();
    let key = operator
        .list(&Filter::status(Status::Unknown), None, 10)
        .await
        .unwrap()
        .records[0]
        .key
        .clone();
    let released = operator
        .resolve(
            &key,
            Resolution::Release,
            &Actor::new("ana").because("the tracker has no such ticket"),
        )
        .await
        .unwrap();
    assert_eq!(released, None);
    assert!(matches!(
        operator.show(&key).await,
        Err(OperatorError::NotFound { .. })
    ));

    // A call in flight under a live lease cannot be settled or deleted.
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let slow = setup(store.clone(), Duration::ZERO);
    let mut call = ticket_call("slow again");
    call.id = Some("call_live".into());
    let exec = Executor::builder_shared(store.clone())
        .state(slow.bank.clone())
        .build();
    let dispatcher = Dispatcher::new(exec.clone(), idem::tools![open_ticket]);
    let running = tokio::spawn(async move { dispatcher.dispatch_one(call, &run()).await });
    let operator = exec.operator();
    let key = loop {
        let page = operator
            .list(&Filter::status(Status::InFlight), None, 10)
            .await
            .unwrap();
        if let Some(r) = page.records.first() {
            break r.key.clone();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert!(matches!(
        operator
            .resolve(&key, Resolution::Failed("no".into()), &Actor::new("bo"))
            .await,
        Err(OperatorError::LiveLease { .. })
    ));
    assert!(matches!(
        operator.delete(&key, &Actor::new("bo")).await,
        Err(OperatorError::LiveLease { .. })
    ));
    running.await.unwrap();
    let counts = operator.counts().await.unwrap();
    assert_eq!(counts.by_status.get(&Status::Unknown), Some(&1));
    assert_eq!(counts.total, 1);
}

#[tokio::test]
async fn a_tool_can_keep_its_arguments_out_of_the_store() {
    let exec = Executor::builder(MemoryStore::new()).build();
    let login = Login {
        user: "ana".into(),
        password: "hunter2".into(),
    };
    let out = exec
        .call(log_in, login)
        .call_id("call_login")
        .await
        .unwrap();
    let record = exec
        .operator()
        .show(out.meta.key.as_ref().unwrap())
        .await
        .unwrap();
    assert_eq!(record.info.args, None);
    assert_eq!(record.info.call_id.as_deref(), Some("call_login"));
    assert!(!format!("{record:?}").contains("hunter2"));
}

/// A policy's decisions are in the store's audit log too: who decided
/// (the policy's name), what, and the state before and after.
#[tokio::test]
async fn a_policys_approvals_and_denials_are_in_the_audit_log() {
    use idem::approval::{AllowList, DenyAll};
    use idem::audit::AuditQuery;

    for (action, after) in [
        (AuditAction::ApprovedByPolicy, Status::InFlight),
        (AuditAction::DeniedByPolicy, Status::Failed),
    ] {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let bank = Arc::new(Bank::default());
        let mut builder = Executor::builder_shared(store.clone()).state(bank.clone());
        builder = match action {
            AuditAction::ApprovedByPolicy => builder.approvals(AllowList::new(["refund"])),
            _ => builder.approvals(DenyAll),
        };
        let dispatcher = Dispatcher::new(builder.build(), idem::tools![refund]);
        let result = dispatcher.dispatch_one(refund_call(), &run()).await;
        let key = match (&result.result, action) {
            (Ok(out), AuditAction::ApprovedByPolicy) => out.meta.key.clone().unwrap(),
            (Err(IdemError::ApprovalDenied { .. }), AuditAction::DeniedByPolicy) => {
                store.scan(None, 10).await.unwrap().records[0].key.clone()
            }
            (other, _) => panic!("{action}: {other:?}"),
        };
        let log = store
            .audit(&AuditQuery::for_key(key), None, 10)
            .await
            .unwrap()
            .events;
        assert_eq!(log.len(), 1, "{log:?}");
        assert_eq!(log[0].action, action);
        assert_eq!(
            (log[0].before, log[0].after),
            (Some(Status::InFlight), Some(after))
        );
        assert_eq!(log[0].tool, "refund");
        assert!(!log[0].by.is_empty());
    }
}
