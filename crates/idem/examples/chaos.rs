//! Deterministic fault simulation: crashes, timeouts, pauses, store errors
//! and power cuts (the store loses the claims it had not flushed) drawn
//! from seeds, checked for duplicate effects and lost results. The last
//! line counts the power cuts that struck and the claims they lost.
//!
//! ```text
//! cargo run --release --example chaos -- --schedules 10000 --seed 1
//! cargo run --release --example chaos -- --schedules 1000 --seed 1 --store sqlite:///tmp/chaos.db
//! cargo run --release --example chaos -- --seed 4242 --schedules 1     # reproduce one, with its trace
//! ```
//!
//! Schedule `i` uses seed `S + i`, so a failing seed printed here is
//! reproduced alone with `--seed <it> --schedules 1`. On `memory:` (the
//! default) time is virtual and a seed replays exactly; on `sqlite://…`,
//! `redis://…` and `postgres://…` time is real (200 ms leases), schedules
//! run `--concurrency` at a time (default 32) and each run uses key
//! namespaces of its own. Exits with status 1 when any schedule found a
//! duplicate effect, a lost result or a call refused whose effect applied.

#![allow(unreachable_pub)] // `pub` for the other modules of this target
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use idem_runtime::store::url::redact;
use idem_runtime::store::StoreExt;
use idem_runtime::Store;
use idem_testkit::broken::{Breakage, BrokenStore};
use idem_testkit::{ScheduleReport, Summary};

struct Args {
    schedules: u64,
    seed: u64,
    store: String,
    concurrency: usize,
    trace: bool,
    /// Run against a deliberately broken memory store, to see it caught.
    broken: Option<Breakage>,
}

const USAGE: &str = "usage: chaos [--schedules N] [--seed S] [--store URL] [--concurrency K] [--trace] [--broken fencing|claim|renewal]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        schedules: 1000,
        seed: 1,
        store: "memory:".into(),
        concurrency: 32,
        trace: false,
        broken: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--schedules" => args.schedules = number(value()?)?,
            "--seed" => args.seed = number(value()?)?,
            "--store" => args.store = value()?,
            "--concurrency" => args.concurrency = number(value()?)?.max(1) as usize,
            "--trace" => args.trace = true,
            "--broken" => {
                args.broken = Some(match value()?.as_str() {
                    "fencing" => Breakage::NoFencing,
                    "claim" => Breakage::RacyClaim,
                    "renewal" => Breakage::NoRenewal,
                    other => {
                        return Err(format!(
                            "--broken {other}: expected fencing, claim or renewal"
                        ))
                    }
                })
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    // Reproducing one seed: show how it went.
    args.trace |= args.schedules == 1;
    Ok(args)
}

/// Prints a line every tenth of the run, and each failing schedule.
struct Progress {
    total: u64,
    started: Instant,
    trace: bool,
    summary: Summary,
}

impl Progress {
    fn add(&mut self, report: &ScheduleReport) {
        self.summary.add(report);
        if report.failed() {
            println!(
                "FAILED seed {} (reproduce: --seed {} --schedules 1)",
                report.seed, report.seed
            );
            for problem in report.duplicate_effects.iter() {
                println!("  duplicate effect: {problem}");
            }
            for problem in report.lost_results.iter() {
                println!("  lost result: {problem}");
            }
            for problem in report.refused_but_applied.iter() {
                println!("  refused but applied: {problem}");
            }
        }
        if self.trace {
            for line in &report.trace {
                println!("  {line}");
            }
            println!("trace hash of seed {}: {}", report.seed, report.trace_hash);
        }
        let done = self.summary.schedules;
        let step = (self.total / 10).max(1);
        if done.is_multiple_of(step) || done == self.total {
            println!(
                "{done}/{} schedules ({}%), {:.1} s, {} failing so far",
                self.total,
                done * 100 / self.total.max(1),
                self.started.elapsed().as_secs_f64(),
                self.summary.failing_seeds.len()
            );
        }
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut progress = Progress {
        total: args.schedules,
        started: Instant::now(),
        trace: args.trace,
        summary: Summary::default(),
    };
    let seeds = args.seed..args.seed.saturating_add(args.schedules);
    if matches!(args.store.trim(), "memory:" | "memory://") {
        for seed in seeds {
            progress.add(&idem_testkit::run_memory_with(seed, |store| {
                match args.broken {
                    Some(breakage) => Arc::new(BrokenStore::new(store, breakage)) as Arc<dyn Store>,
                    None => store,
                }
            }));
        }
    } else if args.broken.is_some() {
        eprintln!("--broken needs the memory store");
        return ExitCode::from(2);
    } else if let Err(e) = run_durable(&args, seeds, &mut progress) {
        eprintln!("cannot run on {}: {e}", redact(&args.store));
        return ExitCode::from(2);
    }
    println!(
        "finished in {:.1} s on {}",
        progress.started.elapsed().as_secs_f64(),
        redact(&args.store)
    );
    println!("{}", progress.summary.line());
    if progress.summary.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Schedules on a durable store, `--concurrency` at a time, in real time.
fn run_durable(
    args: &Args,
    seeds: std::ops::Range<u64>,
    progress: &mut Progress,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let store = idem::store::connect(&args.store)
            .await
            .map_err(|e| e.to_string())?;
        // A tag of this run: reruns on a shared server use fresh keys.
        let tag = format!(
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis()
        );
        let tag: Arc<str> = tag.into();
        let mut running = tokio::task::JoinSet::new();
        let mut reports = std::collections::BTreeMap::new();
        let mut next_to_print = seeds.start;
        let mut seeds = seeds.clone();
        loop {
            while running.len() < args.concurrency {
                let Some(seed) = seeds.next() else { break };
                let (store, tag) = (store.clone(), tag.clone());
                running.spawn(async move {
                    idem_testkit::run_durable(store, seed, &tag, idem_testkit::Timing::real_time())
                        .await
                });
            }
            let Some(done) = running.join_next().await else {
                break;
            };
            let report = done.map_err(|e| format!("a schedule panicked: {e}"))?;
            reports.insert(report.seed, report);
            // In seed order, so the output reads the same as on memory.
            while let Some(report) = reports.remove(&next_to_print) {
                progress.add(&report);
                next_to_print += 1;
            }
        }
        store.close().await;
        Ok(())
    })
}
