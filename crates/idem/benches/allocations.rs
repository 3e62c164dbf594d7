//! Heap allocations per call on the in-memory store, against the naive
//! `Mutex<HashMap>` wrapper of `benches/overhead.rs`, counted with a
//! counting global allocator. Unlike timings, the counts do not depend on
//! the machine or its load, so they say where the in-memory path's time
//! goes (boxed futures, key and fingerprint strings, record copies) and
//! show when a change adds to it.
//!
//! It also measures what a completed record keeps: the live heap (bytes
//! allocated and not yet freed) after 100,000 first calls into a fresh
//! store whose records do not expire, per record, as requested and as
//! glibc's allocator pays for it (each allocation rounded up to its chunk).
//!
//! Run with `cargo bench --bench allocations`; with `IDEM_BENCH_TRACE=1`
//! it also prints where one first call's and one duplicate's allocations
//! are made.

#![allow(unreachable_pub)] // `pub` for the other modules of this target
use std::alloc::{GlobalAlloc, Layout, System};
mod common;

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{args, send, send_email, EmailSent, Naive, SendEmail};
use idem::{tool, Executor, MemoryStore, ToolError};

/// Counts allocations (and reallocations) and their bytes, and the bytes
/// live (allocated and not yet freed).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated minus bytes freed (wrapping: read as differences).
static LIVE: AtomicU64 = AtomicU64::new(0);
/// The same in glibc's chunks ([`chunk`]).
static LIVE_CHUNKS: AtomicU64 = AtomicU64::new(0);

/// What glibc's malloc takes for `size` bytes on a 64-bit target: the
/// request plus an 8-byte header, rounded up to 16, at least 32.
fn chunk(size: usize) -> u64 {
    ((size + 8 + 15) & !15).max(32) as u64
}

fn live(size: usize) {
    LIVE.fetch_add(size as u64, Ordering::Relaxed);
    LIVE_CHUNKS.fetch_add(chunk(size), Ordering::Relaxed);
}

fn freed(size: usize) {
    LIVE.fetch_sub(size as u64, Ordering::Relaxed);
    LIVE_CHUNKS.fetch_sub(chunk(size), Ordering::Relaxed);
}

/// Set while one call is traced (`IDEM_BENCH_TRACE`).
static TRACING: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Set while a traced allocation is being printed (which allocates).
    static PRINTING: Cell<bool> = const { Cell::new(false) };
}

/// Print where an allocation of `size` bytes was made: the frames of idem
/// and of this bench, innermost first.
fn trace(size: usize) {
    if !TRACING.load(Ordering::Relaxed) || PRINTING.with(|p| p.replace(true)) {
        return;
    }
    let bt = std::backtrace::Backtrace::force_capture().to_string();
    let frames: Vec<&str> = bt
        .lines()
        .filter(|l| !l.trim_start().starts_with("at "))
        .map(|l| l.split_once(": ").map_or(l, |(_, f)| f))
        .filter(|f| f.contains("idem") || f.contains("allocations::"))
        .filter(|f| !f.contains("allocations::trace") && !f.contains("GlobalAlloc"))
        .take(4)
        .collect();
    eprintln!("  {size:>5} B  {}", frames.join("  <  "));
    PRINTING.with(|p| p.set(false));
}

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        live(layout.size());
        trace(layout.size());
        // SAFETY: the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        freed(layout.size());
        // SAFETY: the caller upholds `dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        freed(layout.size());
        live(new_size);
        trace(new_size);
        // SAFETY: the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Look something up.
#[tool(class = "read")]
async fn look_up(args: SendEmail) -> Result<EmailSent, ToolError> {
    Ok(send(&args))
}

const CALLS: u64 = 2_000;

/// The arguments of [`ping`].
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Ping {
    n: u64,
}

/// Answer a ping: the soak's tool (`examples/soak.rs`), whose record is
/// the shape the memory target of SPEC §9 is stated for (`{"n":123}` in,
/// an 8-byte output out).
#[tool(class = "idempotent_write")]
async fn ping(args: Ping) -> Result<Ping, ToolError> {
    Ok(args)
}

/// How many first calls [`retained_per_record`] makes.
const RECORDS: u64 = 100_000;

/// The live heap per record, in bytes as requested and in glibc chunks,
/// after [`RECORDS`] first calls of `call(exec, i)` into a fresh memory
/// store (the default TTL of 24 h: nothing expires meanwhile).
async fn retained_per_record<F, Fut>(call: F) -> (f64, f64)
where
    F: Fn(Executor, u64) -> Fut,
    Fut: Future<Output = ()>,
{
    let exec = Executor::builder_shared(Arc::new(MemoryStore::new())).build();
    // One call first, so that what the executor makes once is not counted.
    call(exec.clone(), RECORDS).await;
    let (live, chunks) = (
        LIVE.load(Ordering::Relaxed),
        LIVE_CHUNKS.load(Ordering::Relaxed),
    );
    for i in 0..RECORDS {
        call(exec.clone(), i).await;
    }
    let n = RECORDS as f64;
    let per_record = (
        LIVE.load(Ordering::Relaxed).wrapping_sub(live) as i64 as f64 / n,
        LIVE_CHUNKS.load(Ordering::Relaxed).wrapping_sub(chunks) as i64 as f64 / n,
    );
    drop(exec);
    per_record
}

