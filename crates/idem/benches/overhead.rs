//! Overhead of idem per call on the in-memory store, against a naive
//! `Mutex<HashMap>` idempotency wrapper measured in the same run.
//!
//! The naive wrapper is the one from the background article: key =
//! SHA-256 of `run:step:tool:json(args)` (or `call_id:tool:json(args)`),
//! look it up in a locked map, run the tool, store its JSON output. It has
//! no canonical form, no namespaces, no fingerprints, no leases, no
//! fencing, no waiters, no retries, no classes.
//!
//! Every idem row has its naive counterpart in the same run:
//!
//! | row | what |
//! |---|---|
//! | `first_cold` | a first call into a store made for it (criterion's `iter_batched`) |
//! | `first_fresh[_call_id]` | first calls into a store that is new every 1,000 calls |
//! | `first_grown[_call_id]` | first calls into one long-lived store that keeps growing, from 10⁵ keys up to 10⁶ (then a new one of 10⁵) |
//! | `duplicate[_call_id]` | one recorded call, answered again and again |
//! | `read` | a `read` tool (no key, no store), against the naive duplicate |
//!
//! `_call_id` rows key calls by the provider's call id, the others by run
//! and step. The `floor_*` rows measure, alone, the work the contract adds
//! to the naive wrapper's: the key (canonical RFC 8785 arguments, their
//! fingerprint — a second SHA-256 — and the framed key hash, against
//! `serde_json` plus one SHA-256), and the store's claim and completion
//! (record, lease, fence) against the naive map's insert.
//!
//! Run with `cargo bench --bench overhead`; the last lines print the ratios
//! and the floor, then the paired rounds: naive and idem alternating in
//! rounds of 1,000 calls (fresh stores; duplicates of one record; first
//! calls into a long-lived store, `first_grown`), whose
//! median ratio the machine's changing load moves least. `IDEM_BENCH_GROWN` sets the long-lived stores' starting
//! size (default 100000); `IDEM_BENCH_PAIRED` names the paired rows to run
//! (`first_fresh,duplicate`: for a profiler).

#![allow(unreachable_pub)] // `pub` for the other modules of this target
mod common;
#[path = "overhead/paired.rs"]
mod paired;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{args, send, send_email, EmailSent, Naive, SendEmail};
use criterion::{criterion_group, BatchSize, Criterion};
use idem::key::{derive_key, CanonicalArgs, KeyInput, KeySource, Namespace};
use idem::record::{CallInfoRef, Outcome, OutputJson};
use idem::store::ClaimRequest;
use idem::store::StoreExt;
use idem::{tool, Executor, IdempotencyKey, MemoryStore, ToolError};
use sha2::{Digest, Sha256};

/// Look something up (a read: no key, no store).
#[tool(class = "read")]
async fn look_up(args: SendEmail) -> Result<EmailSent, ToolError> {
    Ok(send(&args))
}

/// Calls into one store before a fresh one replaces it.
const FRESH_EVERY: u64 = 1_000;
/// The long-lived stores are replaced when they reach this many keys.
const GROWN_MAX: usize = 1_000_000;

fn grown_start() -> usize {
    std::env::var("IDEM_BENCH_GROWN")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000)
}

type Exec = Executor<()>;

fn new_exec() -> Exec {
    Executor::builder(MemoryStore::new()).build()
}

/// Which key source a row uses.
#[derive(Clone, Copy)]
enum Source {
    Step,
    CallId,
}

async fn idem_first(exec: &Exec, source: Source, i: u64) {
    match source {
        Source::Step => exec.call(send_email, args()).run("run-1", i).await,
        Source::CallId => {
            exec.call(send_email, args())
                .call_id(format!("call_{i}"))
                .await
        }
    }
    .unwrap();
}

async fn naive_first(naive: &Naive, source: Source, i: u64) {
    match source {
        Source::Step => naive.call("run-1", i, "send_email", &args()).await,
        Source::CallId => {
            let id = format!("call_{i}");
            naive.call_with_id(&id, "send_email", &args()).await
        }
    };
}

