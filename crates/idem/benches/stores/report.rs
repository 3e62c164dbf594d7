//! The report: Markdown tables of every store measured so far.

use std::fmt::Write as _;
use std::time::Duration;

use crate::class::Class;
use crate::classes::ClassReport;
use crate::config::Config;
use crate::measure::Report;
use crate::timing::micros;

pub fn ratio(d: Duration, naive: Duration) -> String {
    format!("{:.1}×", d.as_secs_f64() / naive.as_secs_f64())
}

pub fn print_tables(config: &Config, naive: (Duration, Duration), reports: &[Report]) {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nNaive Mutex<HashMap> wrapper, same run: first call {:.2} µs, duplicate {:.2} µs\n",
        micros(naive.0),
        micros(naive.1)
    );
    let _ = writeln!(
        s,
        "| store | first call | × naive | duplicate | × naive | store ops first / dup | fsyncs first / dup | WAL bytes first / dup |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in reports {
        let fsyncs = match r.fsyncs {
            Some((f, d)) => format!("{f:.2} / {d:.2}"),
            None if r.store.starts_with("sqlite") => "n/a (no strace)".into(),
            None => "–".into(),
        };
        let wal = match (r.first.wal, r.duplicate.wal) {
            (Some(f), Some(d)) => format!("{f:.0} / {d:.0}"),
            _ => "–".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {:.1} µs | {} | {:.1} µs | {} | {:.2} / {:.2} | {fsyncs} | {wal} |",
            r.store,
            micros(r.first.latency),
            ratio(r.first.latency, naive.0),
            micros(r.duplicate.latency),
            ratio(r.duplicate.latency, naive.1),
            r.first.ops,
            r.duplicate.ops,
        );
    }

    let _ = writeln!(
        s,
        "\n| store | {} concurrent calls of one key | claims sent to the store | claims answered on the caller's thread | callers answered from the record |",
        config.burst
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for r in reports {
        if let Some((took, claims, local, dedup)) = r.burst {
            let _ = writeln!(
                s,
                "| {} | {:.1} ms | {claims} | {local} | {dedup} |",
                r.store,
                took.as_secs_f64() * 1e3
            );
        }
    }

    let _ = writeln!(
        s,
        "\n| store | 1 worker | 4 workers | 16 workers | 64 workers |"
    );
    let _ = writeln!(s, "|---|---:|---:|---:|---:|");
    for r in reports {
        let cells: Vec<String> = r
            .workers
            .iter()
            .map(|(_, rate)| format!("{rate:.0}/s"))
            .collect();
        let _ = writeln!(s, "| {} | {} |", r.store, cells.join(" | "));
    }

    if !config.sizes.is_empty() {
        let _ = writeln!(
            s,
            "\n| store | records present | first call | × naive | duplicate | × naive |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|");
        for r in reports {
            for &(size, first, dup) in &r.sizes {
                let _ = writeln!(
                    s,
                    "| {} | {size} | {:.1} µs | {} | {:.1} µs | {} |",
                    r.store,
                    micros(first),
                    ratio(first, naive.0),
                    micros(dup),
                    ratio(dup, naive.1)
                );
            }
        }
    }

    if reports.iter().any(|r| r.sweep.is_some()) {
        let _ = writeln!(
            s,
            "\n| store | expired records | swept | sweep took | caller's calls meanwhile | median / p99 / worst call during the sweep | median / worst call, no sweep |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        for r in reports {
            if let Some(w) = r.sweep {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {:.1} s | {} | {:.2} / {:.2} / {:.1} ms | {:.2} / {:.1} ms |",
                    r.store,
                    w.records,
                    w.deleted,
                    w.took.as_secs_f64(),
                    w.calls,
                    ms(w.median),
                    ms(w.p99),
                    ms(w.worst),
                    ms(w.baseline_median),
                    ms(w.baseline_worst)
                );
            }
        }
    }
    print_expiry_table(&mut s, reports);
    println!("{s}");
}

