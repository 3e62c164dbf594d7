//! The simulation against correct stores: no duplicate effect and no lost
//! result, on every store; on the memory store, the same seed replays the
//! same way; and power cuts, struck by hand, lose what the classes allow
//! and nothing more.

use std::sync::Arc;

use idem_runtime::store::StoreExt;
use idem_runtime::Store;
use idem_testkit::{
    skip, CrashPoint, Fault, PostgresServer, RedisServer, Schedule, ScheduleReport, Summary,
    TempDir, Timing,
};

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in [1, 7, 42, 1234] {
        let first = idem_testkit::run_memory(seed);
        let again = idem_testkit::run_memory(seed);
        assert_eq!(first.trace, again.trace, "seed {seed} replayed differently");
        assert_eq!(first.trace_hash, again.trace_hash);
        assert!(first.trace.len() > 10, "seed {seed} did next to nothing");
    }
    assert_ne!(
        idem_testkit::run_memory(1).trace_hash,
        idem_testkit::run_memory(2).trace_hash,
        "different seeds should make different schedules"
    );
}

#[test]
fn memory_store_no_duplicates_and_no_lost_results() {
    let mut summary = Summary::default();
    for seed in 1..=500 {
        summary.add(&idem_testkit::run_memory(seed));
    }
    eprintln!("memory: {}", summary.line());
    assert!(
        summary.passed(),
        "failing seeds: {:?}",
        summary.failing_seeds
    );
    // The faults did strike, power cuts that lost claims among them.
    assert!(summary.stale_writes_rejected > 0 && summary.unknown_outcomes > 0);
    assert!(summary.reconciled > 0);
    assert!(summary.power_cuts > 0 && summary.claims_undone > 0);
}

/// Run a schedule written by hand on the memory store, and check it.
fn scripted(calls: &[(&str, &[(f64, Fault)])]) -> ScheduleReport {
    let schedule = Schedule::scripted(1, &Timing::virtual_time(), calls);
    let report = idem_testkit::run_memory_schedule(&schedule, |store| store);
    let trace = report.trace.join("\n");
    assert!(!report.failed(), "the checks failed:\n{trace}");
    assert_eq!(report.unsettled, 0, "a call was left unsettled:\n{trace}");
    assert_eq!(
        report.power_cuts, 1,
        "the power cut did not strike:\n{trace}"
    );
    report
}

/// How many lines of the trace contain every one of `parts`.
fn lines(report: &ScheduleReport, parts: &[&str]) -> usize {
    report
        .trace
        .iter()
        .filter(|line| parts.iter().all(|p| line.contains(p)))
        .count()
}

/// An idempotent write's claim is not durable: a power cut before anything
/// else of the call reached the disk loses it. The call then runs again
/// with the same key (the payment provider answers the repeat from its
/// first response when the effect had applied) and is recorded once; a
/// worker that lived through the cut is refused by the store and records
/// nothing.
#[test]
fn a_power_cut_loses_an_idempotent_writes_claim_and_the_call_reruns_once() {
    for worker_dies in [true, false] {
        for at in [
            CrashPoint::AfterClaim,
            CrashPoint::AfterProvider,
            CrashPoint::BeforeRecord,
        ] {
            let cut = Fault::PowerCut { at, worker_dies };
            let report = scripted(&[("charge", &[(0.0, cut)])]);
            let trace = report.trace.join("\n");
            assert_eq!(report.claims_undone, 1, "{cut}: nothing lost:\n{trace}");
            assert_eq!(lines(&report, &["power cut", "record gone"]), 1, "{trace}");
            // Claimed twice, under the same key, the second time afresh:
            // the record was gone, not taken over.
            assert_eq!(lines(&report, &["Claim", "-> acquired"]), 2, "{trace}");
            assert_eq!(lines(&report, &["taking over"]), 0, "{trace}");
            // One effect, one outcome recorded.
            assert_eq!(lines(&report, &["EFFECT charge"]), 1, "{trace}");
            assert_eq!(lines(&report, &["Complete", "-> ok"]), 1, "{trace}");
            let effect_before_cut = at != CrashPoint::AfterClaim || !worker_dies;
            assert_eq!(
                lines(&report, &["payments: repeat of key"]),
                usize::from(effect_before_cut),
                "{cut}: the re-run must reach the provider with the same key:\n{trace}"
            );
            if !worker_dies {
                // The survivor's completion under the lost fence.
                assert_eq!(
                    lines(&report, &["w1 Complete", "REJECTED"]),
                    1,
                    "{cut}: the survivor must record nothing:\n{trace}"
                );
            }
            assert_eq!(report.unknown_outcomes, 0, "{trace}");
        }
    }
}

/// A power cut after a non-durable takeover gives the record back in
/// flight (under a fresh fence, with its lease run out): the owner it had
/// been taken from, frozen meanwhile, is refused, and the call is re-run
/// with the same key and recorded once.
#[test]
fn a_power_cut_after_a_takeover_gives_the_record_back() {
    let report = scripted(&[
        (
            "charge",
            &[
                (
                    0.0,
                    Fault::Pause(
                        idem_testkit::PausePoint::AfterClaim,
                        Timing::virtual_time().lease * 2,
                    ),
                ),
                (
                    1.2,
                    Fault::PowerCut {
                        at: CrashPoint::AfterClaim,
                        worker_dies: true,
                    },
                ),
            ],
        ),
        // A durable claim in between flushes the first owner's claim.
        ("send_email", &[(0.5, Fault::None)]),
    ]);
    let trace = report.trace.join("\n");
    assert_eq!(report.claims_undone, 1, "{trace}");
    assert_eq!(
        lines(&report, &["power cut", "in flight again"]),
        1,
        "{trace}"
    );
    assert_eq!(lines(&report, &["EFFECT charge"]), 1, "{trace}");
    assert_eq!(lines(&report, &["EFFECT mail"]), 1, "{trace}");
    assert_eq!(lines(&report, &["Complete", "-> ok"]), 2, "{trace}");
}