/// The time `iters` first calls `first(what, j)` take, into a `what` that
/// `fresh` makes anew every `FRESH_EVERY` calls (made and dropped outside
/// the timing).
async fn time_fresh<W>(
    iters: u64,
    fresh: impl Fn() -> W,
    first: impl AsyncFn(&W, u64),
) -> Duration {
    let mut took = Duration::ZERO;
    let mut i = 0;
    while i < iters {
        let what = fresh();
        let n = FRESH_EVERY.min(iters - i);
        let start = Instant::now();
        for j in i..i + n {
            first(&what, j).await;
        }
        took += start.elapsed();
        i += n;
    }
    took
}

/// A long-lived executor or naive wrapper, `grown_start()` keys in.
struct Grown<W> {
    what: W,
    len: usize,
    /// The next key's number.
    next: u64,
}

impl<W> Grown<W> {
    /// The store in `slot`, made anew with `make` when `iters` more keys
    /// would take it past `GROWN_MAX`.
    fn room_for(
        slot: &mut Option<Grown<W>>,
        iters: u64,
        make: impl FnOnce() -> Grown<W>,
    ) -> &mut Grown<W> {
        if slot
            .as_ref()
            .is_none_or(|g| g.len + iters as usize > GROWN_MAX)
        {
            *slot = Some(make());
        }
        slot.as_mut().expect("just filled")
    }

    /// Time `iters` first calls made by `call` on the next keys.
    fn time(
        &mut self,
        rt: &tokio::runtime::Runtime,
        iters: u64,
        call: impl AsyncFn(&W, u64),
    ) -> std::time::Duration {
        let Grown { what, len, next } = self;
        let what: &W = what;
        let first = *next;
        let start = Instant::now();
        rt.block_on(async {
            for i in first..first + iters {
                call(what, i).await;
            }
        });
        let took = start.elapsed();
        *next += iters;
        *len += iters as usize;
        took
    }
}

impl<W> Grown<W> {
    /// Time `iters` first calls made by `call` on the next keys of the
    /// store in `slot`, made anew with `make` when they would take it past
    /// `GROWN_MAX` ([`Grown::room_for`]).
    fn time_in(
        slot: &RefCell<Option<Grown<W>>>,
        rt: &tokio::runtime::Runtime,
        iters: u64,
        make: impl FnOnce() -> Grown<W>,
        call: impl AsyncFn(&W, u64),
    ) -> std::time::Duration {
        Grown::room_for(&mut slot.borrow_mut(), iters, make).time(rt, iters, call)
    }

    /// `what` filled by `call` with `grown_start()` keys, then
    /// [`Grown::filled`].
    fn filled_by(rt: &tokio::runtime::Runtime, what: W, call: impl AsyncFn(&W, u64)) -> Self {
        let mut grown = Grown::empty(what);
        grown.time(rt, grown_start() as u64, call);
        grown.filled()
    }

    /// `what`, empty, its next keys far from the ones measured: fill it
    /// with [`Grown::time`], then measure from [`Grown::filled`].
    fn empty(what: W) -> Self {
        Grown {
            what,
            len: 0,
            next: u64::MAX / 2,
        }
    }

    /// Filled: the measured keys start from 0.
    fn filled(mut self) -> Self {
        self.next = 0;
        self
    }
}

impl Grown<Exec> {
    fn exec(rt: &tokio::runtime::Runtime) -> Self {
        Grown::filled_by(rt, new_exec(), async |exec, i| {
            idem_first(exec, Source::Step, i).await
        })
    }
}

impl Grown<Naive> {
    fn naive(rt: &tokio::runtime::Runtime) -> Self {
        Grown::filled_by(rt, Naive::default(), async |naive, i| {
            naive_first(naive, Source::Step, i).await
        })
    }
}

