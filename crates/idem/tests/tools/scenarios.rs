//! The failure modes of at-least-once tool execution, each as a scenario
//! through the public API: what happens, and that the effect is applied
//! exactly once (or refused).

use std::future::IntoFuture;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use idem::clock::ManualClock;
use idem::dispatch::{Arguments, ToolCall};
use idem::prelude::*;
use idem::provider::{OpenAi, Provider};

fn email() -> SendEmail {
    SendEmail {
        to: "ada@example.com".into(),
        subject: "Your invoice".into(),
        body: "Hello Ada, your November invoice is attached.".into(),
    }
}

fn executor(app: &App) -> Executor<App> {
    Executor::builder(MemoryStore::new())
        .state(app.clone())
        .build()
}

/// The provider accepts the email but its response never arrives; the call
/// times out (an ambiguous error) and is retried with the same key, which
/// the provider recognises: one email.
#[tokio::test(start_paused = true)]
async fn provider_timeout_after_acceptance_then_retry_sends_one_email() {
    let app = App::default();
    let exec = executor(&app);
    app.mail.lose_next_response.store(true, Ordering::SeqCst);

    let sent = exec
        .call(send_email, email())
        .call_id("call_1")
        .await
        .unwrap();

    assert_eq!(sent.meta.attempts, 2, "the timeout was retried");
    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 2);
    assert_eq!(app.mail.delivered().len(), 1, "one email");
    assert_eq!(sent.output.message_id, app.mail.delivered()[0].0);
}

/// The dispatcher sends the email, then its process dies before the outcome
/// is recorded. Another worker picks the call up after the lease expires
/// and runs it again with the same key; the provider deduplicates: one
/// email.
#[tokio::test]
async fn crash_after_sending_before_recording_sends_one_email() {
    let app = App::default();
    let clock = ManualClock::new(1_764_460_800_000);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));

    // Worker 1 claims the key and sends; the provider accepts; the process
    // dies before the response is processed and the outcome recorded.
    app.mail.lose_next_response.store(true, Ordering::SeqCst);
    {
        let worker = Executor::builder_shared(store.clone())
            .state(app.clone())
            .build();
        let dying = tokio::spawn(async move {
            let call = worker
                .call(send_email, email())
                .call_id("call_1")
                .into_future();
            // The process is killed once the provider has accepted.
            tokio::select! {
                _ = call => unreachable!("the process died before recording"),
                _ = async {
                    while app_requests(&worker) == 0 {
                        tokio::task::yield_now().await;
                    }
                } => {}
            }
        });
        dying.await.unwrap();
    }
    assert_eq!(app.mail.delivered().len(), 1);
    // Its lease (15 s, no longer renewed by the dead process) runs out.
    clock.advance(Duration::from_secs(16));

    // Worker 2 sees the model's retry of the same call.
    let worker = Executor::builder_shared(store).state(app.clone()).build();
    let sent = worker
        .call(send_email, email())
        .call_id("call_1")
        .await
        .unwrap();

    assert!(!sent.meta.deduplicated, "taken over and re-run");
    assert_eq!(app.mail.requests.load(Ordering::SeqCst), 2);
    assert_eq!(app.mail.delivered().len(), 1, "one email");
    assert_eq!(sent.output.message_id, "msg_1");

    fn app_requests(worker: &Executor<App>) -> usize {
        worker.state().mail.requests.load(Ordering::SeqCst)
    }
}

/// The model, not seeing a result, emits the same tool call again.
#[tokio::test]
async fn model_repeats_a_call_with_the_same_id_and_gets_the_recorded_result() {
    let app = App::default();
    let dispatcher = Dispatcher::new(executor(&app), registry());
    let call = || ToolCall {
        id: Some("call_2Wn4Ut6Ezpa4mJaUQ4ye0jBz".into()),
        name: "send_email".into(),
        arguments: Arguments::Text(serde_json::to_string(&email()).unwrap()),
    };
    let first = dispatcher
        .dispatch_one(call(), &RunContext::default())
        .await;
    let second = dispatcher
        .dispatch_one(call(), &RunContext::default())
        .await;

    assert!(!first.deduplicated());
    assert!(second.deduplicated());
    assert_eq!(
        OpenAi::result(&first),
        OpenAi::result(&second),
        "the model sees the same result"
    );
    assert_eq!(app.mail.delivered().len(), 1);
}