/// Allocations and bytes per call of `CALLS` calls of `call(i)`.
async fn per_call<F, Fut>(call: F) -> (f64, f64)
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    // Warm up lazily initialized state (maps growing, thread locals).
    for i in 0..CALLS {
        call(i).await;
    }
    let (a, b) = (
        ALLOCATIONS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    for i in CALLS..2 * CALLS {
        call(i).await;
    }
    let n = CALLS as f64;
    (
        (ALLOCATIONS.load(Ordering::Relaxed) - a) as f64 / n,
        (BYTES.load(Ordering::Relaxed) - b) as f64 / n,
    )
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // First calls: a new step each time (the map grows, as it would).
        let naive = Naive::default();
        let naive_first = per_call(|i| {
            let naive = &naive;
            async move {
                naive.call("run-1", i, "send_email", &args()).await;
            }
        })
        .await;
        let exec = Executor::builder_shared(Arc::new(MemoryStore::new())).build();
        let idem_first = per_call(|i| {
            let exec = &exec;
            async move {
                exec.call(send_email, args())
                    .run("run-1", i)
                    .await
                    .unwrap();
            }
        })
        .await;
        // First calls keyed by the provider's call id (the id is made by
        // the caller in both).
        let naive_first_call_id = per_call(|i| {
            let naive = &naive;
            async move {
                let id = format!("call_{i}");
                naive.call_with_id(&id, "send_email", &args()).await;
            }
        })
        .await;
        let idem_first_call_id = per_call(|i| {
            let exec = &exec;
            async move {
                exec.call(send_email, args())
                    .call_id(format!("call_{i}"))
                    .await
                    .unwrap();
            }
        })
        .await;
        // Duplicates: step 0, recorded above, again and again.
        let naive_duplicate = per_call(|_| {
            let naive = &naive;
            async move {
                naive.call("run-1", 0, "send_email", &args()).await;
            }
        })
        .await;
        let idem_duplicate = per_call(|_| {
            let exec = &exec;
            async move {
                exec.call(send_email, args()).run("run-1", 0).await.unwrap();
            }
        })
        .await;
        let naive_duplicate_call_id = per_call(|_| {
            let naive = &naive;
            async move {
                naive.call_with_id("call_0", "send_email", &args()).await;
            }
        })
        .await;
        let idem_duplicate_call_id = per_call(|_| {
            let exec = &exec;
            async move {
                exec.call(send_email, args())
                    .call_id("call_0")
                    .await
                    .unwrap();
            }
        })
        .await;
        let idem_read = per_call(|_| {
            let exec = &exec;
            async move {
                exec.call(look_up, args()).await.unwrap();
            }
        })
        .await;

        if std::env::var_os("IDEM_BENCH_TRACE").is_some() {
            // Where one first call's and one duplicate's allocations are
            // made (after the runs above warmed everything up).
            for (what, step) in [("first call", 2 * CALLS + 1), ("duplicate", 0)] {
                eprintln!("{what}, run and step:");
                TRACING.store(true, Ordering::Relaxed);
                exec.call(send_email, args())
                    .run("run-1", step)
                    .await
                    .unwrap();
                TRACING.store(false, Ordering::Relaxed);
            }
        }

        println!("heap allocations per call, in-memory store ({CALLS} calls each; the arguments' own 3 strings included):");
        println!("  {:<24} {:>8} {:>10}", "path", "allocs", "bytes");
        for (name, (a, b)) in [
            ("naive_first", naive_first),
            ("idem_first", idem_first),
            ("naive_first_call_id", naive_first_call_id),
            ("idem_first_call_id", idem_first_call_id),
            ("naive_duplicate", naive_duplicate),
            ("idem_duplicate", idem_duplicate),
            ("naive_duplicate_call_id", naive_duplicate_call_id),
            ("idem_duplicate_call_id", idem_duplicate_call_id),
            ("idem_read", idem_read),
        ] {
            println!("  {name:<24} {a:>8.1} {b:>10.0}");
        }
        println!(
            "  ratios: first {:.2}x, first (call id) {:.2}x, duplicate {:.2}x, duplicate (call id) {:.2}x (allocations, idem / naive)",
            idem_first.0 / naive_first.0,
            idem_first_call_id.0 / naive_first_call_id.0,
            idem_duplicate.0 / naive_duplicate.0,
            idem_duplicate_call_id.0 / naive_duplicate_call_id.0
        );

        // What a completed record keeps, in a store of its own.
        let ping_record = retained_per_record(|exec, i| async move {
            exec.call(ping, Ping { n: i }).run("soak", i).await.unwrap();
        })
        .await;
        let email_record = retained_per_record(|exec, i| async move {
            exec.call(send_email, args()).run("run-1", i).await.unwrap();
        })
        .await;
        println!("retained heap per completed record ({RECORDS} first calls into a fresh memory store):");
        println!("  {:<24} {:>8} {:>10}", "record", "bytes", "in chunks");
        for (name, (bytes, chunks)) in [("ping (soak)", ping_record), ("send_email", email_record)] {
            println!("  {name:<24} {bytes:>8.1} {chunks:>10.1}");
        }
    });
}