fn overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("overhead");

    // First calls, each into a store made for it (`iter_batched`): a cold
    // map each time.
    g.bench_function("naive_first_cold", |b| {
        b.to_async(&rt).iter_batched(
            Naive::default,
            |naive| async move {
                naive.call("run-1", 0, "send_email", &args()).await;
                naive
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("idem_first_cold", |b| {
        b.to_async(&rt).iter_batched(
            new_exec,
            |exec| async move {
                exec.call(send_email, args()).run("run-1", 0).await.unwrap();
                exec
            },
            BatchSize::SmallInput,
        )
    });

    // First calls into a store that is new every `FRESH_EVERY` calls (made
    // and dropped outside the timing).
    for (name, source) in [("", Source::Step), ("_call_id", Source::CallId)] {
        g.bench_function(format!("naive_first_fresh{name}"), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                time_fresh(iters, Naive::default, async |naive, j| {
                    naive_first(naive, source, j).await
                })
            })
        });
        g.bench_function(format!("idem_first_fresh{name}"), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                time_fresh(iters, new_exec, async |exec, j| {
                    idem_first(exec, source, j).await
                })
            })
        });
    }

    // First calls into one store that lives on and grows (both key
    // sources share it), from `grown_start()` keys to `GROWN_MAX`.
    // Made when first measured (not when criterion only lists the rows).
    let naive_grown: RefCell<Option<Grown<Naive>>> = RefCell::new(None);
    let idem_grown: RefCell<Option<Grown<Exec>>> = RefCell::new(None);
    for (name, source) in [("", Source::Step), ("_call_id", Source::CallId)] {
        g.bench_function(format!("naive_first_grown{name}"), |b| {
            b.iter_custom(|iters| {
                let make = || Grown::naive(&rt);
                Grown::time_in(&naive_grown, &rt, iters, make, async |naive, i| {
                    naive_first(naive, source, i).await
                })
            })
        });
        g.bench_function(format!("idem_first_grown{name}"), |b| {
            b.iter_custom(|iters| {
                let make = || Grown::exec(&rt);
                Grown::time_in(&idem_grown, &rt, iters, make, async |exec, i| {
                    idem_first(exec, source, i).await
                })
            })
        });
    }
    if let (Some(naive), Some(idem)) = (&*naive_grown.borrow(), &*idem_grown.borrow()) {
        println!(
            "long-lived stores at the end: naive {} keys, idem {} keys",
            naive.what.len(),
            idem.len
        );
    }
    drop(naive_grown);
    drop(idem_grown);

    // Duplicates: one recorded call, answered again and again.
    let naive = Naive::default();
    g.bench_function("naive_duplicate", |b| {
        b.to_async(&rt)
            .iter(|| async { naive.call("run-1", 0, "send_email", &args()).await })
    });
    g.bench_function("naive_duplicate_call_id", |b| {
        b.to_async(&rt)
            .iter(|| async { naive.call_with_id("call_0", "send_email", &args()).await })
    });
    let exec = Executor::builder_shared(Arc::new(MemoryStore::new())).build();
    g.bench_function("idem_duplicate", |b| {
        b.to_async(&rt)
            .iter(|| async { exec.call(send_email, args()).run("run-1", 0).await.unwrap() })
    });
    g.bench_function("idem_duplicate_call_id", |b| {
        b.to_async(&rt).iter(|| async {
            exec.call(send_email, args())
                .call_id("call_0")
                .await
                .unwrap()
        })
    });
    g.bench_function("idem_read", |b| {
        b.to_async(&rt)
            .iter(|| async { exec.call(look_up, args()).await.unwrap() })
    });

    floor(&mut g, &rt);
    g.finish();
}