/// Redis's counterpart of the sweep table ([`crate::expiry`]), when a
/// Redis store was measured: a row for each phase, records lapsing
/// together or not, the store swept back to back or not.
fn print_expiry_table(s: &mut String, reports: &[Report]) {
    if !reports.iter().any(|r| r.expiry.is_some()) {
        return;
    }
    let _ = writeln!(
        s,
        "\n| store | phase | records lapsing together (+ approval requests) | all expired after | sweeps run: how many, median / slowest | caller's calls | median / p99 / worst call |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    for r in reports {
        let Some(e) = &r.expiry else { continue };
        for p in &e.phases {
            let (lapsing, gone) = match p.expired {
                None => ("–".to_owned(), "–".to_owned()),
                Some((_, Some(gone))) => (
                    format!("{} (+ {})", e.records, e.lapsing),
                    format!("{:.1} s", gone.as_secs_f64()),
                ),
                Some((expired, None)) => (
                    format!("{} (+ {})", e.records, e.lapsing),
                    format!(
                        "not within {} s ({expired} expired)",
                        crate::expiry::BOUND.as_secs()
                    ),
                ),
            };
            let sweeps = p.sweeps.map_or("–".to_owned(), |w| {
                format!("{}, {:.1} / {:.1} ms", w.count, ms(w.median), ms(w.worst))
            });
            let _ = writeln!(
                s,
                "| {} | {} | {lapsing} | {gone} | {sweeps} | {} | {:.2} / {:.2} / {:.1} ms |",
                r.store,
                p.label,
                p.calls.count,
                ms(p.calls.median),
                ms(p.calls.p99),
                ms(p.calls.worst),
            );
        }
        let _ = writeln!(
            s,
            "\n({}: {} open records in flight throughout.)",
            r.store, e.in_flight
        );
    }
}

/// The per-class tables: every figure of a row, and its ratio to the
/// "before" row of the same store, measured in the same run.
pub fn print_class_tables(reports: &[ClassReport]) {
    let mut s = String::new();
    let label = |store: &str| match store {
        "postgres" => "postgres (fsync=on)".to_owned(),
        other => other.to_owned(),
    };
    let _ = writeln!(
        s,
        "\nPer first call, by class (\"before\": idempotent_write with every claim forced durable; ÷ before: this row / the before row):\n"
    );
    let _ = writeln!(
        s,
        "| store | class | first call | ÷ before | store ops | fsyncs | WAL bytes | pg_stat_wal writes / syncs |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|");
    for r in reports {
        let before = r.rows.iter().find(|row| row.class == Class::Before);
        for row in &r.rows {
            let ratio = match before {
                Some(b) if row.class != Class::Before => {
                    format!("{:.2}×", row.first.as_secs_f64() / b.first.as_secs_f64())
                }
                _ => "–".into(),
            };
            let fsyncs = match row.fsyncs {
                Some(f) => format!("{f:.2}"),
                None if r.store.starts_with("sqlite") => "n/a (no strace)".into(),
                None => "–".into(),
            };
            let wal = row
                .wal_bytes
                .map_or_else(|| "–".into(), |w| format!("{w:.0}"));
            let flushes = row
                .wal_flushes
                .map_or_else(|| "–".into(), |(w, f)| format!("{w:.2} / {f:.2}"));
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} µs | {ratio} | {:.2} | {fsyncs} | {wal} | {flushes} |",
                label(r.store),
                row.class.label(),
                micros(row.first),
                row.ops,
            );
        }
    }

    let _ = writeln!(
        s,
        "\nFirst calls per second by class, all workers together (in brackets: ÷ the before row at the same number of workers):\n"
    );
    let _ = writeln!(
        s,
        "| store | class | 1 worker | 4 workers | 16 workers | 64 workers |"
    );
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|");
    for r in reports {
        let before = r.rows.iter().find(|row| row.class == Class::Before);
        for row in &r.rows {
            let cells: Vec<String> = row
                .workers
                .iter()
                .enumerate()
                .map(
                    |(i, &(_, rate))| match before.and_then(|b| b.workers.get(i)) {
                        Some(&(_, base)) if row.class != Class::Before => {
                            format!("{rate:.0}/s ({:.2}×)", rate / base)
                        }
                        _ => format!("{rate:.0}/s"),
                    },
                )
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                label(r.store),
                row.class.label(),
                cells.join(" | ")
            );
        }
    }
    println!("{s}");
}
