//! What telemetry costs per call: the same calls with no subscriber and the
//! global (no-op) meter — telemetry off — and with the
//! `tracing-opentelemetry` layer over the OpenTelemetry SDK (batch span
//! processor, an exporter that discards) and the executor's instruments on
//! an SDK meter provider — telemetry on. Both in the same run, on the
//! in-memory store, for a first call and a duplicate.
//!
//! Run with `cargo bench --bench otel --features otel`; the last lines
//! print the paired rounds: off, floor, SDK floor, on, on with 1 % of
//! traces sampled and on through a lean layer (no source location, threads
//! or busy times) taking turns in rounds of 1,000 calls, whose median
//! ratios the machine's changing load moves least. `IDEM_BENCH_ROUNDS` sets their
//! number (default 200).
//!
//! *Floor* is the layer's own price, paid by any span: the same calls
//! with telemetry off, each beside one span without fields created and
//! closed through the same layer (what an `#[instrument]`ed function with
//! no arguments costs). What telemetry on costs beyond it is idem's share:
//! the span's attributes and the instrument's record.
//!
//! *SDK floor* is what any OpenTelemetry record of a call costs, with no
//! `tracing` in between: the same calls with telemetry off, each beside one
//! span made with the SDK's own tracer, with the attributes idem gives a
//! call's span (static names), and one histogram record with the
//! attributes idem gives its instrument.

#![allow(unreachable_pub)] // `pub` for the other modules of this target
                           // The tool and its arguments; not the naive wrapper.
#[allow(dead_code)]
mod common;

use std::time::Instant;

use common::{args, send_email};
use criterion::{criterion_group, Criterion};
use std::sync::Arc;

use idem::store::SqliteStore;
use idem::store::StoreExt;
use idem::{Executor, MemoryStore, Store};
use opentelemetry::metrics::{Histogram, MeterProvider as _};
use opentelemetry::trace::{Span as _, SpanKind, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, SpanData, SpanExporter};
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
        Self::sampled(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
    }

    /// With `sampler` (the SDK's default is the first: every trace).
    fn sampled(sampler: Sampler) -> Self {
        Self::with(sampler, false)
    }

    /// Every trace, through a layer that records no source location, no
    /// thread and no busy and idle times (docs/telemetry.md).
    fn lean() -> Self {
        Self::with(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)), true)
    }

    fn with(sampler: Sampler, lean: bool) -> Self {
        let tracer = SdkTracerProvider::builder()
            .with_sampler(sampler)
            .with_batch_exporter(Discard)
            .build();
        // Aggregated in memory; collected once a minute, as by default.
        let meter = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(InMemoryMetricExporter::default()).build())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(tracer.tracer("bench"));
        let layer = if lean {
            layer
                .with_location(false)
                .with_threads(false)
                .with_tracked_inactivity(false)
        } else {
            layer
        };
        let dispatch = Dispatch::new(tracing_subscriber::registry().with(layer));
        On {
            dispatch,
            tracer,
            meter,
        }
    }

    fn executor(&self) -> Executor {
        self.executor_on(Arc::new(MemoryStore::new()))
    }

    fn executor_on(&self, store: Arc<dyn Store>) -> Executor {
        Executor::builder_shared(store)
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

/// `n` calls as [`calls`] makes them with telemetry off, each beside one
/// span without fields made and closed through `on`'s layer.
async fn calls_beside_a_span(exec: &Executor, on: &On, from: u64, n: u64, duplicate: bool) {
    for i in from..from + n {
        tracing::dispatcher::with_default(&on.dispatch, || {
            drop(tracing::info_span!("execute_tool"));
        });
        calls(exec, i, 1, duplicate).await;
    }
}

/// A call's OpenTelemetry record made with the SDK alone: its tracer and
/// the duration histogram, from `on`'s providers.
struct SdkRecord {
    tracer: SdkTracer,
    duration: Histogram<f64>,
}

impl SdkRecord {
    fn of(on: &On) -> Self {
        SdkRecord {
            tracer: on.tracer.tracer("bench"),
            duration: on
                .meter
                .meter("idem")
                .f64_histogram("gen_ai.execute_tool.duration")
                .build(),
        }
    }

    /// One call's span, with the attributes idem gives it, and one record
    /// of its duration.
    fn record(&self, call: u64) {
        let started = Instant::now();
        let mut span = self
            .tracer
            .span_builder("execute_tool send_email")
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", "send_email"),
                KeyValue::new("gen_ai.tool.type", "function"),
                KeyValue::new("gen_ai.tool.call.id", format!("call_{call}")),
                KeyValue::new("idem.class", "idempotent_write"),
                KeyValue::new(
                    "idem.key",
                    "8d3c0f6c1e2b4a5968778695a4b3c2d1e0f1a2b3c4d5e6f708192a3b4c5d6e7f",
                ),
                KeyValue::new("idem.fence", 1_i64),
                KeyValue::new("idem.outcome", "executed"),
                KeyValue::new("idem.attempts", 1_i64),
            ])
            .start(&self.tracer);
        span.end();
        self.duration.record(
            started.elapsed().as_secs_f64(),
            &[
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", "send_email"),
                KeyValue::new("gen_ai.tool.type", "function"),
                KeyValue::new("idem.class", "idempotent_write"),
                KeyValue::new("idem.outcome", "executed"),
            ],
        );
    }
}

/// `n` calls as [`calls`] makes them with telemetry off, each beside one
/// [`SdkRecord::record`].
async fn calls_beside_an_sdk_record(
    exec: &Executor,
    sdk: &SdkRecord,
    from: u64,
    n: u64,
    duplicate: bool,
) {
    for i in from..from + n {
        sdk.record(i);
        calls(exec, i, 1, duplicate).await;
    }
}

