//! The executor's rules, through its public API, with tools implemented by
//! hand (the `#[tool]` attribute generates the same impls).

use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use idem_runtime::approval::{AllowList, Approval, DenyAll};
use idem_runtime::class::{IdempotentWrite, Irreversible, NonIdempotentWrite, Read};
use idem_runtime::clock::ManualClock;
use idem_runtime::clock::Timestamp;
use idem_runtime::executor::InFlightPolicy;
use idem_runtime::record::{Fence, Outcome};
use idem_runtime::store::{ClaimOutcome, ClaimRequest, MemoryStore, Store};
use idem_runtime::{
    ErrorKind, Executor, IdemError, Reconciled, RetryPolicy, Tool, ToolCtx, ToolDef, ToolError,
    ToolSpec,
};
use idem_runtime::{IdempotencyKey, Record, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the fake outside world saw, and what the tools will answer next.
#[derive(Default)]
struct World {
    effects: Mutex<Vec<String>>,
    calls: AtomicUsize,
    script: Mutex<VecDeque<ToolError>>,
    reconcile: Mutex<Option<Reconciled<Sent>>>,
    delay: Mutex<Option<Duration>>,
    crashed: std::sync::atomic::AtomicBool,
}

type App = Arc<World>;

impl World {
    fn effects(&self) -> Vec<String> {
        self.effects.lock().unwrap().clone()
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    fn fail_next(&self, errors: impl IntoIterator<Item = ToolError>) {
        self.script.lock().unwrap().extend(errors);
    }
    /// Run one attempt: count it, maybe fail as scripted, else apply.
    async fn act(&self, what: String, ctx: &ToolCtx) -> Result<Sent, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let delay = *self.delay.lock().unwrap();
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        if let Some(e) = self.script.lock().unwrap().pop_front() {
            return Err(e);
        }
        self.effects.lock().unwrap().push(what.clone());
        Ok(Sent {
            id: format!("{what}#{}", self.effects.lock().unwrap().len()),
            key: ctx.key().map(|k| k.to_string()),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
struct Msg {
    to: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Sent {
    id: String,
    key: Option<String>,
}

macro_rules! test_tool {
    ($ty:ident, $class:ty, $name:literal) => {
        #[derive(Clone, Copy)]
        struct $ty;
        impl ToolDef for $ty {
            type Class = $class;
            type Args = Msg;
            type Output = Sent;
            const SPEC: ToolSpec = ToolSpec::new($name, "test tool");
        }
        impl Tool<App> for $ty {
            fn call(
                &self,
                args: Msg,
                ctx: &ToolCtx,
                world: &App,
            ) -> impl Future<Output = Result<Sent, ToolError>> + Send {
                let (world, ctx) = (world.clone(), ctx.clone());
                async move { world.act(format!("{}:{}", $name, args.to), &ctx).await }
            }
            fn reconcile(
                &self,
                _args: &Msg,
                _ctx: &ToolCtx,
                world: &App,
            ) -> impl Future<Output = Result<Reconciled<Sent>, ToolError>> + Send {
                let answer = world
                    .reconcile
                    .lock()
                    .unwrap()
                    .clone()
                    .unwrap_or(Reconciled::Unknown);
                std::future::ready(Ok(answer))
            }
        }
    };
}

test_tool!(SendEmail, IdempotentWrite, "send_email");
test_tool!(ChargeCard, NonIdempotentWrite, "charge_card");
test_tool!(DeleteAccount, Irreversible, "delete_account");
test_tool!(LookUp, Read, "look_up");

/// A store that must not be touched (`Panics`) or cannot be reached (`Down`).
#[derive(Debug)]
enum BrokenStore {
    Panics,
    Down,
}

impl BrokenStore {
    fn fail<T>(&self) -> Result<T, StoreError> {
        match self {
            BrokenStore::Panics => panic!("the store was touched"),
            BrokenStore::Down => Err(StoreError::Unavailable {
                store: self.describe(),
                cause: "connection refused".into(),
            }),
        }
    }
}

#[async_trait::async_trait]
impl Store for BrokenStore {
    fn describe(&self) -> String {
        "redis://10.0.0.9:6379".into()
    }
    async fn claim(&self, _: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.fail()
    }
    async fn checkpoint(
        &self,
        _: &IdempotencyKey,
        _: Fence,
        _: &str,
        _: &Value,
        _: Duration,
    ) -> Result<(), StoreError> {
        self.fail()
    }
    async fn complete(
        &self,
        _: &IdempotencyKey,
        _: Fence,
        _: &Outcome,
        _: Duration,
    ) -> Result<(), StoreError> {
        self.fail()
    }
    async fn release(&self, _: &IdempotencyKey, _: Fence) -> Result<(), StoreError> {
        self.fail()
    }
    async fn get(&self, _: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.fail()
    }
    async fn replace(
        &self,
        _: &IdempotencyKey,
        _: idem_runtime::store::Expected,
        _: Option<&Record>,
        _: Option<&idem_runtime::audit::AuditEvent>,
    ) -> Result<Option<Fence>, StoreError> {
        self.fail()
    }
    async fn append_audit(&self, _: &idem_runtime::audit::AuditEvent) -> Result<u64, StoreError> {
        self.fail()
    }
    async fn audit(
        &self,
        _: &idem_runtime::audit::AuditQuery,
        _: Option<&str>,
        _: usize,
    ) -> Result<idem_runtime::audit::AuditPage, StoreError> {
        self.fail()
    }
    async fn scan(
        &self,
        _: Option<&str>,
        _: usize,
    ) -> Result<idem_runtime::store::ScanPage, StoreError> {
        self.fail()
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        self.fail()
    }
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.fail()
    }
}

fn msg(to: &str) -> Msg {
    Msg { to: to.into() }
}

fn executor(store: Arc<MemoryStore>) -> (Executor<App>, App) {
    let world = App::default();
    let exec = Executor::builder_shared(store)
        .state(world.clone())
        .retry(
            RetryPolicy::exponential()
                .initial_delay(Duration::from_millis(1))
                .without_jitter(),
        )
        // Short, so reconciling a takeover (which first outlasts the
        // previous owner's attempt) takes a second, not thirty.
        .timeout(Duration::from_secs(1))
        .build();
    (exec, world)
}

/// `send_email` to `to` under call id `id`.
async fn send(
    exec: &Executor<App>,
    to: &str,
    id: &str,
) -> Result<idem_runtime::CallOutput<Sent>, IdemError> {
    exec.call(SendEmail, msg(to)).call_id(id).await
}

/// `charge_card` for `to` under call id `id`.
async fn charge(
    exec: &Executor<App>,
    to: &str,
    id: &str,
) -> Result<idem_runtime::CallOutput<Sent>, IdemError> {
    exec.call(ChargeCard, msg(to)).call_id(id).await
}

fn fresh() -> (Executor<App>, App) {
    executor(Arc::new(MemoryStore::new()))
}

#[tokio::test]
async fn same_call_id_twice_sends_one_email_and_the_second_is_deduplicated() {
    let (exec, world) = fresh();
    let first = send(&exec, "ada", "call_1").await.unwrap();
    let second = send(&exec, "ada", "call_1").await.unwrap();
    assert_eq!(world.effects(), ["send_email:ada"]);
    assert!(!first.meta.deduplicated);
    assert!(second.meta.deduplicated);
    assert_eq!(first.output, second.output);
    assert_eq!(second.meta.attempts, 0);
    // The tool saw the key it should pass downstream.
    assert_eq!(
        first.output.key.as_deref(),
        first.meta.key.as_ref().map(|k| k.as_str())
    );
    let m = exec.metrics();
    assert_eq!((m.executions, m.dedup_hits), (1, 1));
}

#[tokio::test]
async fn a_new_call_id_is_a_new_email() {
    let (exec, world) = fresh();
    send(&exec, "ada", "call_1").await.unwrap();
    send(&exec, "ada", "call_2").await.unwrap();
    assert_eq!(world.effects().len(), 2);
}

#[tokio::test]
async fn a_write_without_call_id_or_run_is_refused() {
    let (exec, world) = fresh();
    let err = exec.call(SendEmail, msg("ada")).await.unwrap_err();
    assert!(matches!(err, IdemError::Key { .. }), "{err}");
    assert!(
        err.to_string().contains("no call id and no run context"),
        "{err}"
    );
    assert_eq!(world.calls(), 0);
}

#[tokio::test]
async fn run_and_step_key_a_call_without_id() {
    let (exec, world) = fresh();
    exec.call(SendEmail, msg("ada"))
        .run("run-1", 3)
        .await
        .unwrap();
    let again = exec
        .call(SendEmail, msg("ada"))
        .run("run-1", 3)
        .await
        .unwrap();
    assert!(again.meta.deduplicated);
    exec.call(SendEmail, msg("ada"))
        .run("run-1", 4)
        .await
        .unwrap();
    assert_eq!(world.effects().len(), 2);
}

#[tokio::test]
async fn same_key_with_other_arguments_is_refused() {
    let (exec, world) = fresh();
    send(&exec, "ada", "call_1").await.unwrap();
    let err = send(&exec, "bob", "call_1").await.unwrap_err();
    assert!(matches!(err, IdemError::KeyReused { .. }), "{err}");
    assert_eq!(world.effects(), ["send_email:ada"]);
    assert_eq!(exec.metrics().refusals, 1);
}

#[tokio::test]
async fn reads_are_retried_and_never_touch_the_store() {
    let world = App::default();
    let exec = Executor::builder(BrokenStore::Panics)
        .state(world.clone())
        .retry(RetryPolicy::exponential().initial_delay(Duration::from_millis(1)))
        .build();
    world.fail_next([ToolError::transient("503")]);
    let out = exec.call(LookUp, msg("ada")).await.unwrap();
    assert_eq!(out.meta.attempts, 2);
    assert_eq!(out.meta.key, None);
}

#[tokio::test]
async fn idempotent_writes_retry_transient_and_ambiguous_errors_with_the_same_key() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::transient("503"), ToolError::ambiguous("timeout")]);
    let out = send(&exec, "ada", "c").await.unwrap();
    assert_eq!(out.meta.attempts, 3);
    assert_eq!(world.effects(), ["send_email:ada"]);
    assert_eq!(exec.metrics().retries, 2);
}

#[tokio::test]
async fn non_idempotent_writes_are_never_retried_and_a_transient_failure_releases_the_key() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::transient("card network busy")]);
    let err = charge(&exec, "ada", "c").await.unwrap_err();
    assert!(matches!(&err, IdemError::Tool { error, .. } if error.kind() == ErrorKind::Transient));
    assert_eq!(world.calls(), 1, "retried a non-idempotent write");
    // Known not applied: the same call may run again later.
    charge(&exec, "ada", "c").await.unwrap();
    assert_eq!(world.effects(), ["charge_card:ada"]);
}

