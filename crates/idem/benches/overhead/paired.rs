//! The paired rounds: naive and idem calls taking turns in rounds of
//! 1,000, whose median ratio the machine's changing load moves least.

use std::time::{Duration, Instant};

use super::{idem_first, naive_first, new_exec, Grown, Naive, Source, FRESH_EVERY};

/// How many paired rounds `paired` runs (`IDEM_BENCH_ROUNDS`, default 200).
fn rounds() -> usize {
    std::env::var("IDEM_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

/// Rounds of `FRESH_EVERY` calls, naive then idem, each into a fresh
/// store: the median ratio of the rounds. Load that changes during the
/// run hits both sides of a round alike, unlike criterion's rows, which
/// are measured seconds apart.
pub fn paired(rt: &tokio::runtime::Runtime) {
    println!(
        "\npaired rounds ({} × {FRESH_EVERY} calls, naive and idem alternating; median per-call time and ratio):",
        rounds()
    );
    let exec_dup = new_exec();
    let naive_dup = Naive::default();
    rt.block_on(async {
        idem_first(&exec_dup, Source::Step, 0).await;
        idem_first(&exec_dup, Source::CallId, 0).await;
        naive_first(&naive_dup, Source::Step, 0).await;
        naive_first(&naive_dup, Source::CallId, 0).await;
    });
    for (row, source, duplicate) in [
        ("first_fresh", Source::Step, false),
        ("first_fresh_call_id", Source::CallId, false),
        ("duplicate", Source::Step, true),
        ("duplicate_call_id", Source::CallId, true),
    ] {
        if !paired_row(row) {
            continue;
        }
        let mut rounds_of = Row::default();
        for _ in 0..rounds() {
            let (naive, exec) = (Naive::default(), new_exec());
            let (naive, exec) = match duplicate {
                false => (&naive, &exec),
                true => (&naive_dup, &exec_dup),
            };
            let step = |i: u64| if duplicate { 0 } else { i };
            let start = Instant::now();
            rt.block_on(async {
                for i in 0..FRESH_EVERY {
                    naive_first(naive, source, step(i)).await;
                }
            });
            let n = start.elapsed();
            let start = Instant::now();
            rt.block_on(async {
                for i in 0..FRESH_EVERY {
                    idem_first(exec, source, step(i)).await;
                }
            });
            rounds_of.push(n, start.elapsed());
        }
        rounds_of.print(row);
    }
    if paired_row("first_grown") {
        // First calls into one long-lived store of each side, from
        // `grown_start()` keys on: the store a program keeps.
        let mut rounds_of = Row::default();
        let (mut naive, mut idem) = (None, None);
        for _ in 0..rounds() {
            let n = Grown::room_for(&mut naive, FRESH_EVERY, || Grown::naive(rt)).time(
                rt,
                FRESH_EVERY,
                async |naive, i| naive_first(naive, Source::Step, i).await,
            );
            let d = Grown::room_for(&mut idem, FRESH_EVERY, || Grown::exec(rt)).time(
                rt,
                FRESH_EVERY,
                async |exec, i| idem_first(exec, Source::Step, i).await,
            );
            rounds_of.push(n, d);
        }
        rounds_of.print("first_grown");
    }
}

/// A paired row's rounds: per-call times of each side, and their ratios.
#[derive(Default)]
struct Row {
    naive_ns: Vec<f64>,
    idem_ns: Vec<f64>,
    ratios: Vec<f64>,
}

impl Row {
    /// A round: how long each side took for its `FRESH_EVERY` calls.
    fn push(&mut self, naive: Duration, idem: Duration) {
        let per_call = |d: Duration| d.as_nanos() as f64 / FRESH_EVERY as f64;
        let (n, d) = (per_call(naive), per_call(idem));
        self.naive_ns.push(n);
        self.idem_ns.push(d);
        self.ratios.push(d / n);
    }

    /// The row's medians.
    fn print(mut self, row: &str) {
        println!(
            "  {row:<20} idem {:>6.2} µs   naive {:>6.2} µs   ratio {:.2}×",
            median(&mut self.idem_ns) / 1000.0,
            median(&mut self.naive_ns) / 1000.0,
            median(&mut self.ratios)
        );
    }
}

/// Whether the paired rounds run `row`: all of them, or those
/// `IDEM_BENCH_PAIRED` names (comma-separated; for a profiler).
fn paired_row(row: &str) -> bool {
    std::env::var("IDEM_BENCH_PAIRED").map_or(true, |rows| rows.split(',').any(|r| r == row))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