/// A non-idempotent or irreversible call's claim and started mark are
/// durable: a power cut after the mark loses neither, so the call is
/// never run twice. Its worker dead, the call is reconciled (`send_email`
/// looks its Message-ID up) or refused as unknown (`delete_account`);
/// alive, it finishes.
#[test]
fn a_power_cut_after_a_started_mark_never_runs_the_call_twice() {
    for (tool, effect) in [
        ("send_email", "EFFECT mail"),
        ("delete_account", "EFFECT delete"),
    ] {
        for worker_dies in [true, false] {
            for at in [
                CrashPoint::AfterStarted,
                CrashPoint::AfterIntent,
                CrashPoint::AfterProvider,
            ] {
                let cut = Fault::PowerCut { at, worker_dies };
                let report = scripted(&[(tool, &[(0.0, cut)])]);
                let trace = report.trace.join("\n");
                assert_eq!(report.claims_undone, 0, "{tool} {cut}:\n{trace}");
                let effects = lines(&report, &[effect]);
                assert!(effects <= 1, "{tool} {cut}: ran twice:\n{trace}");
                if !worker_dies {
                    assert_eq!(effects, 1, "{tool} {cut}:\n{trace}");
                    assert_eq!(report.unknown_outcomes + report.reconciled, 0, "{trace}");
                } else if tool == "send_email" {
                    assert_eq!(effects, 1, "{tool} {cut}:\n{trace}");
                    assert!(
                        report.reconciled > 0,
                        "{tool} {cut}: not reconciled:\n{trace}"
                    );
                } else {
                    assert_eq!(
                        effects,
                        usize::from(at == CrashPoint::AfterProvider),
                        "{tool} {cut}:\n{trace}"
                    );
                    assert!(
                        report.unknown_outcomes > 0,
                        "{tool} {cut}: not refused as unknown:\n{trace}"
                    );
                }
            }
        }
    }
}

/// How many schedules each durable store's test runs: 40, or
/// `IDEM_SIM_DURABLE_SCHEDULES` (the figures quoted run 1,000).
fn durable_schedules() -> u64 {
    std::env::var("IDEM_SIM_DURABLE_SCHEDULES")
        .ok()
        .map(|n| n.parse().expect("IDEM_SIM_DURABLE_SCHEDULES: a number"))
        .unwrap_or(40)
}

/// `schedules` schedules on a durable store, forty at a time, in real
/// time: they spend most of it waiting out leases and pauses (40 use some
/// 5 s of CPU in 13 s; twenty at a time took twice as long).
/// The lease is longer than the example's: these tests run in debug
/// builds next to each other on small machines, and a worker starved of
/// CPU for longer than its lease is a real pause past the lease.
fn on_durable(name: &str, url: String, schedules: u64) {
    let timing = idem_testkit::Timing {
        lease: std::time::Duration::from_millis(600),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let summary = runtime.block_on(async {
        let store: Arc<dyn Store> = idem_testkit::stores::connect(&url).await.unwrap();
        let tag = format!("test{}", std::process::id());
        let mut running = tokio::task::JoinSet::new();
        let mut summary = Summary::default();
        let mut seeds = 1..=schedules;
        loop {
            while running.len() < 40 {
                let Some(seed) = seeds.next() else { break };
                let (store, tag) = (store.clone(), tag.clone());
                running.spawn(
                    async move { idem_testkit::run_durable(store, seed, &tag, timing).await },
                );
            }
            let Some(report) = running.join_next().await else {
                break;
            };
            let report = report.unwrap();
            if report.failed() {
                eprintln!(
                    "{name} seed {} failed:\n{}",
                    report.seed,
                    report.trace.join("\n")
                );
            }
            summary.add(&report);
        }
        store.close().await;
        summary
    });
    eprintln!("{name}: {}", summary.line());
    assert!(
        summary.passed(),
        "failing seeds: {:?}",
        summary.failing_seeds
    );
}

#[test]
fn sqlite_store_no_duplicates_and_no_lost_results() {
    let dir = TempDir::new("idem-sim-sqlite").unwrap();
    let url = format!("sqlite://{}", dir.path().join("chaos.db").display());
    on_durable("sqlite", url, durable_schedules());
}

#[test]
fn redis_store_no_duplicates_and_no_lost_results() {
    let Some(server) = RedisServer::start() else {
        return skip(
            "redis_store_no_duplicates_and_no_lost_results",
            "redis-server",
        );
    };
    on_durable("redis", server.url(), durable_schedules());
}

#[test]
fn postgres_store_no_duplicates_and_no_lost_results() {
    let Some(server) = PostgresServer::start() else {
        return skip(
            "postgres_store_no_duplicates_and_no_lost_results",
            "PostgreSQL",
        );
    };
    on_durable("postgres", server.url(), durable_schedules());
}