#[tokio::test]
async fn an_ambiguous_failure_of_a_non_idempotent_write_is_recorded_as_unknown_and_refused() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::ambiguous(
        "timeout after the card network accepted",
    )]);
    let err = charge(&exec, "ada", "c").await.unwrap_err();
    assert!(matches!(err, IdemError::OutcomeUnknown { .. }), "{err}");
    let again = charge(&exec, "ada", "c").await.unwrap_err();
    assert!(matches!(again, IdemError::OutcomeUnknown { .. }), "{again}");
    assert_eq!(world.calls(), 1, "an unknown outcome was re-run");
}

#[tokio::test]
async fn the_reconcile_hook_resolves_an_ambiguous_failure() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::ambiguous("timeout")]);
    let found = Sent {
        id: "ch_found".into(),
        key: None,
    };
    *world.reconcile.lock().unwrap() = Some(Reconciled::Applied(found.clone()));
    let out = charge(&exec, "ada", "c").await.unwrap();
    assert_eq!(out.output, found);
    let dup = charge(&exec, "ada", "c").await.unwrap();
    assert_eq!(dup.output, found);
    assert!(dup.meta.deduplicated);
}

#[tokio::test]
async fn permanent_failures_are_recorded_and_replayed() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::permanent("mailbox does not exist")]);
    let first = send(&exec, "nobody", "c").await.unwrap_err();
    let second = send(&exec, "nobody", "c").await.unwrap_err();
    assert!(!first.is_deduplicated());
    assert!(second.is_deduplicated());
    assert!(second.to_string().contains("mailbox does not exist"));
    assert_eq!(world.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_is_an_ambiguous_error() {
    let world = App::default();
    *world.delay.lock().unwrap() = Some(Duration::from_secs(60));
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .timeout(Duration::from_secs(1))
        .build();
    let err = charge(&exec, "ada", "c").await.unwrap_err();
    assert!(matches!(err, IdemError::OutcomeUnknown { .. }), "{err}");
    assert!(err.to_string().contains("timed out"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured() {
    let (exec, world) = fresh();
    world.fail_next([ToolError::transient("429").with_retry_after(Duration::from_secs(7))]);
    let start = tokio::time::Instant::now();
    send(&exec, "ada", "c").await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_secs(7),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn an_explicit_retry_policy_limits_attempts() {
    let (exec, world) = fresh();
    world.fail_next((0..5).map(|_| ToolError::transient("503")));
    let err = exec
        .call(SendEmail, msg("ada"))
        .call_id("c")
        .retry(
            RetryPolicy::exponential()
                .max_attempts(2)
                .initial_delay(Duration::ZERO),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, IdemError::Tool { .. }));
    assert_eq!(world.calls(), 2);
}

#[tokio::test]
async fn a_duplicate_waits_for_the_running_call_and_gets_its_result() {
    let (exec, world) = fresh();
    *world.delay.lock().unwrap() = Some(Duration::from_millis(100));
    let (a, b) = tokio::join!(
        exec.call(SendEmail, msg("ada")).call_id("c").into_future(),
        async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            send(&exec, "ada", "c").await
        }
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.output, b.output);
    assert!(b.meta.deduplicated);
    assert_eq!(world.effects().len(), 1);
}

#[tokio::test]
async fn a_duplicate_can_be_rejected_while_in_flight() {
    let world = App::default();
    *world.delay.lock().unwrap() = Some(Duration::from_millis(100));
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .on_in_flight(InFlightPolicy::Reject)
        .build();
    let (a, b) = tokio::join!(
        exec.call(SendEmail, msg("ada")).call_id("c").into_future(),
        async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            send(&exec, "ada", "c").await
        }
    );
    assert!(a.is_ok());
    assert!(matches!(b.unwrap_err(), IdemError::InFlight { .. }));
    assert_eq!(world.calls(), 1);
}

/// Claim a key as a worker that starts the tool and then crashes, and let
/// its lease run out.
async fn crashed_owner(
    exec: &Executor<App>,
    clock: &ManualClock,
    tool: &'static str,
    to: &str,
    call_id: &str,
) {
    crashed(exec, clock, tool, to, call_id, true).await
}

/// Claim a key as a worker that crashes, having started the tool or not,
/// and let its lease run out.
async fn crashed(
    exec: &Executor<App>,
    clock: &ManualClock,
    tool: &'static str,
    to: &str,
    call_id: &str,
    started: bool,
) {
    let call = Msg { to: to.into() };
    let value = serde_json::to_value(&call).unwrap();
    let args = idem_runtime::key::CanonicalArgs::from_value(&value).unwrap();
    let ns = idem_runtime::Namespace::default();
    let key = idem_runtime::key::derive_key(&idem_runtime::key::KeyInput {
        version: 1,
        namespace: &ns,
        tool,
        source: idem_runtime::key::KeySource::CallId(call_id),
    })
    .unwrap();
    let claim = exec
        .store()
        .claim(&ClaimRequest {
            key: &key,
            tool,
            fingerprint: &args.fingerprint,
            check_fingerprint: true,
            lease: Duration::from_secs(40),
            info: idem_runtime::record::CallInfoRef::EMPTY,
            worker: None,
        })
        .await
        .unwrap();
    let ClaimOutcome::Acquired { fence, .. } = claim else {
        panic!("expected to own the key, got {claim:?}");
    };
    if started {
        // What the executor writes just before the tool body runs.
        exec.store()
            .checkpoint(
                &key,
                fence,
                idem_runtime::executor::ATTEMPT_STEP,
                &Value::from(1),
                Duration::from_secs(40),
            )
            .await
            .unwrap();
    }
    clock.advance(Duration::from_secs(41));
}

fn with_clock() -> (Executor<App>, App, ManualClock) {
    let clock = ManualClock::new(1_700_000_000_000);
    let (exec, world) = executor(Arc::new(MemoryStore::with_clock(Arc::new(clock.clone()))));
    (exec, world, clock)
}

#[tokio::test]
async fn after_a_crash_an_idempotent_write_is_taken_over_and_rerun_with_the_same_key() {
    let (exec, world, clock) = with_clock();
    crashed_owner(&exec, &clock, "send_email", "ada", "c").await;
    let out = send(&exec, "ada", "c").await.unwrap();
    assert!(!out.meta.deduplicated);
    assert_eq!(world.effects(), ["send_email:ada"]);
}

#[tokio::test]
async fn after_a_crash_a_non_idempotent_write_without_hook_is_refused_as_unknown() {
    let (exec, world, clock) = with_clock();
    crashed_owner(&exec, &clock, "charge_card", "ada", "c").await;
    let err = charge(&exec, "ada", "c").await.unwrap_err();
    assert!(matches!(err, IdemError::OutcomeUnknown { .. }), "{err}");
    assert!(err.to_string().contains("operator"), "{err}");
    assert_eq!(world.calls(), 0);
}

#[tokio::test]
async fn after_a_crash_the_reconcile_hook_decides() {
    let (exec, world, clock) = with_clock();
    crashed_owner(&exec, &clock, "charge_card", "ada", "c").await;
    *world.reconcile.lock().unwrap() = Some(Reconciled::NotApplied);
    charge(&exec, "ada", "c").await.unwrap();
    assert_eq!(
        world.effects(),
        ["charge_card:ada"],
        "not applied → runs once"
    );

    crashed_owner(&exec, &clock, "charge_card", "bob", "c2").await;
    let found = Sent {
        id: "ch_9".into(),
        key: None,
    };
    *world.reconcile.lock().unwrap() = Some(Reconciled::Applied(found.clone()));
    let out = charge(&exec, "bob", "c2").await.unwrap();
    assert_eq!(
        out.output, found,
        "applied → the reconciled output is recorded"
    );
    assert_eq!(
        world.effects(),
        ["charge_card:ada"],
        "applied → not run again"
    );
}

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
async fn replay_returns_recorded_writes_and_refuses_unrecorded_ones() {
    let (exec, world) = fresh();
    let live = send(&exec, "ada", "c1").await.unwrap();
    let replay = exec.replaying();
    let again = replay
        .call(SendEmail, msg("ada"))
        .call_id("c1")
        .await
        .unwrap();
    assert_eq!(again.output, live.output);
    assert!(again.meta.deduplicated);
    let err = replay
        .call(SendEmail, msg("bob"))
        .call_id("c2")
        .await
        .unwrap_err();
    assert!(matches!(err, IdemError::NotRecorded { .. }), "{err}");
    // Reads still run in replay.
    replay.call(LookUp, msg("x")).await.unwrap();
    assert_eq!(world.effects(), ["send_email:ada", "look_up:x"]);
}

#[tokio::test]
async fn a_store_that_is_down_means_writes_do_not_run() {
    let world = App::default();
    let exec = Executor::builder(BrokenStore::Down)
        .state(world.clone())
        .build();
    let err = send(&exec, "ada", "c").await.unwrap_err();
    assert!(matches!(err, IdemError::Store { .. }));
    let text = err.to_string();
    assert!(
        text.contains("redis://10.0.0.9:6379") && text.contains("connection refused"),
        "{text}"
    );
    assert_eq!(world.calls(), 0);
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

/// A two-step tool: charge, then e-mail a receipt. It crashes (panics) after
/// the charge on its first run, as a process would.
#[derive(Clone, Copy)]
struct Checkout;
impl ToolDef for Checkout {
    type Class = IdempotentWrite;
    type Args = Msg;
    type Output = Vec<String>;
    const SPEC: ToolSpec = ToolSpec::new("checkout", "charge then send a receipt");
}
impl Tool<App> for Checkout {
    fn call(
        &self,
        args: Msg,
        ctx: &ToolCtx,
        world: &App,
    ) -> impl Future<Output = Result<Vec<String>, ToolError>> + Send {
        let (world, ctx) = (world.clone(), ctx.clone());
        async move {
            let charge = ctx
                .step("charge", || world.act(format!("charge:{}", args.to), &ctx))
                .await?;
            if !world.crashed.swap(true, Ordering::SeqCst) {
                panic!("process killed between the two steps");
            }
            let receipt = ctx
                .step("receipt", || {
                    world.act(format!("receipt:{}", args.to), &ctx)
                })
                .await?;
            Ok(vec![charge.id, receipt.id])
        }
    }
}

#[tokio::test]
async fn a_replay_resumes_after_the_last_completed_step() {
    let (exec, world, clock) = with_clock();
    let first = {
        let exec = exec.clone();
        tokio::spawn(async move { exec.call(Checkout, msg("ada")).call_id("c").await })
    };
    assert!(first.await.unwrap_err().is_panic());
    assert_eq!(world.effects(), ["charge:ada"]);
    clock.advance(Duration::from_secs(60));
    let out = exec.call(Checkout, msg("ada")).call_id("c").await.unwrap();
    assert_eq!(
        world.effects(),
        ["charge:ada", "receipt:ada"],
        "the charge ran twice"
    );
    assert_eq!(out.output, ["charge:ada#1", "receipt:ada#2"]);
}

#[tokio::test]
async fn step_names_of_idem_itself_are_reserved() {
    let ctx = ToolCtx::new("t", idem_runtime::ClassKind::Read);
    let err = ctx
        .step("idem:approval", || async { Ok::<_, ToolError>(1) })
        .await
        .unwrap_err();
    assert!(err.message().contains("reserved"), "{err}");
    assert_eq!(
        ctx.step("charge", || async { Ok::<_, ToolError>(2) })
            .await
            .unwrap(),
        2
    );
}

#[tokio::test]
async fn a_timeout_of_duration_max_means_no_timeout_not_an_overflow() {
    let world = App::default();
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .timeout(Duration::MAX)
        .build();
    send(&exec, "ada", "c").await.unwrap();
    assert_eq!(world.effects(), ["send_email:ada"]);
}

#[tokio::test]
async fn an_owner_whose_lease_was_taken_over_is_told_it_was_superseded_and_records_nothing() {
    let (exec, world, clock) = with_clock();
    *world.delay.lock().unwrap() = Some(Duration::from_millis(200));
    let first = tokio::spawn({
        let exec = exec.clone();
        async move { send(&exec, "ada", "c").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The first owner is still working when its lease runs out (a pause,
    // a slow provider); a duplicate in another worker (an executor of its
    // own: within one executor it would wait for the first) takes the key
    // over and runs it again.
    clock.advance(Duration::from_secs(41));
    let other_worker = Executor::builder_shared(exec.store().clone())
        .state(world.clone())
        .build();
    let second = send(&other_worker, "ada", "c").await.unwrap();
    let err = first.await.unwrap().unwrap_err();
    assert!(matches!(err, IdemError::Superseded { .. }), "{err}");
    assert_eq!(err.code(), idem_runtime::ErrorCode::Superseded);
    assert_eq!(err.code().as_str(), "superseded");
    // The new owner's outcome stands; a later duplicate gets it.
    let again = send(&exec, "ada", "c").await.unwrap();
    assert!(again.meta.deduplicated);
    assert_eq!(again.output, second.output);
}

#[tokio::test]
async fn after_a_crash_before_the_tool_started_a_non_idempotent_write_simply_runs() {
    let (exec, world, clock) = with_clock();
    crashed(&exec, &clock, "charge_card", "ada", "c", false).await;
    let out = charge(&exec, "ada", "c").await.unwrap();
    assert!(!out.meta.deduplicated);
    assert_eq!(
        world.effects(),
        ["charge_card:ada"],
        "known not applied: runs once"
    );
}

#[tokio::test]
async fn a_non_idempotent_write_marks_its_attempt_started_before_its_body_runs() {
    let (exec, _world) = fresh();
    let out = charge(&exec, "ada", "c").await.unwrap();
    let key = out.meta.key.unwrap();
    let record = exec.store().get(&key).await.unwrap().unwrap();
    assert_eq!(record.steps[idem_runtime::executor::ATTEMPT_STEP], 1);
    // An idempotent write needs no mark: a takeover re-runs it anyway.
    let out = send(&exec, "ada", "s").await.unwrap();
    let record = exec
        .store()
        .get(&out.meta.key.unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(record.steps.is_empty());
}

/// An executor with a short lease (renewed every third of it).
fn short_lease(lease: Duration) -> (Executor<App>, App) {
    let world = App::default();
    let exec = Executor::builder(MemoryStore::new())
        .state(world.clone())
        .lease(lease)
        .build();
    (exec, world)
}

#[tokio::test]
async fn a_call_slower_than_its_lease_keeps_it_and_a_duplicate_waits_for_its_result() {
    let (exec, world) = short_lease(Duration::from_millis(150));
    *world.delay.lock().unwrap() = Some(Duration::from_millis(600));
    let first = tokio::spawn({
        let exec = exec.clone();
        async move { send(&exec, "ada", "c").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Twice the lease later, the owner still holds the key: the duplicate
    // waits instead of taking over.
    let dup = send(&exec, "ada", "c").await.unwrap();
    let first = first.await.unwrap().unwrap();
    assert!(dup.meta.deduplicated);
    assert_eq!(dup.output, first.output);
    assert_eq!(world.calls(), 1, "one run");
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

/// A tool that waits to be told it lost its key, and reports what it saw.
#[derive(Clone, Copy)]
struct Patient;
impl ToolDef for Patient {
    type Class = NonIdempotentWrite;
    type Args = Msg;
    type Output = Sent;
    const SPEC: ToolSpec = ToolSpec::new("patient", "waits for its lease to be lost");
}
impl Tool<App> for Patient {
    fn call(
        &self,
        _args: Msg,
        ctx: &ToolCtx,
        world: &App,
    ) -> impl Future<Output = Result<Sent, ToolError>> + Send {
        let (ctx, world) = (ctx.clone(), world.clone());
        async move {
            assert!(!ctx.is_superseded());
            ctx.superseded().await;
            assert!(ctx.is_superseded());
            world.calls.fetch_add(1, Ordering::SeqCst);
            // A tool that ignores the signal and "finishes" anyway.
            Ok(Sent {
                id: "late".into(),
                key: None,
            })
        }
    }
}

#[tokio::test]
async fn an_owner_taken_over_is_told_through_its_ctx_and_its_late_result_is_not_recorded() {
    let clock = ManualClock::new(1_700_000_000_000);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let world = App::default();
    let exec = Executor::builder_shared(store.clone())
        .state(world.clone())
        .lease(Duration::from_millis(90))
        .build();
    let first = tokio::spawn({
        let exec = exec.clone();
        async move { exec.call(Patient, msg("ada")).call_id("c").await }
    });
    tokio::time::sleep(Duration::from_millis(10)).await;
    // The store's clock jumps past the lease (a paused process, a clock
    // step), and another worker takes the key over before the next renewal.
    let ns = idem_runtime::Namespace::default();
    let key = idem_runtime::key::derive_key(&idem_runtime::key::KeyInput {
        version: 1,
        namespace: &ns,
        tool: "patient",
        source: idem_runtime::key::KeySource::CallId("c"),
    })
    .unwrap();
    let args = serde_json::to_value(msg("ada")).unwrap();
    let fingerprint = idem_runtime::key::CanonicalArgs::from_value(&args)
        .unwrap()
        .fingerprint;
    clock.advance(Duration::from_secs(1));
    let ClaimOutcome::Acquired {
        fence, takeover, ..
    } = store
        .claim(&ClaimRequest {
            key: &key,
            tool: "patient",
            fingerprint: &fingerprint,
            check_fingerprint: true,
            lease: Duration::from_secs(60),
            info: idem_runtime::record::CallInfoRef::EMPTY,
            worker: None,
        })
        .await
        .unwrap()
    else {
        panic!("the lapsed lease is taken over");
    };
    assert!(takeover.is_some());
    // The first owner's next renewal finds the newer fence: its tool is
    // told, and what it returns afterwards is not recorded.
    let err = first.await.unwrap().unwrap_err();
    assert!(matches!(err, IdemError::Superseded { .. }), "{err}");
    assert_eq!(world.calls(), 1, "the tool saw the signal");
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.fence(), fence, "the new owner still holds the key");
    assert!(
        record.outcome().is_none(),
        "nothing recorded by the old owner"
    );
}

/// A store wrapper for the tests: counts the claims that reach the store,
/// and makes renewals work (`Renew`), fail as if the store could not be
/// reached (`Refused`; `Down`: recording an outcome fails too), or never
/// answer (`Hang`).
#[derive(Debug)]
struct Probe {
    inner: Arc<dyn Store>,
    renewals: Renewals,
    claims: AtomicUsize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Renewals {
    Renew,
    Refused,
    Down,
    Hang,
}

impl Probe {
    fn new(inner: impl Store, renewals: Renewals) -> Probe {
        Probe::shared(Arc::new(inner), renewals)
    }

    fn shared(inner: Arc<dyn Store>, renewals: Renewals) -> Probe {
        Probe {
            inner,
            renewals,
            claims: AtomicUsize::new(0),
        }
    }

    fn unreachable() -> StoreError {
        StoreError::Unavailable {
            store: "probe".into(),
            cause: "connection refused".into(),
        }
    }
}

#[async_trait::async_trait]
impl Store for Probe {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn claim(&self, r: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(r).await
    }
    async fn checkpoint(
        &self,
        k: &IdempotencyKey,
        f: Fence,
        s: &str,
        v: &Value,
        l: Duration,
    ) -> Result<(), StoreError> {
        self.inner.checkpoint(k, f, s, v, l).await
    }
    async fn renew(&self, k: &IdempotencyKey, f: Fence, l: Duration) -> Result<(), StoreError> {
        match self.renewals {
            Renewals::Renew => self.inner.renew(k, f, l).await,
            Renewals::Hang => std::future::pending().await,
            Renewals::Refused | Renewals::Down => Err(Self::unreachable()),
        }
    }
    async fn complete(
        &self,
        k: &IdempotencyKey,
        f: Fence,
        o: &Outcome,
        t: Duration,
    ) -> Result<(), StoreError> {
        if self.renewals == Renewals::Down {
            return Err(Self::unreachable());
        }
        self.inner.complete(k, f, o, t).await
    }
    async fn release(&self, k: &IdempotencyKey, f: Fence) -> Result<(), StoreError> {
        self.inner.release(k, f).await
    }
    async fn get(&self, k: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.inner.get(k).await
    }
    async fn replace(
        &self,
        k: &IdempotencyKey,
        e: idem_runtime::store::Expected,
        n: Option<&Record>,
        a: Option<&idem_runtime::audit::AuditEvent>,
    ) -> Result<Option<Fence>, StoreError> {
        self.inner.replace(k, e, n, a).await
    }
    async fn append_audit(
        &self,
        event: &idem_runtime::audit::AuditEvent,
    ) -> Result<u64, StoreError> {
        self.inner.append_audit(event).await
    }
    async fn audit(
        &self,
        query: &idem_runtime::audit::AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<idem_runtime::audit::AuditPage, StoreError> {
        self.inner.audit(query, cursor, limit).await
    }
    async fn scan(
        &self,
        c: Option<&str>,
        l: usize,
    ) -> Result<idem_runtime::store::ScanPage, StoreError> {
        self.inner.scan(c, l).await
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        self.inner.sweep().await
    }
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.inner.now().await
    }
}

#[tokio::test]
async fn when_renewals_fail_or_hang_the_owner_is_told_once_its_lease_would_lapse() {
    for renewals in [Renewals::Refused, Renewals::Down, Renewals::Hang] {
        let world = App::default();
        let exec = Executor::builder(Probe::new(MemoryStore::new(), renewals))
            .state(world.clone())
            .lease(Duration::from_millis(90))
            .build();
        let started = tokio::time::Instant::now();
        let result = exec.call(Patient, msg("ada")).call_id("c").await;
        // The tool was told only once the lease could have lapsed.
        assert!(started.elapsed() >= Duration::from_millis(90));
        assert_eq!(world.calls(), 1);
        if renewals == Renewals::Down {
            // Nothing could be recorded: the caller learns it was superseded.
            let err = result.unwrap_err();
            assert!(matches!(err, IdemError::Superseded { .. }), "{err}");
            assert!(std::error::Error::source(&err).is_some());
        } else {
            // Nobody took the key over meanwhile, so the fenced write of the
            // outcome is still the owner's, and it is accepted.
            assert_eq!(result.unwrap().output.id, "late");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_duplicates_in_one_process_cost_one_claim() {
    #[allow(unused_mut)]
    let mut stores: Vec<Arc<dyn Store>> = vec![Arc::new(MemoryStore::new())];
    #[cfg(feature = "sqlite")]
    let file = std::env::temp_dir().join(format!("idem-burst-{}.db", std::process::id()));
    #[cfg(feature = "sqlite")]
    stores.push(Arc::new(
        idem_runtime::store::SqliteStore::open(&file).await.unwrap(),
    ));
    for inner in stores {
        let store = Arc::new(Probe::shared(inner, Renewals::Renew));
        let world = App::default();
        // The call takes long enough for the whole burst to arrive (in a
        // debug build, 10,000 key derivations take about a second).
        *world.delay.lock().unwrap() = Some(Duration::from_secs(3));
        let exec = Executor::builder_shared(store.clone())
            .state(world.clone())
            .build();
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..10_000 {
            let exec = exec.clone();
            calls.spawn(async move { send(&exec, "ada", "storm").await });
        }
        let mut outputs = std::collections::BTreeSet::new();
        let mut deduplicated = 0;
        while let Some(done) = calls.join_next().await {
            let sent = done.unwrap().unwrap();
            deduplicated += usize::from(sent.meta.deduplicated);
            outputs.insert(sent.output.id);
        }
        let what = store.describe();
        assert_eq!(world.calls(), 1, "{what}: the tool ran once");
        assert_eq!(deduplicated, 9_999, "{what}");
        assert_eq!(outputs.len(), 1, "{what}: every caller got the same output");
        assert_eq!(
            store.claims.load(Ordering::SeqCst),
            1,
            "{what}: one claim reached the store"
        );
    }
    #[cfg(feature = "sqlite")]
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
}

#[tokio::test]
async fn a_follower_whose_leader_records_nothing_asks_the_store_itself() {
    let (exec, world) = fresh();
    *world.delay.lock().unwrap() = Some(Duration::from_millis(100));
    // The leader fails transiently: the key is released, nothing recorded.
    world.fail_next([ToolError::transient("503")]);
    let exec2 = exec.clone();
    let leader = tokio::spawn(async move { exec2.call(ChargeCard, msg("ada")).call_id("c").await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let follower = charge(&exec, "ada", "c").await;
    assert!(
        leader.await.unwrap().is_err(),
        "the leader's transient failure"
    );
    let follower = follower.unwrap();
    assert!(
        !follower.meta.deduplicated,
        "the follower ran the call itself"
    );
    assert_eq!(world.effects(), ["charge_card:ada"]);
}

/// A mail tool whose provider keeps a sent log but ignores idempotency keys:
/// it records the Message-ID it generates before sending, and its reconcile
/// hook looks that Message-ID up in the sent log. Its first run dies after
/// the provider accepted the mail, before the outcome is recorded.
#[derive(Clone, Copy)]
struct MailWithIntent;
impl ToolDef for MailWithIntent {
    type Class = NonIdempotentWrite;
    type Args = Msg;
    type Output = Sent;
    const SPEC: ToolSpec = ToolSpec {
        has_reconcile: true,
        ..ToolSpec::new("mail_with_intent", "sends one mail")
    };
}
impl Tool<App> for MailWithIntent {
    fn call(
        &self,
        args: Msg,
        ctx: &ToolCtx,
        world: &App,
    ) -> impl Future<Output = Result<Sent, ToolError>> + Send {
        let (ctx, world) = (ctx.clone(), world.clone());
        async move {
            // Not derived from the key: the provider makes it up.
            let message_id = format!("<{}.{}@mail>", args.to, world.calls() + 7);
            ctx.intent(&message_id).await?;
            // A slow provider, when the test asks for one.
            let latency = *world.delay.lock().unwrap();
            if let Some(latency) = latency {
                tokio::time::sleep(latency).await;
            }
            world.calls.fetch_add(1, Ordering::SeqCst);
            world.effects.lock().unwrap().push(message_id.clone());
            if !world.crashed.swap(true, Ordering::SeqCst) {
                panic!("process killed after the provider accepted the mail");
            }
            Ok(Sent {
                id: message_id,
                key: None,
            })
        }
    }
    fn reconcile(
        &self,
        _args: &Msg,
        ctx: &ToolCtx,
        world: &App,
    ) -> impl Future<Output = Result<Reconciled<Sent>, ToolError>> + Send {
        let found = match ctx.recorded_intent::<String>() {
            Some(Ok(message_id)) if world.effects().contains(&message_id) => {
                Reconciled::Applied(Sent {
                    id: message_id,
                    key: None,
                })
            }
            Some(Ok(_)) => Reconciled::NotApplied,
            Some(Err(_)) | None => Reconciled::Unknown,
        };
        std::future::ready(Ok(found))
    }
}

#[tokio::test]
async fn a_reconcile_hook_finds_the_mail_by_the_intent_recorded_before_sending() {
    let (exec, world, clock) = with_clock();
    let first = {
        let exec = exec.clone();
        tokio::spawn(async move { exec.call(MailWithIntent, msg("ada")).call_id("m").await })
    };
    assert!(first.await.unwrap_err().is_panic());
    assert_eq!(world.effects(), ["<ada.7@mail>"]);
    // The dead owner's lease runs out; the model's retry takes the key over.
    clock.advance(Duration::from_secs(60));
    let out = exec
        .call(MailWithIntent, msg("ada"))
        .call_id("m")
        .await
        .unwrap();
    assert_eq!(
        out.output.id, "<ada.7@mail>",
        "found by its recorded intent"
    );
    assert!(out.meta.deduplicated, "not sent again");
    assert_eq!(world.effects(), ["<ada.7@mail>"]);
}

#[tokio::test]
async fn a_takeover_reconciles_only_once_the_previous_owners_attempt_must_be_over() {
    // Worker A's renewals hang (a store too busy to answer in time), so its
    // lease lapses on the store while it is inside a slow provider call.
    let clock = ManualClock::new(1_700_000_000_000);
    let store: Arc<dyn Store> = Arc::new(Probe::new(
        MemoryStore::with_clock(Arc::new(clock.clone())),
        Renewals::Hang,
    ));
    let world = App::default();
    world.crashed.store(true, Ordering::SeqCst); // no crash: a slow mail
    *world.delay.lock().unwrap() = Some(Duration::from_millis(300));
    let worker = || {
        Executor::builder_shared(store.clone())
            .state(world.clone())
            .lease(Duration::from_secs(5))
            .timeout(Duration::from_secs(1))
            .build()
    };
    let (a, b) = (worker(), worker());
    let first = tokio::spawn(async move { a.call(MailWithIntent, msg("ada")).call_id("m").await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    clock.advance(Duration::from_secs(60));
    // Worker B takes the key over while A's mail is still on its way. Asked
    // now, the sent log would not have it yet; B waits out A's attempt.
    let out = b
        .call(MailWithIntent, msg("ada"))
        .call_id("m")
        .await
        .unwrap();
    assert_eq!(world.effects().len(), 1, "one mail: {:?}", world.effects());
    assert_eq!(out.output.id, world.effects()[0], "found in the sent log");
    assert!(out.meta.deduplicated);
    let err = first.await.unwrap().unwrap_err();
    assert!(matches!(err, IdemError::Superseded { .. }), "{err}");
}
