//! Time in the approval rules, as a program meets it on a SQLite store
//! whose clock the test moves: an approval older than its rule's
//! `valid_for` never runs the call (it asks again, the lapse in the audit
//! log), in this process or another; a request nobody decided within
//! `expires_after` is denied by its rule and the model is told why; a
//! decision given is never undone by time.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem::approval::rules::{RuleEntry, RuleRefusal, Rules, Window};
use idem::approval::Approval;
use idem::clock::ManualClock;
use idem::dispatch::{Arguments, ToolCall, ToolResult};
use idem::key::IdempotencyKey;
use idem::operator::{Operator, OperatorError};
use idem::prelude::*;
use idem::record::Status;
use idem::store::{SqliteOptions, SqliteStore};
use idem_testkit::TempDir;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::rules::trail;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Wire {
    cents: u64,
}

/// Wire money out of the company's account.
#[idem::tool(class = "irreversible")]
async fn wire(args: Wire, State(sent): State<Arc<AtomicUsize>>) -> Result<u64, ToolError> {
    sent.fetch_add(1, Ordering::SeqCst);
    Ok(args.cents)
}

const MINUTE: Duration = Duration::from_secs(60);

/// Wires need one of dana and erin; an approval runs a wire within 15
/// minutes of being given, a request nobody decides is denied after 4
/// hours.
fn treasury() -> Rules {
    let mut rule = RuleEntry::default();
    rule.name = Some("wires".into());
    rule.tools = vec!["wire".into()];
    rule.valid_for = Some(Window::parse("15m").unwrap());
    rule.escalate_after = Some(Window::parse("30m").unwrap());
    rule.escalate_to = vec!["erin".into()];
    rule.expires_after = Some(Window::parse("4h").unwrap());
    Rules::check(vec![rule], &["dana".into(), "erin".into()]).unwrap()
}

/// One process's view: its own connection to the store file, its own
/// executor, the shared clock.
struct Process {
    store: Arc<dyn Store>,
    agent: Dispatcher<Arc<AtomicUsize>>,
    operator: Operator,
}

impl Process {
    async fn open(file: &Path, clock: &ManualClock, sent: &Arc<AtomicUsize>) -> Process {
        let options = SqliteOptions::default().clock(Arc::new(clock.clone()));
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open_with(file, options).await.unwrap());
        let exec = Executor::builder_shared(store.clone())
            .state(sent.clone())
            .build();
        Process {
            agent: Dispatcher::new(exec, idem::tools![wire]),
            operator: Operator::new(store.clone()),
            store,
        }
    }

    async fn call(&self, id: &str, cents: u64) -> ToolResult {
        let call = ToolCall {
            id: Some(id.into()),
            name: "wire".into(),
            arguments: Arguments::Json(json!({ "cents": cents })),
        };
        self.agent
            .dispatch_one(call, &RunContext::default().principal("alice"))
            .await
    }

    async fn approve(&self, key: &IdempotencyKey, by: &str) -> Result<(), OperatorError> {
        let record = self.operator.show(key).await.unwrap();
        self.operator
            .approve_record(&record, Approval::granted_by(by))
            .await
            .map(drop)
    }
}

/// The key of a call left pending, and the message it was told.
fn pending(result: &ToolResult) -> (IdempotencyKey, String) {
    match &result.result {
        Err(IdemError::ApprovalPending { key, message, .. }) => (key.clone(), message.clone()),
        other => panic!("expected a pending approval: {other:?}"),
    }
}

/// A treasury's store: two processes on one SQLite file, at 09:00.
async fn treasury_store(dir: &TempDir) -> (ManualClock, Arc<AtomicUsize>, Process, Process) {
    let clock = ManualClock::new(1_796_115_600_000);
    let sent = Arc::new(AtomicUsize::new(0));
    let file = dir.path().join("idem.db");
    let here = Process::open(&file, &clock, &sent).await;
    let there = Process::open(&file, &clock, &sent).await;
    treasury().publish(here.store.as_ref()).await.unwrap();
    (clock, sent, here, there)
}

