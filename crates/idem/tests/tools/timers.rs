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

use super::rules::{say, trail};

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
        self.call_as("alice", id, cents).await
    }

    /// `principal`'s agent wires `cents` with the call id `id`.
    async fn call_as(&self, principal: &str, id: &str, cents: u64) -> ToolResult {
        let call = ToolCall {
            id: Some(id.into()),
            name: "wire".into(),
            arguments: Arguments::Json(json!({ "cents": cents })),
        };
        self.agent
            .dispatch_one(call, &RunContext::default().principal(principal))
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
    store_under(dir, treasury()).await
}

/// Two processes on one SQLite file under `rules`, at 09:00.
async fn store_under(
    dir: &TempDir,
    rules: Rules,
) -> (ManualClock, Arc<AtomicUsize>, Process, Process) {
    let clock = ManualClock::new(1_796_115_600_000);
    let sent = Arc::new(AtomicUsize::new(0));
    let file = dir.path().join("idem.db");
    let here = Process::open(&file, &clock, &sent).await;
    let there = Process::open(&file, &clock, &sent).await;
    rules.publish(here.store.as_ref()).await.unwrap();
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
    // process (run by bob): the approval has lapsed, nothing runs, it
    // asks again, still alice's call.
    clock.advance(16 * MINUTE);
    let again = there.call_as("bob", "call-1", 250_000).await;
    let (same, message) = pending(&again);
    assert_eq!(same, key);
    assert!(
        message.starts_with("The approval dana gave at 2026-12-01T09:00:00.000Z lapsed before the call ran: approval rule “wires” lets an approval run it only within 15 minutes of being given (valid_for), so it asks again"),
        "{message}"
    );
    assert_eq!(sent.load(Ordering::SeqCst), 0, "never runs late");
    let record = here.operator.show(&key).await.unwrap();
    assert_eq!(record.status(), Status::AwaitingApproval);
    assert!(record.approval().is_none());
    assert_eq!(record.asker().as_deref(), Some("alice"));
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
        "approval for irreversible tool `wire` was denied: it expired: nobody approved or denied it within 4 hours (approval rule “wires”, expires_after). If it is still wanted, make the call again as a new request; nothing ran"
    );
    let log = trail(&here.store, &back).await;
    assert_eq!(
        log.last().unwrap(),
        &(
            "expired".to_owned(),
            "rule “wires”".to_owned(),
            "it expired: nobody approved or denied it within 4 hours (approval rule “wires”, expires_after). If it is still wanted, make the call again as a new request".to_owned()
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

/// A finance team's rules, from the approvers file's tables (as
/// docs/inbox.md writes them in TOML): CI never wires money, small wires
/// run, a shadow ceiling being rolled out, mid-sized wires take dana or
/// erin within 4 hours, large ones two people (never the asker) within 8
/// hours, escalated to frank after 30 minutes; an approval holds 15
/// minutes.
fn finance() -> Rules {
    let table = |json: serde_json::Value| serde_json::from_value::<RuleEntry>(json).unwrap();
    let rules = vec![
        table(
            json!({"name": "no CI wires", "tools": ["wire"], "principals": ["ci-*"],
                     "decision": "deny", "reason": "CI jobs never move money; a person must ask."}),
        ),
        table(
            json!({"name": "new ceiling", "shadow": true, "tools": ["wire"],
                     "when": "args.cents > 1000000", "decision": "deny", "reason": "over the new ceiling"}),
        ),
        table(
            json!({"name": "small wires", "tools": ["wire"], "when": "args.cents < 5000",
                     "decision": "run"}),
        ),
        table(
            json!({"name": "wires", "tools": ["wire"], "when": "args.cents <= 500000",
                     "approvers": ["dana", "erin"], "valid_for": "15m", "expires_after": "4h"}),
        ),
        table(
            json!({"name": "large wires", "tools": ["wire"], "required": 2,
                     "forbid_self_approval": true, "valid_for": "15m",
                     "escalate_after": "30m", "escalate_to": ["frank"], "expires_after": "8h"}),
        ),
    ];
    let approvers = ["alice", "dana", "erin", "frank"].map(String::from);
    Rules::check(rules, &approvers).unwrap()
}

#[tokio::test]
async fn a_finance_team_s_timed_rules_decide_a_morning_of_wires() {
    let dir = TempDir::new("idem-timers").unwrap();
    let (clock, sent, here, there) = store_under(&dir, finance()).await;
    let rules = finance();
    let at = |clock: &ManualClock| {
        let c = idem::clock::Clock::now(clock).civil();
        format!("{:02}:{:02}", c.hour, c.minute)
    };
    let out = |r: &ToolResult| {
        r.content()["error"]["message"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };

    // 09:00: small runs, CI is denied, mid-sized and large wait.
    let small = here.call_as("alice", "w-small", 1999).await;
    assert_eq!(small.result.as_ref().unwrap().output, json!(1999));
    say(&format!(
        "{} alice wires 19.99 € -> ran, no person (rule “small wires”)",
        at(&clock)
    ));
    let ci = here.call_as("ci-nightly", "w-ci", 1999).await;
    assert!(
        out(&ci).contains("CI jobs never move money"),
        "{}",
        out(&ci)
    );
    say(&format!(
        "{} ci-nightly wires 19.99 € -> denied: {}",
        at(&clock),
        out(&ci)
    ));
    let (mid, message) = pending(&here.call_as("bob", "w-mid", 200_000).await);
    say(&format!(
        "{} bob wires 2,000 € -> waits: {message}",
        at(&clock)
    ));
    let (large, message) = pending(&here.call_as("alice", "w-large", 2_000_000).await);
    let shadow = trail(&here.store, &large).await;
    assert_eq!(shadow[0].0, "shadow_rule");
    say(&format!(
        "{} alice wires 20,000 € -> waits: {message}; audit: {} {}",
        at(&clock),
        shadow[0].1,
        shadow[0].2
    ));
    let (idle, _) = pending(&here.call_as("carol", "w-idle", 30_000).await);
    say(&format!(
        "{} carol wires 300 € -> waits for dana or erin",
        at(&clock)
    ));

    // 09:05 dana approves bob's; his agent comes back at 09:25: lapsed.
    clock.advance(5 * MINUTE);
    here.approve(&mid, "dana").await.unwrap();
    say(&format!("{} dana approves bob's 2,000 €", at(&clock)));
    clock.advance(20 * MINUTE);
    let (_, lapsed) = pending(&there.call_as("bob", "w-mid", 200_000).await);
    assert!(lapsed.contains("lapsed before the call ran"), "{lapsed}");
    say(&format!(
        "{} bob's agent calls again (another process) -> not run, asks again: {lapsed}",
        at(&clock)
    ));
    clock.advance(MINUTE);
    there.approve(&mid, "erin").await.unwrap();
    clock.advance(MINUTE);
    assert!(!here.call_as("bob", "w-mid", 200_000).await.is_error());
    say(&format!(
        "{} erin approved at 09:26; bob's agent calls again -> ran once",
        at(&clock)
    ));

    // 09:30: the large wire waited 30 minutes undecided: frank is told.
    clock.advance(3 * MINUTE);
    let record = here.operator.show(&large).await.unwrap();
    let now = here.store.now().await.unwrap();
    let due = rules.escalation(&record, now).expect("escalation due");
    assert_eq!(due.to, ["frank"]);
    say(&format!("{} alice's 20,000 € undecided for 30 minutes -> escalated to {} (idem serve sends the escalated event once)", at(&clock), due.to.join(", ")));
    let own = here.approve(&large, "alice").await.unwrap_err();
    say(&format!(
        "{} alice approves her own -> refused: {own}",
        at(&clock)
    ));
    here.approve(&large, "frank").await.unwrap();
    clock.advance(2 * MINUTE);
    here.approve(&large, "dana").await.unwrap();
    clock.advance(MINUTE);
    assert!(!there
        .call_as("alice", "w-large", 2_000_000)
        .await
        .is_error());
    say(&format!(
        "{} frank then dana approve (2 of 2); alice's agent calls again -> ran once",
        at(&clock)
    ));

    // 13:00: carol's, undecided for four hours, is denied by the sweep.
    clock.advance(4 * 60 * MINUTE - 33 * MINUTE);
    let swept = there.operator.expire_due().await.unwrap();
    assert_eq!(swept.iter().map(|r| &r.key).collect::<Vec<_>>(), [&idle]);
    let back = here.call_as("carol", "w-idle", 30_000).await;
    assert!(out(&back).contains("it expired"), "{}", out(&back));
    say(&format!(
        "{} carol's 300 € undecided for 4 hours -> denied by the sweep; her agent reads: {}",
        at(&clock),
        out(&back)
    ));
    assert_eq!(sent.load(Ordering::SeqCst), 3);
}
