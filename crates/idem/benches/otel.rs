//! What telemetry costs per call: the same calls with no subscriber and the
//! global (no-op) meter — telemetry off — and with the
//! `tracing-opentelemetry` layer over the OpenTelemetry SDK (batch span
//! processor, an exporter that discards) and the executor's instruments on
//! an SDK meter provider — telemetry on. Both in the same run, on the
//! in-memory store, for a first call and a duplicate.
//!
//! Run with `cargo bench --bench otel --features otel`; the last lines
//! print the paired rounds: off and on alternating in rounds of 1,000
//! calls, whose median ratio the machine's changing load moves least.
//! `IDEM_BENCH_ROUNDS` sets their number (default 200).

#![allow(unreachable_pub)] // `pub` for the other modules of this target
                           // The tool and its arguments; not the naive wrapper.
#[allow(dead_code)]
mod common;

use std::time::Instant;

use common::{args, send_email};
use criterion::{criterion_group, Criterion};
use idem::{Executor, MemoryStore};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt as _;

/// An exporter that drops what it gets: the cost measured is the call's,
/// not a network's.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        drop(batch);
        Ok(())
    }
}

/// Telemetry on: the layer, the SDK's providers.
struct On {
    dispatch: Dispatch,
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
}

impl On {
    fn new() -> Self {
        let tracer = SdkTracerProvider::builder()
            .with_batch_exporter(Discard)
            .build();
        // Aggregated in memory; collected once a minute, as by default.
        let meter = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(InMemoryMetricExporter::default()).build())
            .build();
        let dispatch = Dispatch::new(
            tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(tracer.tracer("bench"))),
        );
        On {
            dispatch,
            tracer,
            meter,
        }
    }

    fn executor(&self) -> Executor {
        Executor::builder(MemoryStore::new())
            .meter(self.meter.meter("idem"))
            .build()
    }
}

/// Calls in a round.
const ROUND: u64 = 1_000;

fn rounds() -> usize {
    std::env::var("IDEM_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

/// `n` calls on `exec`: first calls (a new call id each, from `from`), or
/// duplicates of call id 0.
async fn calls(exec: &Executor, from: u64, n: u64, duplicate: bool) {
    for i in from..from + n {
        let id = if duplicate { 0 } else { i };
        exec.call(send_email, args())
            .call_id(format!("call_{id}"))
            .await
            .unwrap();
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let on = On::new();
    // The first call of a callsite fixes its interest: make it one the
    // layer sees, or the `on` rows would measure no span at all.
    tracing::dispatcher::with_default(&on.dispatch, || {
        rt.block_on(calls(&on.executor(), 0, 1, false))
    });
    let mut group = c.benchmark_group("otel");
    for duplicate in [false, true] {
        let row = if duplicate { "duplicate" } else { "first" };
        let off_exec = Executor::builder(MemoryStore::new()).build();
        let on_exec = on.executor();
        rt.block_on(calls(&off_exec, 0, 1, false));
        rt.block_on(calls(&on_exec, 0, 1, false));
        // Each sample's calls run in one `block_on`, inside the layer's
        // scope for the `on` rows, as in the paired rounds.
        for (exec, dispatch, side) in [
            (&off_exec, None, "off"),
            (&on_exec, Some(&on.dispatch), "on"),
        ] {
            let mut next = 1;
            group.bench_function(format!("{row}_{side}"), |b| {
                b.iter_custom(|iters| {
                    let run = || {
                        let start = Instant::now();
                        rt.block_on(calls(exec, next, iters, duplicate));
                        start.elapsed()
                    };
                    let took = match dispatch {
                        Some(dispatch) => tracing::dispatcher::with_default(dispatch, run),
                        None => run(),
                    };
                    next += iters;
                    took
                })
            });
        }
    }
    group.finish();
    let _ = on.tracer.shutdown();
    let _ = on.meter.shutdown();
}

/// Rounds of `ROUND` calls, off then on, each on a fresh store: the median
/// per-call times and ratio.
fn paired(rt: &tokio::runtime::Runtime) {
    println!(
        "\npaired rounds ({} × {ROUND} calls, telemetry off and on alternating; median per-call time and ratio):",
        rounds()
    );
    let on = On::new();
    for (row, duplicate) in [("first", false), ("duplicate", true)] {
        let (mut off_ns, mut on_ns, mut ratios) = (vec![], vec![], vec![]);
        for _ in 0..rounds() {
            let off_exec = Executor::builder(MemoryStore::new()).build();
            let on_exec = on.executor();
            rt.block_on(calls(&off_exec, 0, 1, false));
            rt.block_on(calls(&on_exec, 0, 1, false));
            let start = Instant::now();
            rt.block_on(calls(&off_exec, 1, ROUND, duplicate));
            let off = start.elapsed().as_nanos() as f64 / ROUND as f64;
            let start = Instant::now();
            tracing::dispatcher::with_default(&on.dispatch, || {
                rt.block_on(calls(&on_exec, 1, ROUND, duplicate))
            });
            let d = start.elapsed().as_nanos() as f64 / ROUND as f64;
            off_ns.push(off);
            on_ns.push(d);
            ratios.push(d / off);
        }
        println!(
            "  {row:<10} off {:>6.2} µs   on {:>6.2} µs   ratio {:.2}×",
            median(&mut off_ns) / 1000.0,
            median(&mut on_ns) / 1000.0,
            median(&mut ratios)
        );
    }
    let _ = on.tracer.shutdown();
    let _ = on.meter.shutdown();
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if std::env::args().all(|a| a != "--list") {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        paired(&rt);
    }
}