#[tokio::test]
async fn an_approval_past_valid_for_asks_again_and_never_runs_late() {
    let dir = TempDir::new("idem-timers").unwrap();
    let (clock, sent, here, there) = treasury_store(&dir).await;
    let (key, _) = pending(&here.call("call-1", 250_000).await);
    here.approve(&key, "dana").await.unwrap();
    assert_eq!(
        here.operator.show(&key).await.unwrap().status(),
        Status::Approved
    );

    // Sixteen minutes later the call comes back, resumed by another
    // process: the approval has lapsed, nothing runs, it asks again.
    clock.advance(16 * MINUTE);
    let again = there.call("call-1", 250_000).await;
    let (same, message) = pending(&again);
    assert_eq!(same, key);
    assert!(
        message.starts_with("The approval dana gave at 2026-12-01T09:00:00.000Z lapsed before the call ran: approval rule “wires” lets an approval run it only within 15 minutes of being given (valid_for). Nothing ran; it asks again"),
        "{message}"
    );
    assert_eq!(sent.load(Ordering::SeqCst), 0, "never runs late");
    let record = here.operator.show(&key).await.unwrap();
    assert_eq!(record.status(), Status::AwaitingApproval);
    assert!(record.approval().is_none());
    // The lapse is in the audit log, after the approval it voids.
    let log = trail(&here.store, &key).await;
    let actions: Vec<&str> = log.iter().map(|(a, _, _)| a.as_str()).collect();
    assert_eq!(actions, ["approved", "approval_lapsed"]);
    assert_eq!(log[1].1, "rule “wires”");
    // Asking again is a new request: its own time, for the next lapse.
    assert!(there.call("call-1", 250_000).await.is_error());
    assert_eq!(sent.load(Ordering::SeqCst), 0);

    // A fresh approval runs it, within the window, once.
    there.approve(&key, "erin").await.unwrap();
    clock.advance(14 * MINUTE);
    let ran = here.call("call-1", 250_000).await;
    assert_eq!(ran.result.unwrap().output, json!(250_000));
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    clock.advance(60 * MINUTE);
    assert!(there.call("call-1", 250_000).await.deduplicated());
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_request_nobody_decides_expires_denied_and_the_model_is_told_why() {
    let dir = TempDir::new("idem-timers").unwrap();
    let (clock, sent, here, there) = treasury_store(&dir).await;
    let (late, _) = pending(&here.call("call-late", 100).await);
    let (swept, _) = pending(&here.call("call-swept", 200).await);
    let (back, _) = pending(&here.call("call-back", 300).await);
    clock.advance(4 * 60 * MINUTE - Duration::from_millis(1));
    assert!(here.operator.expire_due().await.unwrap().is_empty());
    clock.advance(Duration::from_millis(1));

    // The call sent again after four hours: denied by the rule, as
    // expired, in the words the model reads.
    let denied = there.call("call-back", 300).await;
    let said = denied.content();
    assert_eq!(said["error"]["code"], "approval_denied");
    assert_eq!(
        said["error"]["message"],
        "approval for irreversible tool `wire` was denied: it expired: nobody approved or denied it within 4 hours (approval rule “wires”, expires_after). Nothing ran; if it is still wanted, make the call again as a new request; nothing ran"
    );
    let log = trail(&here.store, &back).await;
    assert_eq!(
        log.last().unwrap(),
        &(
            "expired".to_owned(),
            "rule “wires”".to_owned(),
            "it expired: nobody approved or denied it within 4 hours (approval rule “wires”, expires_after). Nothing ran; if it is still wanted, make the call again as a new request".to_owned()
        )
    );

    // A person deciding after four hours is refused: the call is denied
    // as expired, not approved late.
    let refused = here.approve(&late, "dana").await.unwrap_err();
    assert!(
        matches!(&refused, OperatorError::Rule(r) if matches!(**r, RuleRefusal::Expired { .. })),
        "{refused}"
    );
    assert!(
        refused
            .to_string()
            .starts_with("This call of wire can no longer be decided: it expired"),
        "{refused}"
    );
    let refused = here.operator.deny(&late, "dana", "too late anyway").await;
    assert!(
        matches!(refused, Err(OperatorError::NotPending { .. })),
        "{refused:?}"
    );

    // The sweep (what `idem serve` runs) denies the one nobody called
    // again; a second sweep, or another process's, finds nothing.
    let denied = there.operator.expire_due().await.unwrap();
    assert_eq!(denied.iter().map(|r| &r.key).collect::<Vec<_>>(), [&swept]);
    assert!(here.operator.expire_due().await.unwrap().is_empty());
    for key in [&late, &swept, &back] {
        let record = here.operator.show(key).await.unwrap();
        assert_eq!(record.status(), Status::Failed, "{key}");
        let expired = trail(&here.store, key).await;
        assert_eq!(expired.iter().filter(|(a, _, _)| a == "expired").count(), 1);
    }
    assert!(there.call("call-swept", 200).await.deduplicated());
    assert_eq!(sent.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_decision_given_is_never_undone_by_time() {
    let dir = TempDir::new("idem-timers").unwrap();
    let (clock, sent, here, there) = treasury_store(&dir).await;
    let (approved, _) = pending(&here.call("call-yes", 100).await);
    let (denied, _) = pending(&here.call("call-no", 200).await);
    clock.advance(3 * 60 * MINUTE + 50 * MINUTE);
    here.approve(&approved, "dana").await.unwrap();
    here.operator
        .deny(&denied, "erin", "not this one")
        .await
        .unwrap();
    // Past the four hours: the approval stands (within its 15 minutes)
    // and the denial too; no sweep touches either.
    clock.advance(11 * MINUTE);
    assert!(there.operator.expire_due().await.unwrap().is_empty());
    let ran = there.call("call-yes", 100).await;
    assert_eq!(ran.result.unwrap().output, json!(100));
    let no = there.call("call-no", 200).await;
    assert!(
        matches!(&no.result, Err(IdemError::ApprovalDenied { reason, .. }) if reason == "not this one"),
        "{:?}",
        no.result
    );
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}
