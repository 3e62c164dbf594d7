//! Drive a SQLite store so that its fsyncs can be counted from outside:
//!
//! ```sh
//! cargo build -p idem-sqlite --release --example sqlite_fsyncs
//! B=target/release/examples/sqlite_fsyncs
//! strace -f -c -e trace=fsync,fdatasync $B /tmp/f.db open 0
//! strace -f -c -e trace=fsync,fdatasync $B /tmp/f.db serial 1000      # first calls, one at a time
//! strace -f -c -e trace=fsync,fdatasync $B /tmp/f.db duplicates 1000  # the same calls again
//! strace -f -c -e trace=fsync,fdatasync $B /tmp/g.db concurrent 1000  # first calls, all at once
//! strace -f -c -e trace=fsync,fdatasync $B /tmp/h.db workers 1000     # 16 workers, one call at a time each
//! strace -f -c -e trace=fsync,fdatasync $B /tmp/i.db serial 1000 normal  # synchronous=NORMAL
//! strace -f -c -e trace=fsync,fdatasync $B /tmp/j.db serial 1000 relaxed # claims as an idempotent_write's
//! ```
//!
//! The claims are durable ([`ClaimRequest::durable`]), as a
//! `non_idempotent_write`'s are, unless `relaxed` is given: then they are
//! an `idempotent_write`'s, and only the completions are fsynced. (The
//! executor also durably marks a non-idempotent call as started; this
//! program does not.)
//!
//! Subtract the `open` run (creating the file) from the others. Keys are
//! `0…n`, so `duplicates` replays the calls `serial` recorded.

#![allow(unreachable_pub)] // `pub` for the other modules of this target
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::record::{Outcome, OutputJson};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, ClaimRequest};
use idem_sqlite::{SqliteOptions, SqliteStore, Synchronous};

fn key(i: usize) -> IdempotencyKey {
    IdempotencyKey::parse(&format!("{i:064x}")).expect("64 hex digits")
}

/// One call: claim, "run the tool", complete. Returns whether it ran.
async fn call(store: &SqliteStore, i: usize, durable: bool) -> bool {
    let (key, f) = (key(i), Fingerprint::new("0".repeat(64)));
    let req = ClaimRequest {
        key: &key,
        tool: "send_email",
        fingerprint: &f,
        check_fingerprint: true,
        lease: Duration::from_secs(60),
        info: idem_runtime::record::CallInfoRef::EMPTY,
        worker: None,
        durable,
    };
    match store.claim(&req).await.expect("claim") {
        ClaimOutcome::Acquired { fence, .. } => {
            let outcome = Outcome::Success {
                output: OutputJson::from_value(&serde_json::json!({ "message_id": i })),
            };
            store
                .complete(&key, fence, &outcome, Duration::from_secs(3600))
                .await
                .expect("complete");
            true
        }
        ClaimOutcome::Completed(_) => false,
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (path, mode, n, synchronous, durable) = match &args[1..] {
        [path, mode, n] => (path, mode, n, Synchronous::Full, true),
        [path, mode, n, s] if s == "normal" => (path, mode, n, Synchronous::Normal, true),
        [path, mode, n, s] if s == "relaxed" => (path, mode, n, Synchronous::Full, false),
        _ => {
            eprintln!(
                "usage: sqlite_fsyncs DB open|serial|concurrent|workers|duplicates N [normal|relaxed]"
            );
            std::process::exit(2);
        }
    };
    let n: usize = n.parse().expect("N");
    let options = SqliteOptions::default().synchronous(synchronous);
    let store = Arc::new(SqliteStore::open_with(path, options).await.expect("open"));
    let started = Instant::now();
    let ran = match mode.as_str() {
        "open" => 0,
        "serial" | "duplicates" => {
            let mut ran = 0;
            for i in 0..n {
                ran += usize::from(call(&store, i, durable).await);
            }
            ran
        }
        "concurrent" => {
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..n {
                let store = store.clone();
                tasks.spawn(async move { call(&store, i, durable).await });
            }
            tasks.join_all().await.into_iter().filter(|r| *r).count()
        }
        "workers" => {
            // 16 workers, each making its calls one after the other.
            let mut tasks = tokio::task::JoinSet::new();
            for w in 0..16 {
                let store = store.clone();
                tasks.spawn(async move {
                    let mut ran = 0;
                    for i in (w..n).step_by(16) {
                        ran += usize::from(call(&store, i, durable).await);
                    }
                    ran
                });
            }
            tasks.join_all().await.into_iter().sum()
        }
        other => panic!("unknown mode {other}"),
    };
    eprintln!(
        "{mode}: {n} calls, {ran} ran the tool, {:?}",
        started.elapsed()
    );
    Arc::into_inner(store).expect("sole owner").close().await;
}