/// Where the paired rounds' calls are recorded.
#[derive(Clone, Copy)]
enum Where {
    Memory,
    /// A SQLite file (`Synchronous::Normal`, the default) in the
    /// temporary directory.
    Sqlite,
}

impl Where {
    /// A new store.
    fn store(
        self,
        rt: &tokio::runtime::Runtime,
        dir: &std::path::Path,
        n: &mut u32,
    ) -> Arc<dyn Store> {
        match self {
            Where::Memory => Arc::new(MemoryStore::new()),
            Where::Sqlite => {
                *n += 1;
                let path = dir.join(format!("otel-{n}.db"));
                Arc::new(
                    rt.block_on(SqliteStore::open(&path))
                        .expect("a SQLite file"),
                )
            }
        }
    }
}

/// Rounds of calls with telemetry off, at the floor, at the SDK's floor, on, on with 1 % of
/// traces sampled, and on through a lean layer, taking turns, each side
/// on a store of its own: the median per-call times and ratios to off.
fn paired(rt: &tokio::runtime::Runtime) {
    println!(
        "\npaired rounds (telemetry off, floor, SDK floor, on, on with 1 % of traces sampled, on through a lean layer, taking turns; median per-call time and ratio to off):"
    );
    let on = On::new();
    let sdk = SdkRecord::of(&on);
    let sampled = On::sampled(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
        0.01,
    ))));
    let lean = On::lean();
    let dir = std::env::temp_dir().join(format!("idem-otel-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let mut files = 0;
    for (store, rounds, round) in [
        (Where::Memory, rounds(), ROUND),
        (Where::Sqlite, rounds().div_ceil(4), ROUND / 10),
    ] {
        for (row, duplicate) in [("first", false), ("duplicate", true)] {
            let mut per_call: [Vec<f64>; 6] = Default::default();
            let mut ratios: [Vec<f64>; 5] = Default::default();
            for r in 0..rounds {
                let off_exec = Executor::builder_shared(store.store(rt, &dir, &mut files)).build();
                let floor_exec =
                    Executor::builder_shared(store.store(rt, &dir, &mut files)).build();
                let sdk_exec = Executor::builder_shared(store.store(rt, &dir, &mut files)).build();
                let on_exec = on.executor_on(store.store(rt, &dir, &mut files));
                let sampled_exec = sampled.executor_on(store.store(rt, &dir, &mut files));
                let lean_exec = lean.executor_on(store.store(rt, &dir, &mut files));
                for exec in [
                    &off_exec,
                    &floor_exec,
                    &sdk_exec,
                    &on_exec,
                    &sampled_exec,
                    &lean_exec,
                ] {
                    rt.block_on(calls(exec, 0, 1, false));
                }
                let time = |run: &mut dyn FnMut()| {
                    let start = Instant::now();
                    run();
                    start.elapsed().as_nanos() as f64 / round as f64
                };
                let with = |on: &On, exec: &Executor| {
                    time(&mut || {
                        tracing::dispatcher::with_default(&on.dispatch, || {
                            rt.block_on(calls(exec, 1, round, duplicate))
                        })
                    })
                };
                // The sides take turns in an order that moves on each
                // round: on SQLite, the side that comes first in a round
                // pays more (its file's first writes), whichever it is.
                let mut took = [0.0; 6];
                for k in 0..took.len() {
                    let side = (r + k) % took.len();
                    took[side] = match side {
                        0 => time(&mut || rt.block_on(calls(&off_exec, 1, round, duplicate))),
                        1 => time(&mut || {
                            rt.block_on(calls_beside_a_span(&floor_exec, &on, 1, round, duplicate))
                        }),
                        2 => time(&mut || {
                            rt.block_on(calls_beside_an_sdk_record(
                                &sdk_exec, &sdk, 1, round, duplicate,
                            ))
                        }),
                        3 => with(&on, &on_exec),
                        4 => with(&sampled, &sampled_exec),
                        _ => with(&lean, &lean_exec),
                    };
                }
                let [off, floor, sdk_floor, all_on, some_on, lean_on] = took;
                for (side, t) in took.into_iter().enumerate() {
                    per_call[side].push(t);
                }
                for (side, t) in [floor, sdk_floor, all_on, some_on, lean_on]
                    .into_iter()
                    .enumerate()
                {
                    ratios[side].push(t / off);
                }
                for exec in [
                    off_exec,
                    floor_exec,
                    sdk_exec,
                    on_exec,
                    sampled_exec,
                    lean_exec,
                ] {
                    rt.block_on(exec.store().close());
                }
            }
            let [off, floor, sdk_floor, all_on, some_on, lean_on] =
                per_call.map(|mut v| median(&mut v) / 1000.0);
            let [floor_x, sdk_x, all_on_x, some_on_x, lean_x] = ratios.map(|mut v| median(&mut v));
            let name = match store {
                Where::Memory => "memory",
                Where::Sqlite => "SQLite",
            };
            println!(
                "  {name:<6} {row:<10} off {off:>7.2} µs   floor {floor:>7.2} µs ({floor_x:.2}×)   SDK floor {sdk_floor:>7.2} µs ({sdk_x:.2}×)   on {all_on:>7.2} µs ({all_on_x:.2}×)   on, 1 % sampled {some_on:>7.2} µs ({some_on_x:.2}×)   on, lean layer {lean_on:>7.2} µs ({lean_x:.2}×)"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    for on in [on, sampled, lean] {
        let _ = on.tracer.shutdown();
        let _ = on.meter.shutdown();
    }
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
