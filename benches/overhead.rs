//! Overhead of idem per call on the in-memory store, against a naive
//! `Mutex<HashMap>` idempotency wrapper measured in the same run.
//!
//! The naive wrapper is the one from the background article: key =
//! SHA-256 of `run:step:tool:json(args)`, look it up in a locked map, run the
//! tool, store its JSON output. It has no canonical form, no namespaces, no
//! fingerprints, no leases, no fencing, no waiters, no retries, no classes.
//!
//! Run with `cargo bench --bench overhead`; the last lines print the ratios.

mod common;

use std::sync::Arc;

use common::{args, send, send_email, EmailSent, Naive, SendEmail};
use criterion::{criterion_group, BatchSize, Criterion};
use idem::{tool, Executor, MemoryStore, ToolError};

/// Look something up (a read: no key, no store).
#[tool(class = "read")]
async fn look_up(args: SendEmail) -> Result<EmailSent, ToolError> {
    Ok(send(&args))
}

fn overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("overhead");

    // First calls: each iteration gets a fresh, empty wrapper or store, so
    // the figure is the cost of one call and not of an ever-growing map
    // (whose growth would depend on how many iterations criterion picks).
    g.bench_function("naive_first", |b| {
        b.to_async(&rt).iter_batched(
            Naive::default,
            |naive| async move {
                naive.call("run-1", 0, "send_email", &args()).await;
                naive
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("idem_first", |b| {
        b.to_async(&rt).iter_batched(
            || Executor::builder(MemoryStore::new()).build(),
            |exec| async move {
                exec.call(send_email, args()).run("run-1", 0).await.unwrap();
                exec
            },
            BatchSize::SmallInput,
        )
    });

    // Duplicates: one recorded call, answered again and again.
    let naive = Naive::default();
    g.bench_function("naive_duplicate", |b| {
        b.to_async(&rt)
            .iter(|| async { naive.call("run-1", 0, "send_email", &args()).await })
    });
    let exec = Executor::builder_shared(Arc::new(MemoryStore::new())).build();
    g.bench_function("idem_duplicate", |b| {
        b.to_async(&rt)
            .iter(|| async { exec.call(send_email, args()).run("run-1", 0).await.unwrap() })
    });
    g.bench_function("idem_read", |b| {
        b.to_async(&rt)
            .iter(|| async { exec.call(look_up, args()).await.unwrap() })
    });
    g.finish();
}

/// Mean time of a benchmark of this run, from criterion's estimates.
fn mean_ns(id: &str) -> Option<f64> {
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let path = format!("{target}/criterion/overhead/{id}/new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

fn report() {
    println!("\nidem overhead against the naive Mutex<HashMap> wrapper (same run):");
    for (idem, naive) in [
        ("idem_first", "naive_first"),
        ("idem_duplicate", "naive_duplicate"),
        ("idem_read", "naive_duplicate"),
    ] {
        if let (Some(a), Some(b)) = (mean_ns(idem), mean_ns(naive)) {
            println!(
                "  {idem:<15} {:>8.2} µs   {naive:<15} {:>8.2} µs   ratio {:.2}×",
                a / 1000.0,
                b / 1000.0,
                a / b
            );
        }
    }
}

criterion_group!(benches, overhead);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    report();
}
