//! Leases: a call slower than its lease keeps it by renewing, an owner
//! whose lease was taken over is told (through its `ToolCtx`) and records
//! nothing, and one whose renewals fail or hang is told once its lease
//! would lapse.

use std::future::{Future, IntoFuture};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::support::{msg, probed, send, with_clock, App, Msg, Renewals, Sent};
use idem_runtime::class::NonIdempotentWrite;
use idem_runtime::clock::ManualClock;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, ClaimRequest, MemoryStore};
use idem_runtime::{Executor, IdemError, Tool, ToolCtx, ToolDef, ToolError, ToolSpec};

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

/// A tool that waits to be told it lost its key, and reports what it saw
/// (`WaitsForLoss`); or that relabels its context (as one handing a
/// sub-task a context of its own would), outlives its lease several times
/// over while the executor renews it, and counts 100 for each time the
/// relabeled context took the key for lost (`Relabels`); or that blocks
/// its thread for four leases, as a function of another language called
/// in place does, inside [`ToolCtx::run_blocking`] (`kept`) or not
/// (`Blocks`).
#[derive(Clone, Copy)]
enum Patient {
    WaitsForLoss,
    Relabels,
    Blocks { kept: bool },
}
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
        if let Patient::Blocks { kept } = *self {
            // In the first poll, as a blocking body runs.
            let body = || std::thread::sleep(Duration::from_millis(600));
            match kept {
                true => ctx.run_blocking(body),
                false => body(),
            }
        }
        let (ctx, world, mode) = (ctx.clone(), world.clone(), *self);
        async move {
            match mode {
                Patient::WaitsForLoss => {
                    assert!(!ctx.is_superseded());
                    ctx.superseded().await;
                    assert!(ctx.is_superseded());
                }
                Patient::Relabels => {
                    let relabeled = ctx
                        .with_call_id(Some("sub-task".into()))
                        .with_namespace(idem_runtime::Namespace::new("tenant-b").unwrap());
                    assert_eq!(relabeled.call_id(), Some("sub-task"));
                    // Four leases long, renewed every third of one.
                    for _ in 0..12 {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        if relabeled.is_superseded() {
                            world.calls.fetch_add(100, Ordering::SeqCst);
                        }
                    }
                }
                Patient::Blocks { .. } => {}
            }
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
        async move {
            exec.call(Patient::WaitsForLoss, msg("ada"))
                .call_id("c")
                .await
        }
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
            durable: true,
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

#[tokio::test]
async fn when_renewals_fail_or_hang_the_owner_is_told_once_its_lease_would_lapse() {
    for renewals in [Renewals::Refused, Renewals::Down, Renewals::Hang] {
        let world = App::default();
        let exec = Executor::builder(probed(MemoryStore::new(), renewals))
            .state(world.clone())
            .lease(Duration::from_millis(90))
            .build();
        let started = tokio::time::Instant::now();
        let result = exec
            .call(Patient::WaitsForLoss, msg("ada"))
            .call_id("c")
            .await;
        // The tool was told only once the lease could have lapsed.
        assert!(started.elapsed() >= Duration::from_millis(90));
        assert_eq!(world.calls(), 1);
        if renewals == Renewals::Down {
            // Nothing could be recorded, and nobody took the key over: the
            // caller learns the tool ran and its outcome is in doubt.
            let err = result.unwrap_err();
            assert!(matches!(err, IdemError::OutcomeNotRecorded { .. }), "{err}");
            assert!(std::error::Error::source(&err).is_some());
        } else {
            // Nobody took the key over meanwhile, so the fenced write of the
            // outcome is still the owner's, and it is accepted.
            assert_eq!(result.unwrap().output.id, "late");
        }
    }
}

#[tokio::test]
async fn a_context_relabeled_by_its_tool_follows_the_calls_lease_through_renewals() {
    let (exec, world) = short_lease(Duration::from_millis(150));
    let done = exec
        .call(Patient::Relabels, msg("ada"))
        .call_id("c")
        .await
        .unwrap();
    assert_eq!(done.output.id, "late");
    // Before: a relabeled context was a copy of the lease as it stood,
    // told of no renewal, so it took the key for lost a lease later.
    assert_eq!(world.calls(), 1, "the relabeled context never saw a loss");
}

/// A call of [`Patient::Blocks`] made on a thread of its own (the executor polled
/// there, as from Python), and after two leases the same call from
/// another worker, which refuses to wait for a call in flight: the two
/// results and how many times the body ran.
fn blocked_then_repeated(kept: bool) -> [Result<Sent, IdemError>; 2] {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store: Arc<MemoryStore> = Arc::new(MemoryStore::new());
    let world = App::default();
    let worker = || {
        Executor::builder_shared(store.clone())
            .state(world.clone())
            .lease(Duration::from_millis(150))
            .on_in_flight(idem_runtime::executor::InFlightPolicy::Reject)
            .build()
    };
    let (first, other) = (worker(), worker());
    let handle = runtime.handle().clone();
    let blocked = std::thread::spawn(move || {
        let call = first
            .call(Patient::Blocks { kept }, msg("ada"))
            .call_id("c");
        handle.block_on(call.into_future()).map(|out| out.output)
    });
    std::thread::sleep(Duration::from_millis(300));
    let call = other
        .call(Patient::Blocks { kept }, msg("ada"))
        .call_id("c");
    let repeated = runtime.block_on(call.into_future()).map(|out| out.output);
    [blocked.join().unwrap(), repeated]
}

#[test]
fn a_body_blocking_its_thread_in_run_blocking_keeps_its_lease() {
    let [blocked, repeated] = blocked_then_repeated(true);
    assert_eq!(blocked.unwrap().id, "late");
    let err = repeated.unwrap_err();
    assert!(matches!(err, IdemError::InFlight { .. }), "{err}");
    // Without it, nothing renews the lease while the body blocks: the
    // other worker finds it lapsed and takes the key over, and the first
    // owner's late outcome is refused.
    let [blocked, repeated] = blocked_then_repeated(false);
    assert!(!matches!(repeated, Err(IdemError::InFlight { .. })));
    assert!(matches!(blocked, Err(IdemError::Superseded { .. })));
}