/// A run that opened 40 tickets is replayed from a checkpoint: no ticket is
/// opened again, whether the replay runs live or in replay mode.
#[tokio::test]
async fn replaying_forty_ticket_creations_opens_no_new_ticket() {
    let app = App::default();
    let exec = executor(&app);
    let run = |exec: Executor<App>| async move {
        let mut numbers = Vec::new();
        for step in 0..40 {
            let ticket = CreateTicket {
                title: format!("Follow up #{step}"),
                priority: 3,
            };
            // No provider call ids: the run id and step key each call.
            let out = exec
                .call(create_ticket, ticket)
                .run("run-2026-11-29", step)
                .await
                .unwrap();
            numbers.push((out.output.number, out.meta.deduplicated));
        }
        numbers
    };
    let original = run(exec.clone()).await;
    assert_eq!(app.tickets.created.lock().unwrap().len(), 40);
    assert!(original.iter().all(|(_, dedup)| !dedup));

    let live_replay = run(exec.clone()).await;
    let strict_replay = run(exec.replaying()).await;

    assert_eq!(
        app.tickets.created.lock().unwrap().len(),
        40,
        "0 new tickets"
    );
    for replay in [live_replay, strict_replay] {
        assert!(replay.iter().all(|(_, dedup)| *dedup));
        let numbers: Vec<usize> = replay.iter().map(|(n, _)| *n).collect();
        let original: Vec<usize> = original.iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, original, "each step gets its own recorded ticket");
    }
}

/// Replay mode never acts: a write with no record is refused.
#[tokio::test]
async fn replay_mode_refuses_a_write_it_has_no_record_of() {
    let app = App::default();
    let exec = executor(&app).replaying();
    let err = exec
        .call(
            create_ticket,
            CreateTicket {
                title: "New".into(),
                priority: 2,
            },
        )
        .run("run-1", 0)
        .await
        .unwrap_err();
    assert!(matches!(err, IdemError::NotRecorded { .. }), "{err}");
    assert!(app.tickets.created.lock().unwrap().is_empty());
}

/// The same reminder tomorrow is a new call with a new id: it is sent, not
/// swallowed as a duplicate of today's.
#[tokio::test]
async fn the_same_reminder_tomorrow_is_sent_again() {
    let app = App::default();
    let exec = executor(&app);
    let reminder = SendEmail {
        to: "ada@example.com".into(),
        subject: "Reminder: invoice due".into(),
        body: "Hello Ada, a friendly reminder.".into(),
    };
    let today = exec
        .call(send_email, reminder.clone())
        .call_id("call_today")
        .await
        .unwrap();
    let tomorrow = exec
        .call(send_email, reminder)
        .call_id("call_tomorrow")
        .await
        .unwrap();

    assert!(!tomorrow.meta.deduplicated);
    assert_ne!(today.output.message_id, tomorrow.output.message_id);
    assert_eq!(app.mail.delivered().len(), 2);
}

/// `add_credit(10)` written as a delta and retried after three lost
/// responses grants 30: the class promised idempotency the tool does not
/// have. The same intent as a keyed grant (the key is the grant id the
/// ledger deduplicates on) grants exactly 10.
#[tokio::test(start_paused = true)]
async fn a_delta_retried_three_times_grants_thirty_a_keyed_grant_exactly_ten() {
    let credit = || Credit {
        account: "acct_7".into(),
        amount: 10,
    };

    let app = App::default();
    app.ledger.lose_responses.store(2, Ordering::SeqCst);
    let out = executor(&app)
        .call(add_credit_delta, credit())
        .call_id("call_1")
        .await
        .unwrap();
    assert_eq!(out.meta.attempts, 3);
    assert_eq!(app.ledger.balance(), 30, "the anti-pattern double-grants");

    let app = App::default();
    app.ledger.lose_responses.store(2, Ordering::SeqCst);
    let out = executor(&app)
        .call(grant_credit, credit())
        .call_id("call_1")
        .await
        .unwrap();
    assert_eq!(out.meta.attempts, 3);
    assert_eq!(app.ledger.balance(), 10, "exactly one grant");
    assert_eq!(out.output, 10);
}

/// A definite failure (a validation error from the ticket system) is
/// recorded: the model's retry gets the same error and nothing is created.
#[tokio::test]
async fn a_permanent_failure_is_recorded_and_replayed() {
    let app = App::default();
    let exec = executor(&app);
    let bad = || CreateTicket {
        title: "Invoice question".into(),
        priority: 9,
    };
    let err = exec
        .call(create_ticket, bad())
        .call_id("call_1")
        .await
        .unwrap_err();
    assert!(matches!(err, IdemError::Tool { .. }), "{err}");
    assert!(err.to_string().contains("out of range"), "{err}");
    let again = exec
        .call(create_ticket, bad())
        .call_id("call_1")
        .await
        .unwrap_err();
    assert!(again.is_deduplicated());
    assert_eq!(
        again
            .to_string()
            .replace(" (recorded result of an earlier call)", ""),
        err.to_string()
    );
    assert!(app.tickets.created.lock().unwrap().is_empty());
}

