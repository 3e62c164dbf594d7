//! The executor's deduplication, through its public API: a call id or a
//! run step keys a call, its duplicate gets the recorded result (waiting
//! for it while the call runs), and the same key with other arguments is
//! refused. (A burst of duplicates in one process costing one claim, on
//! the in-memory store and on SQLite: idem-testkit's `faults` tests.)

use std::future::IntoFuture;
use std::time::Duration;

use crate::support::{charge, fresh, msg, send, App, ChargeCard, LookUp, SendEmail};
use idem_runtime::executor::InFlightPolicy;
use idem_runtime::store::MemoryStore;
use idem_runtime::{Executor, IdemError, ToolError};

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