/// The contract's own work, alone: the key, and the store's record.
fn floor(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &tokio::runtime::Runtime,
) {
    // The key. The naive wrapper: `serde_json`, one SHA-256, hex.
    g.bench_function("floor_naive_key", |b| {
        b.iter(|| {
            let args = args();
            let text = serde_json::to_string(&args).unwrap();
            hex::encode(Sha256::digest(format!("run-1:0:send_email:{text}")))
        })
    });
    // idem: canonical arguments, their fingerprint (a SHA-256), the
    // framed key (another SHA-256), from run and step or a call id.
    let ns = Namespace::default();
    for (name, call_id) in [
        ("floor_idem_key", None),
        ("floor_idem_key_call_id", Some("call_0")),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let args = args();
                let canonical = CanonicalArgs::from_serialize(&args).unwrap();
                let source = match call_id {
                    Some(id) => KeySource::CallId(id),
                    None => KeySource::Step {
                        run_id: "run-1",
                        step: 0,
                        args: &canonical,
                    },
                };
                let key = derive_key(&KeyInput {
                    version: 1,
                    namespace: &ns,
                    tool: "send_email",
                    source,
                })
                .unwrap();
                (canonical, key)
            })
        });
    }
    // The fingerprint's SHA-256 alone, over the canonical text.
    let text = CanonicalArgs::from_serialize(&args()).unwrap().text;
    g.bench_function("floor_fingerprint_hash", |b| {
        b.iter(|| Sha256::digest(std::hint::black_box(text.as_bytes())))
    });

    // The store. Keys derived beforehand; a new store or map every
    // `FRESH_EVERY` calls, as in `first_fresh`.
    let keys: Vec<IdempotencyKey> = (0..FRESH_EVERY)
        .map(|i| {
            derive_key(&KeyInput {
                version: 1,
                namespace: &ns,
                tool: "send_email",
                source: KeySource::CallId(&format!("call_{i}")),
            })
            .unwrap()
        })
        .collect();
    let hexes: Vec<String> = keys.iter().map(|k| k.as_str().to_owned()).collect();
    let canonical = CanonicalArgs::from_serialize(&args()).unwrap();
    // The naive wrapper's map: look up, insert the key and the output.
    g.bench_function("floor_naive_store_first", |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            let mut i = 0;
            while i < iters {
                let mut map = std::sync::Mutex::new(HashMap::<String, String>::new());
                let n = FRESH_EVERY.min(iters - i);
                let owned: Vec<String> = hexes[..n as usize].to_vec();
                let start = Instant::now();
                for key in owned {
                    let out = send(&args());
                    if map.lock().unwrap().get(&key).is_none() {
                        map.lock()
                            .unwrap()
                            .insert(key, serde_json::to_string(&out).unwrap());
                    }
                }
                took += start.elapsed();
                std::hint::black_box(&mut map);
                i += n;
            }
            took
        })
    });
    // idem's memory store: claim (record, lease, fence) and complete.
    let worker = idem::executor::ExecutorConfig::default().worker;
    g.bench_function("floor_idem_store_first", |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (keys, canonical, worker) = (&keys, &canonical, &worker);
            async move {
                let mut took = Duration::ZERO;
                let mut i = 0;
                while i < iters {
                    let store = MemoryStore::new();
                    let n = FRESH_EVERY.min(iters - i);
                    let start = Instant::now();
                    for key in &keys[..n as usize] {
                        store_first(&store, key, canonical, worker).await;
                    }
                    took += start.elapsed();
                    i += n;
                }
                took
            }
        })
    });
}

/// One first call's store work, as the executor asks it of the store.
async fn store_first(
    store: &MemoryStore,
    key: &IdempotencyKey,
    args: &CanonicalArgs,
    worker: &str,
) {
    let req = claim_request(key, args, worker);
    let fence = match store.claim(&req).await.unwrap() {
        idem::store::ClaimOutcome::Acquired { fence, .. } => fence,
        other => panic!("not acquired: {other:?}"),
    };
    let output = OutputJson::new(&send(&args_of())).unwrap();
    store
        .complete(
            key,
            fence,
            &Outcome::Success { output },
            Duration::from_secs(86_400),
        )
        .await
        .unwrap();
}

fn args_of() -> SendEmail {
    args()
}

