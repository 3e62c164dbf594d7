//! Writes that carry no key, keyed by a repeat window (`RepeatWindow`):
//! the same tool with the same arguments within the window of the first
//! call is one effect, whatever a clock boundary says; a deliberate repeat
//! is another; a call with other arguments in between ends the window; an
//! effect not settled (of unknown outcome, awaiting approval) holds it open
//! however late the repeat comes. Effects are counted by the tools.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem::approval::{ApprovalDecision, Callback};
use idem::clock::ManualClock;
use idem::dispatch::{Arguments, ToolCall, ToolResult};
use idem::prelude::*;
use idem::RepeatWindow;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Default)]
struct Outbox {
    emails: AtomicUsize,
    refunds: AtomicUsize,
    statuses: std::sync::Mutex<Vec<String>>,
    charges: AtomicUsize,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Email {
    to: String,
    body: String,
}

/// Send an email.
#[idem::tool(class = "non_idempotent_write")]
async fn send_email(args: Email, State(outbox): State<Arc<Outbox>>) -> Result<String, ToolError> {
    let n = outbox.emails.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!("email #{n} to {}", args.to))
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Refund {
    charge: String,
}

/// Refund a charge.
#[idem::tool(class = "irreversible")]
async fn refund(args: Refund, State(outbox): State<Arc<Outbox>>) -> Result<String, ToolError> {
    outbox.refunds.fetch_add(1, Ordering::SeqCst);
    Ok(format!("refunded {}", args.charge))
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Status {
    status: String,
}

/// Set a ticket's status.
#[idem::tool(class = "idempotent_write")]
async fn set_status(args: Status, State(outbox): State<Arc<Outbox>>) -> Result<String, ToolError> {
    outbox.statuses.lock().unwrap().push(args.status.clone());
    Ok(format!("status {}", args.status))
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Charge {
    cents: u64,
}

/// Charge a card through a provider without idempotency keys; a charge
/// of 4900 cents is accepted and then times out, so its outcome is unknown.
#[idem::tool(class = "non_idempotent_write", timeout = "50ms")]
async fn charge_card(args: Charge, State(outbox): State<Arc<Outbox>>) -> Result<String, ToolError> {
    outbox.charges.fetch_add(1, Ordering::SeqCst);
    if args.cents == 4900 {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    Ok(format!("charged {}", args.cents))
}

const WINDOW: Duration = Duration::from_secs(600);
/// 2026-12-01 00:00:00 UTC, a multiple of the window.
const MIDNIGHT_MS: u64 = 1_796_083_200_000;

struct World {
    clock: Arc<ManualClock>,
    outbox: Arc<Outbox>,
    asked: Arc<AtomicUsize>,
    exec: Executor<Arc<Outbox>>,
    dispatcher: Dispatcher<Arc<Outbox>>,
}

/// A world whose clock reads `start_ms`, on one in-memory store sharing it.
fn world(start_ms: u64) -> World {
    let clock = Arc::new(ManualClock::new(start_ms));
    let outbox = Arc::new(Outbox::default());
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let exec = Executor::builder(MemoryStore::with_clock(clock.clone()))
        .clock(clock.clone())
        .state(outbox.clone())
        .approvals(Callback::new(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            async {
                Ok(ApprovalDecision::Pending {
                    message: "a person decides".into(),
                })
            }
        }))
        .build();
    let dispatcher = Dispatcher::new(
        exec.clone(),
        idem::tools![send_email, refund, set_status, charge_card],
    );
    World {
        clock,
        outbox,
        asked,
        exec,
        dispatcher,
    }
}

fn unkeyed(name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: None,
        name: name.into(),
        arguments: Arguments::Text(arguments.into()),
    }
}

fn windowed(repeat: u32) -> RunContext {
    RunContext::default().repeat_window(RepeatWindow::new(WINDOW).repeat(repeat))
}

const EMAIL: &str = r#"{"to":"ada@example.com","body":"Your refund is on its way."}"#;

impl World {
    async fn email(&self, repeat: u32) -> ToolResult {
        self.dispatcher
            .dispatch_one(unkeyed("send_email", EMAIL), &windowed(repeat))
            .await
    }

    fn emails(&self) -> usize {
        self.outbox.emails.load(Ordering::SeqCst)
    }
}

fn output(result: &ToolResult) -> String {
    match &result.result {
        Ok(called) => called.output.as_str().unwrap().to_owned(),
        Err(e) => panic!("expected an output, got {e}"),
    }
}

#[tokio::test]
async fn without_a_window_an_unkeyed_write_is_refused_and_nothing_runs() {
    let w = world(MIDNIGHT_MS);
    let result = w
        .dispatcher
        .dispatch_one(unkeyed("send_email", EMAIL), &RunContext::default())
        .await;
    assert_eq!(result.content()["error"]["code"], "invalid_key");
    assert_eq!(w.emails(), 0);
}

#[tokio::test]
async fn the_same_call_within_the_window_is_one_effect() {
    let w = world(MIDNIGHT_MS + 1_000);
    let first = w.email(0).await;
    assert_eq!(output(&first), "email #1 to ada@example.com");
    assert!(!first.deduplicated());
    w.clock.advance(Duration::from_secs(599));
    let again = w.email(0).await;
    assert_eq!(output(&again), "email #1 to ada@example.com");
    assert!(again.deduplicated());
    assert_eq!(w.emails(), 1);
}

#[tokio::test]
async fn a_retry_across_a_clock_boundary_is_still_one_effect() {
    // One second before a window boundary, and the retry two seconds
    // later: a clock bucket would split them.
    let w = world(MIDNIGHT_MS + WINDOW.as_millis() as u64 - 1_000);
    let first = w.email(0).await;
    w.clock.advance(Duration::from_secs(2));
    let retry = w.email(0).await;
    assert!(retry.deduplicated(), "{:?}", retry.result);
    assert_eq!(output(&retry), output(&first));
    // And one a little under a window after the first, two windows on.
    w.clock.advance(Duration::from_secs(597));
    assert!(w.email(0).await.deduplicated());
    assert_eq!(w.emails(), 1);
}

#[tokio::test]
async fn the_window_is_measured_from_the_first_call() {
    let w = world(MIDNIGHT_MS + 300_000);
    w.email(0).await;
    // 600 s after the first call (which finished at once): a new effect.
    w.clock.advance(WINDOW);
    let later = w.email(0).await;
    assert!(!later.deduplicated());
    assert_eq!(output(&later), "email #2 to ada@example.com");
    assert_eq!(w.emails(), 2);
}

#[tokio::test]
async fn a_deliberate_repeat_is_its_own_effect_and_deduplicated_too() {
    let w = world(MIDNIGHT_MS);
    w.email(0).await;
    let second = w.email(1).await;
    assert_eq!(output(&second), "email #2 to ada@example.com");
    let second_again = w.email(1).await;
    assert!(second_again.deduplicated());
    assert_eq!(output(&second_again), "email #2 to ada@example.com");
    assert_ne!(
        first_key(&second),
        first_key(&w.email(0).await),
        "the repeat has a key of its own"
    );
    assert_eq!(w.emails(), 2);
}

fn first_key(result: &ToolResult) -> IdempotencyKey {
    result.meta().and_then(|m| m.key.clone()).expect("a key")
}

#[tokio::test]
async fn other_arguments_are_another_effect() {
    let w = world(MIDNIGHT_MS);
    w.email(0).await;
    let other = w
        .dispatcher
        .dispatch_one(
            unkeyed("send_email", r#"{"to":"bob@example.com","body":"Hi"}"#),
            &windowed(0),
        )
        .await;
    assert_eq!(output(&other), "email #2 to bob@example.com");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_identical_calls_are_one_effect() {
    let w = world(MIDNIGHT_MS + 5_000);
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let dispatcher = w.dispatcher.clone();
        calls.spawn(async move {
            dispatcher
                .dispatch_one(unkeyed("send_email", EMAIL), &windowed(0))
                .await
        });
    }
    let results = calls.join_all().await;
    assert_eq!(w.emails(), 1);
    for result in &results {
        assert_eq!(output(result), "email #1 to ada@example.com");
    }
    assert_eq!(results.iter().filter(|r| !r.deduplicated()).count(), 1);
}

#[tokio::test]
async fn a_pending_approval_is_asked_once_across_a_window_boundary_and_runs_once() {
    let w = world(MIDNIGHT_MS + WINDOW.as_millis() as u64 - 1_000);
    let call = || unkeyed("refund", r#"{"charge":"ch_42"}"#);
    let first = w.dispatcher.dispatch_one(call(), &windowed(0)).await;
    let Err(IdemError::ApprovalPending { key, .. }) = &first.result else {
        panic!("expected a pending approval, got {:?}", first.result);
    };
    // The model asks again in the next window: the same request, not a
    // second one for the person to decide.
    w.clock.advance(Duration::from_secs(5));
    let again = w.dispatcher.dispatch_one(call(), &windowed(0)).await;
    let Err(IdemError::ApprovalPending { key: same, .. }) = &again.result else {
        panic!("expected the same pending approval, got {:?}", again.result);
    };
    assert_eq!(same, key);
    assert_eq!(w.asked.load(Ordering::SeqCst), 1);

    w.exec
        .approve(key, Approval::granted_by("ops@example.com"))
        .await
        .unwrap();
    w.clock.advance(Duration::from_secs(60));
    let ran = w.dispatcher.dispatch_one(call(), &windowed(0)).await;
    assert_eq!(output(&ran), "refunded ch_42");
    let answered = w.dispatcher.dispatch_one(call(), &windowed(0)).await;
    assert!(answered.deduplicated());
    assert_eq!(w.outbox.refunds.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_call_id_or_a_run_keys_the_call_and_the_window_does_not() {
    let w = world(MIDNIGHT_MS);
    let with_id = |id: &str| ToolCall {
        id: Some(id.into()),
        ..unkeyed("send_email", EMAIL)
    };
    w.dispatcher
        .dispatch_one(with_id("call_1"), &windowed(0))
        .await;
    w.dispatcher
        .dispatch_one(with_id("call_2"), &windowed(0))
        .await;
    assert_eq!(w.emails(), 2, "a caller's key means what it says");
}

impl World {
    async fn call(&self, name: &str, arguments: &str) -> ToolResult {
        self.dispatcher
            .dispatch_one(unkeyed(name, arguments), &windowed(0))
            .await
    }

    fn statuses(&self) -> Vec<String> {
        self.outbox.statuses.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn an_idempotent_write_is_one_effect_until_a_call_with_other_arguments() {
    let w = world(MIDNIGHT_MS);
    let open = r#"{"status":"open"}"#;
    let closed = r#"{"status":"closed"}"#;
    w.call("set_status", open).await;
    let again = w.call("set_status", open).await;
    assert!(again.deduplicated(), "sent twice to be sure: one effect");
    assert_eq!(w.statuses(), ["open"]);

    w.clock.advance(Duration::from_secs(5));
    assert!(!w.call("set_status", closed).await.deduplicated());
    let reopened = w.call("set_status", open).await;
    assert!(
        !reopened.deduplicated(),
        "closed came in between: open again is a new effect"
    );
    assert_eq!(output(&reopened), "status open");
    assert!(w.call("set_status", open).await.deduplicated());
    assert_eq!(w.statuses(), ["open", "closed", "open"]);
}

#[tokio::test]
async fn other_arguments_of_another_tool_do_not_end_a_window() {
    let w = world(MIDNIGHT_MS);
    w.email(0).await;
    w.call("set_status", r#"{"status":"open"}"#).await;
    assert!(w.email(0).await.deduplicated());
    assert_eq!(w.emails(), 1);
}

#[tokio::test]
async fn an_unknown_outcome_holds_its_window_open_however_late_and_whatever_came_between() {
    let w = world(MIDNIGHT_MS);
    let unsure = r#"{"cents":4900}"#;
    let first = w.call("charge_card", unsure).await;
    let Err(IdemError::OutcomeUnknown { key, .. }) = &first.result else {
        panic!("expected an unknown outcome, got {:?}", first.result);
    };
    // Two windows later, with a sweep: still the same unknown effect.
    w.clock.advance(WINDOW * 2);
    w.exec.store().sweep().await.unwrap();
    let late = w.call("charge_card", unsure).await;
    let Err(IdemError::OutcomeUnknown { key: same, .. }) = &late.result else {
        panic!("expected the same unknown outcome, got {:?}", late.result);
    };
    assert_eq!(same, key);
    // Another charge in between ends no unsettled window.
    assert_eq!(
        output(&w.call("charge_card", r#"{"cents":990}"#).await),
        "charged 990"
    );
    let after = w.call("charge_card", unsure).await;
    assert!(
        matches!(&after.result, Err(IdemError::OutcomeUnknown { key: k, .. }) if k == key),
        "{:?}",
        after.result
    );
    assert_eq!(
        w.outbox.charges.load(Ordering::SeqCst),
        2,
        "4900 charged once"
    );
}

#[tokio::test]
async fn a_pending_approval_holds_its_window_open_past_the_window_and_other_calls() {
    let w = world(MIDNIGHT_MS);
    let refund_of = |charge: &str| format!(r#"{{"charge":"{charge}"}}"#);
    let first = w.call("refund", &refund_of("ch_42")).await;
    let Err(IdemError::ApprovalPending { key, .. }) = &first.result else {
        panic!("expected a pending approval, got {:?}", first.result);
    };
    w.clock.advance(WINDOW + Duration::from_secs(60));
    let other = w.call("refund", &refund_of("ch_43")).await;
    assert!(matches!(
        other.result,
        Err(IdemError::ApprovalPending { .. })
    ));
    let again = w.call("refund", &refund_of("ch_42")).await;
    let Err(IdemError::ApprovalPending { key: same, .. }) = &again.result else {
        panic!("expected the same pending approval, got {:?}", again.result);
    };
    assert_eq!(same, key, "one request for the person, not a second");
    assert_eq!(w.asked.load(Ordering::SeqCst), 2, "ch_42 once, ch_43 once");
}

#[tokio::test]
async fn a_repeat_right_after_a_long_call_is_a_duplicate() {
    let w = world(MIDNIGHT_MS);
    // The window is measured from the outcome: a call that ran longer than
    // the window is still answered to a repeat that follows it.
    w.email(0).await;
    w.clock.advance(WINDOW - Duration::from_secs(1));
    assert!(w.email(0).await.deduplicated());
    w.clock.advance(Duration::from_secs(1));
    assert!(!w.email(0).await.deduplicated());
    assert_eq!(w.emails(), 2);
}