/// Two tenants whose models happen to use the same call id get their own
/// records: neither receives the other's result.
#[tokio::test]
async fn tenants_never_share_records() {
    use idem::Namespace;
    let app = App::default();
    let exec = executor(&app);
    let acme = Namespace::new("acme").unwrap();
    let globex = Namespace::new("globex").unwrap();
    let a = exec
        .call(send_email, email())
        .call_id("call_1")
        .namespace(acme)
        .await
        .unwrap();
    let b = exec
        .call(send_email, email())
        .call_id("call_1")
        .namespace(globex)
        .await
        .unwrap();
    assert!(!b.meta.deduplicated);
    assert_ne!(a.meta.key, b.meta.key);
    assert_ne!(a.output.message_id, b.output.message_id);
    assert_eq!(app.mail.delivered().len(), 2);
}

/// An irreversible call dispatched from model output asks the approval
/// policy once; the decision is recorded, so the model's retry and a replay
/// neither ask again nor run again.
#[tokio::test]
async fn the_approval_policy_is_asked_once_per_call() {
    use idem::approval::{Approval, ApprovalDecision, Callback};
    use std::sync::atomic::AtomicUsize;

    let asked = Arc::new(AtomicUsize::new(0));
    let policy = {
        let asked = asked.clone();
        Callback::new(move |req| {
            asked.fetch_add(1, Ordering::SeqCst);
            async move {
                assert_eq!(req.args["account"], "acct_9");
                Ok(ApprovalDecision::Approved(Approval::granted_by("on-call")))
            }
        })
    };
    let app = App::default();
    let exec = Executor::builder(MemoryStore::new())
        .state(app.clone())
        .approvals(policy)
        .build();
    let dispatcher = Dispatcher::new(exec.clone(), registry());
    let call = || ToolCall {
        id: Some("toolu_delete".into()),
        name: "delete_account".into(),
        arguments: Arguments::Json(serde_json::json!({"account": "acct_9"})),
    };
    let first = dispatcher
        .dispatch_one(call(), &RunContext::default())
        .await;
    let retry = dispatcher
        .dispatch_one(call(), &RunContext::default())
        .await;
    let replay = Dispatcher::new(exec.replaying(), registry())
        .dispatch_one(call(), &RunContext::default())
        .await;

    assert_eq!(first.content(), serde_json::json!("deleted acct_9"));
    assert!(retry.deduplicated() && replay.deduplicated());
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let record = exec
        .store()
        .get(first.meta().unwrap().key.as_ref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.steps["idem:approval"]["approver"], "on-call");
}

/// The sweeper deletes records once their TTL has passed, so the same key
/// can be used again; it never touches a call in flight.
#[tokio::test]
async fn the_sweeper_deletes_expired_records_only() {
    let clock = ManualClock::new(1_764_460_800_000);
    let store = Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let app = App::default();
    let exec = Executor::builder_shared(store.clone())
        .state(app.clone())
        .ttl(Duration::from_secs(3600))
        .build();
    exec.call(send_email, email())
        .call_id("call_1")
        .await
        .unwrap();
    let _sweeper = idem::store::spawn_sweeper(store.clone(), Duration::from_millis(10));

    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(store.len(), 1, "not expired yet");
    clock.advance(Duration::from_secs(3601));
    for _ in 0..200 {
        if store.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(store.is_empty(), "the expired record was not swept");
}

/// 10,000 concurrent duplicates of one call (a retry storm) execute the
/// tool once, and every caller gets the same result — on the in-memory
/// store and on the embedded SQLite default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_duplicates_send_one_email() {
    let dir = std::env::temp_dir().join(format!("idem-storm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    #[allow(unused_mut)]
    let mut stores: Vec<Arc<dyn idem::Store>> = vec![Arc::new(MemoryStore::new())];
    #[cfg(feature = "sqlite")]
    stores.push(Arc::new(
        idem::store::SqliteStore::open(dir.join("storm.db"))
            .await
            .unwrap(),
    ));
    for store in stores {
        let app = App::default();
        let exec = Executor::builder_shared(store.clone())
            .state(app.clone())
            .build();
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..10_000 {
            let exec = exec.clone();
            calls.spawn(async move { exec.call(send_email, email()).call_id("call_storm").await });
        }
        let mut ids = std::collections::BTreeSet::new();
        let mut fresh = 0;
        while let Some(done) = calls.join_next().await {
            let sent = done.unwrap().unwrap();
            fresh += usize::from(!sent.meta.deduplicated);
            ids.insert(sent.output.message_id);
        }
        assert_eq!(
            app.mail.requests.load(Ordering::SeqCst),
            1,
            "{}",
            store.describe()
        );
        assert_eq!(fresh, 1);
        assert_eq!(ids.len(), 1, "every caller got the same result");
    }
    std::fs::remove_dir_all(&dir).ok();
}
