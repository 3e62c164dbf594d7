//! After an owner crashed: its key is taken over once its lease ran out,
//! and the call is re-run, refused as unknown, or decided by the tool's
//! reconcile hook, by its class, what it marked before it started and the
//! intent it recorded; a multi-step tool resumes after its last step.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{charge, fresh, msg, probed, send, with_clock, App, Msg, Renewals, Sent};
use idem_runtime::class::{IdempotentWrite, NonIdempotentWrite};
use idem_runtime::clock::ManualClock;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, ClaimRequest, MemoryStore, Store};
use idem_runtime::{Executor, IdemError, Reconciled, Tool, ToolCtx, ToolDef, ToolError, ToolSpec};
use serde_json::Value;

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
            durable: true,
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
    let store: Arc<dyn Store> = Arc::new(probed(
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

#[tokio::test]
async fn a_takeovers_wait_is_in_the_record_and_an_operator_resolving_it_ends_it() {
    // Worker A crashed after it started the mail; worker B, with a
    // thirty-second attempt timeout, takes the key over and waits.
    let store = Arc::new(MemoryStore::new());
    let world = App::default();
    let worker = |timeout| {
        Executor::builder_shared(store.clone())
            .state(world.clone())
            .lease(Duration::from_millis(600))
            .timeout(timeout)
            .build()
    };
    let a = worker(Duration::from_secs(30));
    let err = tokio::spawn(async move { a.call(MailWithIntent, msg("ada")).call_id("m").await })
        .await
        .unwrap_err();
    assert!(err.is_panic(), "A died mid-call");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let b = worker(Duration::from_secs(30));
    let started = std::time::Instant::now();
    let waiting =
        tokio::spawn(async move { b.call(MailWithIntent, msg("ada")).call_id("m").await });

    // The record says whose attempt B waits out, and until when.
    let operator = idem_runtime::operator::Operator::new(store.clone() as Arc<dyn Store>);
    let record = loop {
        let page = operator.list(&Default::default(), None, 10).await.unwrap();
        if let Some(r) = page.records.into_iter().find(|r| r.outlast().is_some()) {
            break r;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no wait recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let wait = record.outlast().unwrap();
    let now = store.now().await.unwrap();
    assert!(
        wait.until > now.plus(Duration::from_secs(25)),
        "{wait:?} at {now:?}"
    );

    // A person who checked the sent log settles it at once: B's wait ends,
    // and its caller gets the resolution, long before the thirty seconds.
    let found = serde_json::json!({ "id": world.effects()[0], "key": null });
    let actor = idem_runtime::operator::Actor::new("ops").because("in the sent log");
    operator
        .resolve(
            &record.key,
            idem_runtime::operator::Resolution::Succeeded(found.clone()),
            &actor,
        )
        .await
        .expect("a waiting takeover can be settled under its live lease");
    let out = waiting.await.unwrap().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the wait ended: {:?}",
        started.elapsed()
    );
    assert!(out.meta.deduplicated, "answered from the resolution");
    assert_eq!(out.output.id, world.effects()[0]);
    assert_eq!(world.effects().len(), 1, "sent once: {:?}", world.effects());
}

#[tokio::test]
async fn a_takeover_of_a_tool_without_a_hook_is_unknown_at_once_not_after_its_timeout() {
    let (exec, world, clock) = with_clock();
    crashed_owner(&exec, &clock, "charge_card", "ada", "c").await;
    let hour = Executor::builder_shared(exec.store().clone())
        .state(world.clone())
        .timeout(Duration::from_secs(3600))
        .build();
    let started = std::time::Instant::now();
    let err = charge(&hour, "ada", "c").await.unwrap_err();
    assert!(matches!(err, IdemError::OutcomeUnknown { .. }), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
