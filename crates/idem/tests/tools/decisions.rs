//! Promises that hold over time and across arguments, on every store: an
//! approval runs only the arguments a person approved, and nothing decided
//! (an unknown outcome, a granted approval, a resolution) lapses into a
//! second effect when a TTL passes and a sweep runs.
//!
//! Memory and SQLite run on a manual clock moved days forward; Redis and
//! PostgreSQL keep time on the server, so there a "tick" is a short sleep.
#![cfg(feature = "sqlite")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem::approval::{ApprovalDecision, Callback};
use idem::audit::{AuditEvent, AuditQuery};
use idem::clock::ManualClock;
use idem::dispatch::{Arguments, ToolCall, ToolResult};
use idem::operator::{Actor, Filter, Operator, Resolution};
use idem::prelude::*;
use idem::record::{AuditAction, Status};
use idem::store::{ClaimOutcome, ClaimRequest};
use idem_testkit::TestStore;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// A store under test and its notion of time.
struct World {
    store: Arc<dyn Store>,
    /// `None`: the server keeps time, and time passes by sleeping.
    clock: Option<ManualClock>,
    /// The unit of TTLs in a scenario: a day on a manual clock, a moment
    /// on a server's.
    tick: Duration,
    _store: TestStore,
}

impl World {
    /// The world of the kit's `store`: memory and SQLite on its manual
    /// clock, Redis and PostgreSQL on the server's.
    async fn new(store: TestStore) -> World {
        let clock = store.clock().cloned();
        World {
            store: store.open().await,
            tick: if clock.is_some() { DAY } else { SERVER_TICK },
            clock,
            _store: store,
        }
    }

    async fn advance(&self, by: Duration) {
        match &self.clock {
            Some(clock) => clock.advance(by),
            None => tokio::time::sleep(by).await,
        }
    }

    /// Let `ticks` pass, sweeping on the way, as a sweeper would.
    async fn pass(&self, ticks: u32) {
        for _ in 0..ticks {
            self.advance(self.tick).await;
            self.store.sweep().await.unwrap();
        }
    }
}

const DAY: Duration = Duration::from_secs(24 * 3600);
const SERVER_TICK: Duration = Duration::from_millis(700);

// Each scenario on memory, SQLite, Redis and PostgreSQL (the last two with
// the `redis` and `postgres` features, as CI builds the tests).
idem_testkit::on_every_store! {
    stores: [
        memory,
        sqlite,
        #[cfg(feature = "redis")]
        redis,
        #[cfg(feature = "postgres")]
        postgres,
    ],
    run: |scenario, store| scenario(World::new(store).await).await,
    tests: [
        an_approval_runs_only_the_arguments_it_was_given_for,
        a_natural_key_taking_over_an_approved_call_does_not_run_its_own_arguments,
        an_unknown_outcome_is_refused_long_after_every_ttl_and_sweep,
        a_resolution_is_kept_for_the_tools_ttl_not_the_operators_default,
        a_granted_approval_outlives_the_approval_ttl,
        every_decision_leaves_a_trace_that_outlives_its_record,
    ],
}