/// The claim the executor sends for a first call keyed by run and step.
fn claim_request<'a>(
    key: &'a IdempotencyKey,
    args: &'a CanonicalArgs,
    worker: &'a str,
) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        tool: "send_email",
        fingerprint: &args.fingerprint,
        check_fingerprint: true,
        lease: Duration::from_secs(30),
        info: CallInfoRef {
            namespace: Some("default"),
            call_id: None,
            run_id: Some("run-1"),
            step: Some(0),
            args: Some(args.text.as_str()),
            ttl: Some(Duration::from_secs(86_400)),
            reason: None,
        },
        worker: Some(worker),
        // An idempotent write's claim need not be durable.
        durable: false,
    }
}

/// Mean time of a benchmark of this run, from criterion's estimates.
fn mean_ns(id: &str) -> Option<f64> {
    // Cargo runs a bench in its package's directory, and criterion
    // writes to the workspace's target directory, two levels up.
    let target = std::env::var("CARGO_TARGET_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../target").into());
    let path = format!("{target}/criterion/overhead/{id}/new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["mean"]["point_estimate"].as_f64()
}

fn report() {
    println!(
        "\nidem overhead against the naive Mutex<HashMap> wrapper (same run, criterion means):"
    );
    for (idem, naive) in [
        ("idem_first_cold", "naive_first_cold"),
        ("idem_first_fresh", "naive_first_fresh"),
        ("idem_first_fresh_call_id", "naive_first_fresh_call_id"),
        ("idem_first_grown", "naive_first_grown"),
        ("idem_first_grown_call_id", "naive_first_grown_call_id"),
        ("idem_duplicate", "naive_duplicate"),
        ("idem_duplicate_call_id", "naive_duplicate_call_id"),
        ("idem_read", "naive_duplicate"),
    ] {
        if let (Some(a), Some(b)) = (mean_ns(idem), mean_ns(naive)) {
            println!(
                "  {idem:<26} {:>8.2} µs   {naive:<26} {:>8.2} µs   ratio {:.2}×",
                a / 1000.0,
                b / 1000.0,
                a / b
            );
        }
    }
    // The floor: the naive call plus what the contract's work costs beyond
    // the naive wrapper's, each measured alone.
    let get = |id| mean_ns(id).unwrap_or(f64::NAN);
    let key_extra = get("floor_idem_key") - get("floor_naive_key");
    let key_extra_id = get("floor_idem_key_call_id") - get("floor_naive_key");
    let store_extra = get("floor_idem_store_first") - get("floor_naive_store_first");
    println!("\nthe contract's own work, alone (same run):");
    println!(
        "  key: naive {:.2} µs; idem {:.2} µs from run+step, {:.2} µs from a call id (the fingerprint's SHA-256 alone {:.2} µs)",
        get("floor_naive_key") / 1000.0,
        get("floor_idem_key") / 1000.0,
        get("floor_idem_key_call_id") / 1000.0,
        get("floor_fingerprint_hash") / 1000.0,
    );
    println!(
        "  store, first call: naive map {:.2} µs; idem claim + complete {:.2} µs",
        get("floor_naive_store_first") / 1000.0,
        get("floor_idem_store_first") / 1000.0,
    );
    for (row, naive, extra) in [
        ("first_fresh", "naive_first_fresh", key_extra + store_extra),
        (
            "first_fresh_call_id",
            "naive_first_fresh_call_id",
            key_extra_id + store_extra,
        ),
        ("first_grown", "naive_first_grown", key_extra + store_extra),
        (
            "first_grown_call_id",
            "naive_first_grown_call_id",
            key_extra_id + store_extra,
        ),
        ("duplicate", "naive_duplicate", key_extra),
        ("duplicate_call_id", "naive_duplicate_call_id", key_extra_id),
    ] {
        let n = get(naive);
        println!(
            "  floor {row:<20} naive + contract = {:>6.2} µs = {:.2}× naive",
            (n + extra) / 1000.0,
            (n + extra) / n
        );
    }
}

criterion_group!(benches, overhead);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    report();
    if std::env::args().all(|a| a != "--list") {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        paired::paired(&rt);
    }
}