#[derive(Default)]
struct Bank {
    refunds: std::sync::Mutex<Vec<(String, u64)>>,
    tickets: AtomicUsize,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Refund {
    charge: String,
    cents: u64,
}

/// Refund a charge, at most once per charge: money leaves, so a person
/// approves it.
#[idem::tool(class = "irreversible", key = natural(fields(charge)))]
async fn refund(args: Refund, State(bank): State<Arc<Bank>>) -> Result<String, ToolError> {
    let mut refunds = bank.refunds.lock().unwrap();
    refunds.push((args.charge.clone(), args.cents));
    Ok(format!("re_{} for {} cents", refunds.len(), args.cents))
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Ticket {
    title: String,
}

/// Open a ticket in a system without idempotency keys; `slow` titles time
/// out after the system accepted them.
#[idem::tool(class = "non_idempotent_write", timeout = "50ms")]
async fn open_ticket(args: Ticket, State(bank): State<Arc<Bank>>) -> Result<u64, ToolError> {
    bank.tickets.fetch_add(1, Ordering::SeqCst);
    if args.title.contains("slow") {
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    Ok(7)
}

struct Setup {
    bank: Arc<Bank>,
    exec: Executor<Arc<Bank>>,
    dispatcher: Dispatcher<Arc<Bank>>,
    run: RunContext,
    namespace: String,
}

/// An executor on `world` whose tools keep outcomes for `ttl` ticks and
/// whose refunds wait for a person, with unanswered requests lapsing after
/// `approval_ttl` ticks.
fn setup(world: &World, ttl: u32, approval_ttl: u32) -> Setup {
    let bank = Arc::new(Bank::default());
    let exec = Executor::builder_shared(world.store.clone())
        .state(bank.clone())
        .approvals(Callback::new(|_req| async {
            Ok(ApprovalDecision::Pending {
                message: "refunds need a person".into(),
            })
        }))
        .approval_wait(Duration::ZERO)
        .ttl(world.tick * ttl)
        .approval_ttl(world.tick * approval_ttl)
        .build();
    let dispatcher = Dispatcher::new(exec.clone(), idem::tools![refund, open_ticket]);
    // Each scenario in a tenant of its own: the servers are shared.
    let namespace = format!("t{:016x}", rand_id());
    let run = RunContext::new("run-1", 1).namespace(Namespace::new(&namespace).unwrap());
    Setup {
        bank,
        exec,
        dispatcher,
        run,
        namespace,
    }
}

impl Setup {
    /// The model asks for a refund of `cents` of charge `ch_42`, in call
    /// `id`.
    async fn refund(&self, id: &str, cents: u64) -> ToolResult {
        self.dispatcher
            .dispatch_one(refund_call(id, cents), &self.run)
            .await
    }

    /// The model asks for a slow ticket, in call `id`.
    async fn ticket(&self, id: &str) -> ToolResult {
        self.dispatcher
            .dispatch_one(ticket_call(id), &self.run)
            .await
    }
}

fn rand_id() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

fn refund_call(id: &str, cents: u64) -> ToolCall {
    ToolCall {
        id: Some(id.into()),
        name: "refund".into(),
        arguments: Arguments::Text(format!(r#"{{"charge":"ch_42","cents":{cents}}}"#)),
    }
}

fn ticket_call(id: &str) -> ToolCall {
    ToolCall {
        id: Some(id.into()),
        name: "open_ticket".into(),
        arguments: Arguments::Text(r#"{"title":"slow: printer on fire"}"#.into()),
    }
}

fn code(result: &ToolResult) -> String {
    result.content()["error"]["code"]
        .as_str()
        .unwrap_or("none")
        .to_owned()
}

/// What the model is told of an error.
fn told(result: &ToolResult) -> String {
    result.content()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn pending_key(result: &ToolResult) -> IdempotencyKey {
    match &result.result {
        Err(IdemError::ApprovalPending { key, .. }) => key.clone(),
        other => panic!("expected approval_pending, got {other:?}"),
    }
}

/// A person approves a refund of 1,999 cents as `idem show` displays it; a
/// later call for the same charge (a natural key) asking 999,999 cents is
/// refused, never run, and told what was approved; the approved arguments
/// then run once, and the record still says what ran.
async fn an_approval_runs_only_the_arguments_it_was_given_for(world: World) {
    let s = setup(&world, 10, 10);
    let first = s.refund("c1", 1999).await;
    let key = pending_key(&first);

    // While the request awaits a decision, other arguments are not queued
    // in its place.
    let other = s.refund("c2", 999_999).await;
    assert_eq!(code(&other), "key_awaits_other_arguments");
    let message = told(&other);
    assert!(message.contains("awaits a person's approval"), "{message}");

    s.exec
        .approve(&key, Approval::granted_by("finance-lead"))
        .await
        .unwrap();
    let record = s.exec.operator().show(&key).await.unwrap();
    let approval = record.approval().expect("approved");
    assert_eq!(approval.fingerprint.as_ref(), Some(&record.fingerprint));

    let forged = s.refund("c3", 999_999).await;
    assert_eq!(code(&forged), "key_awaits_other_arguments");
    let message = told(&forged);
    assert!(
        message.contains("approved for other arguments") && message.contains("1999"),
        "the model is told what was approved: {message}"
    );
    assert!(s.bank.refunds.lock().unwrap().is_empty(), "nothing ran");

    let approved = s.refund("c4", 1999).await;
    assert_eq!(approved.content(), json!("re_1 for 1999 cents"));
    // Once it ran, the natural key is find-or-create: other wording gets
    // what the approved call recorded, and nothing runs.
    let later = s.refund("c5", 999_999).await;
    assert!(later.deduplicated());
    assert_eq!(later.content(), json!("re_1 for 1999 cents"));
    assert_eq!(
        *s.bank.refunds.lock().unwrap(),
        vec![("ch_42".to_owned(), 1999)]
    );
    let record = s.exec.operator().show(&key).await.unwrap();
    assert_eq!(record.status(), Status::Succeeded);
    assert_eq!(
        record.info.args.as_deref(),
        Some(r#"{"cents":1999,"charge":"ch_42"}"#)
    );
}

/// An approved refund is claimed by its worker, which dies before starting
/// it. A call for the same charge with other arguments takes the key over:
/// it must neither run nor reconcile its own arguments under the approval,
/// and hands the key back; the approved call, called again, runs once.
async fn a_natural_key_taking_over_an_approved_call_does_not_run_its_own_arguments(world: World) {
    let s = setup(&world, 10, 10);
    let first = s.refund("c1", 1999).await;
    let key = pending_key(&first);
    s.exec
        .approve(&key, Approval::granted_by("finance-lead"))
        .await
        .unwrap();

    // A worker claims the approved call and vanishes without starting it.
    let record = s.exec.operator().show(&key).await.unwrap();
    let lease = world.tick / 4;
    let claimed = world
        .store
        .claim(&ClaimRequest {
            key: &key,
            tool: "refund",
            fingerprint: &record.fingerprint,
            check_fingerprint: false,
            lease,
            info: Default::default(),
            worker: Some("worker-that-dies"),
            durable: true,
        })
        .await
        .unwrap();
    assert!(matches!(claimed, ClaimOutcome::Acquired { .. }));
    world.advance(lease * 2).await;

    let other = s.refund("c2", 999_999).await;
    assert_eq!(code(&other), "key_awaits_other_arguments");
    assert!(s.bank.refunds.lock().unwrap().is_empty(), "nothing ran");

    let approved = s.refund("c3", 1999).await;
    assert_eq!(approved.content(), json!("re_1 for 1999 cents"));
    assert_eq!(
        *s.bank.refunds.lock().unwrap(),
        vec![("ch_42".to_owned(), 1999)]
    );
}

/// A non-idempotent ticket times out after the system accepted it: its
/// outcome is unknown. Days (or many TTLs) later, with sweeps between, the
/// duplicate is still refused, nothing runs again, and the operator still
/// sees it.
async fn an_unknown_outcome_is_refused_long_after_every_ttl_and_sweep(world: World) {
    let s = setup(&world, 1, 1);
    let first = s.ticket("t1").await;
    assert_eq!(code(&first), "outcome_unknown");
    assert_eq!(s.bank.tickets.load(Ordering::SeqCst), 1);

    world.pass(4).await;

    let again = s.ticket("t1").await;
    assert_eq!(code(&again), "outcome_unknown", "{:?}", again.content());
    assert_eq!(s.bank.tickets.load(Ordering::SeqCst), 1, "never re-run");
    let filter = Filter {
        namespace: Some(s.namespace.clone()),
        ..Filter::status(Status::Unknown)
    };
    let unknown = s.exec.operator().list(&filter, None, 10).await.unwrap();
    assert_eq!(unknown.records.len(), 1, "still listed as unknown");
    assert_eq!(unknown.records[0].expires_at(), None);
}

/// An unknown outcome resolved as succeeded by an operator whose default
/// TTL (1 tick) is shorter than the tool's (5 ticks) is kept for the
/// tool's: 3 ticks later the duplicate is answered from the resolution and
/// nothing runs. An explicit TTL is honoured as given.
async fn a_resolution_is_kept_for_the_tools_ttl_not_the_operators_default(world: World) {
    let s = setup(&world, 5, 5);
    let first = s.ticket("t1").await;
    assert_eq!(code(&first), "outcome_unknown");
    let key = match &first.result {
        Err(IdemError::OutcomeUnknown { key, .. }) => key.clone(),
        other => panic!("{other:?}"),
    };
    let operator = Operator::new(world.store.clone()).ttl(world.tick);
    let resolved = operator
        .resolve(
            &key,
            Resolution::Succeeded(json!(7)),
            &Actor::new("ops").because("ticket 7 exists"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resolved.info.ttl, Some(world.tick * 5));

    world.pass(3).await;
    let again = s.ticket("t1").await;
    assert!(again.deduplicated(), "{:?}", again.content());
    assert_eq!(again.content(), json!(7));
    assert_eq!(s.bank.tickets.load(Ordering::SeqCst), 1);

    // An explicit, shorter TTL is a decision to let the call run again
    // after it.
    let second = s.ticket("t2").await;
    let key = match &second.result {
        Err(IdemError::OutcomeUnknown { key, .. }) => key.clone(),
        other => panic!("{other:?}"),
    };
    let resolved = operator
        .resolve_kept_for(
            &key,
            Resolution::Failed("not created".into()),
            &Actor::new("ops"),
            world.tick,
        )
        .await
        .unwrap()
        .unwrap();
    let kept = resolved.expires_at().unwrap().as_millis() - resolved.created_at.as_millis();
    assert!(kept < (world.tick * 2).as_millis() as u64, "{kept}");
}

/// A refund asked for at the start of a 2-tick approval TTL is approved
/// during it; well after the request would have lapsed (a sweep between),
/// the next call runs it once instead of asking again.
async fn a_granted_approval_outlives_the_approval_ttl(world: World) {
    // Approved a tick before the request would lapse, not a fraction of
    // one: on a server's clock a busy machine can take that fraction
    // between the two steps, and the approval then finds nothing.
    let s = setup(&world, 10, 2);
    let first = s.refund("c1", 1999).await;
    let key = pending_key(&first);
    world.pass(1).await;
    s.exec
        .approve(&key, Approval::granted_by("finance-lead"))
        .await
        .unwrap();
    world.pass(3).await;

    let record = s.exec.operator().show(&key).await.unwrap();
    assert_eq!(record.status(), Status::Approved);
    let resumed = s.refund("c2", 1999).await;
    assert_eq!(resumed.content(), json!("re_1 for 1999 cents"));
    assert_eq!(s.bank.refunds.lock().unwrap().len(), 1);
}

/// The audit log of `key`, oldest first.
async fn log_of(world: &World, key: &IdempotencyKey) -> Vec<AuditEvent> {
    let query = AuditQuery::for_key(key.clone());
    world.store.audit(&query, None, 100).await.unwrap().events
}

/// An approval, a release of an unknown outcome and a delete each append
/// who, when, why and the state before and after to the store's log; the
/// release and the delete take the record (and its own audit) away, the
/// log keeps them, through expiry and sweeps.
async fn every_decision_leaves_a_trace_that_outlives_its_record(world: World) {
    let s = setup(&world, 1, 1);
    let operator = s.exec.operator();

    let first = s.refund("c1", 1999).await;
    let refund_key = pending_key(&first);
    operator
        .approve(
            &refund_key,
            Approval::granted_by("finance-lead").with_note("ticket 88"),
        )
        .await
        .unwrap();
    let ran = s.refund("c2", 1999).await;
    assert!(!ran.is_error(), "{:?}", ran.content());

    let ticket = s.ticket("t1").await;
    let ticket_key = match &ticket.result {
        Err(IdemError::OutcomeUnknown { key, .. }) => key.clone(),
        other => panic!("{other:?}"),
    };
    operator
        .resolve(
            &ticket_key,
            Resolution::Release,
            &Actor::new("ops").because("the ticket system has no ticket 7"),
        )
        .await
        .unwrap();
    operator
        .delete(&refund_key, &Actor::new("ops").because("test data"))
        .await
        .unwrap();
    assert!(world.store.get(&ticket_key).await.unwrap().is_none());
    assert!(world.store.get(&refund_key).await.unwrap().is_none());

    world.pass(3).await;

    let refund_log = log_of(&world, &refund_key).await;
    let actions: Vec<_> = refund_log
        .iter()
        .map(|e| (e.action, e.before, e.after))
        .collect();
    assert_eq!(
        actions,
        vec![
            (
                AuditAction::Approved,
                Some(Status::AwaitingApproval),
                Some(Status::Approved)
            ),
            (AuditAction::Deleted, Some(Status::Succeeded), None),
        ]
    );
    assert_eq!(refund_log[0].by, "finance-lead");
    assert_eq!(refund_log[0].reason.as_deref(), Some("ticket 88"));
    assert_eq!(refund_log[0].tool, "refund");
    assert_eq!(
        refund_log[0].namespace.as_deref(),
        Some(s.namespace.as_str())
    );

    let ticket_log = log_of(&world, &ticket_key).await;
    assert_eq!(ticket_log.len(), 1, "{ticket_log:?}");
    let release = &ticket_log[0];
    assert_eq!(
        (release.action, release.before, release.after),
        (AuditAction::Released, Some(Status::Unknown), None)
    );
    assert_eq!(release.by, "ops");
    assert_eq!(
        release.reason.as_deref(),
        Some("the ticket system has no ticket 7")
    );
}
