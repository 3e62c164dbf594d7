//! The sweep figure for Redis, which deletes expired records itself (its
//! active expiry): [`StoreExt::sweep`] deletes none and only walks the slots'
//! open sets and trims the audit streams. What a caller feels is the
//! server deleting many records that lapse together, and the sweeps. So
//! `records` records are given one expiry a few seconds ahead, with
//! [`OPEN`] open records beside them (half of them approval requests
//! lapsing at the same instant, whose keys a sweep drops from the open
//! sets, half in flight, which it walks past), and one caller makes first
//! calls one after the other through four phases:
//!
//! 1. before the expiry, alone, for `budget`;
//! 2. before the expiry, the store swept back to back, for `budget`: the
//!    sweeps' share;
//! 3. from the expiry on, the store swept back to back, until the server
//!    has expired every one of them (its `expired_keys` counter) or for at
//!    most [`BOUND`];
//! 4. as many records again, lapsing together a few seconds after they
//!    were filled, with no sweep: the expiry's share.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::clock::Timestamp;

use crate::backend::{Backend, Raw};
use crate::inbox::{park_open, Parked};
use crate::timing::{caller, quantile};
use idem_runtime::store::StoreExt;

/// Open records put beside the expiring ones: half approval requests
/// lapsing with them, half in flight.
pub const OPEN: u64 = 4000;

/// The longest a phase after an expiry is measured.
pub const BOUND: Duration = Duration::from_secs(30);

/// How far past the fill, the expiry pass and the phases before it the
/// records lapse.
const MARGIN: Duration = Duration::from_secs(2);

/// The first filler record's number (past the growth table's).
const BASE: u64 = 1 << 40;

/// A count of durations and their median, 99th percentile and slowest.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// How many.
    pub count: u64,
    /// The median.
    pub median: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The slowest.
    pub worst: Duration,
}

impl Figures {
    /// The figures of `sorted`.
    fn of(sorted: &[Duration]) -> Figures {
        Figures {
            count: sorted.len() as u64,
            median: quantile(sorted, 0.5),
            p99: quantile(sorted, 0.99),
            worst: quantile(sorted, 1.0),
        }
    }
}

/// One phase (see the module's documentation).
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    /// What ran meanwhile.
    pub label: &'static str,
    /// After an expiry: the keys the server expired (the filler and the
    /// approval requests: `expired_keys` of `INFO stats`), and how long
    /// from the expiry until they were all gone (`None`: not within
    /// [`BOUND`]).
    pub expired: Option<(u64, Option<Duration>)>,
    /// The sweeps, back to back, when the store was swept.
    pub sweeps: Option<Figures>,
    /// The caller's first calls.
    pub calls: Figures,
}

/// One Redis store's figures.
#[derive(Debug, Clone)]
pub struct Expiry {
    /// The records lapsing together in each of phases 3 and 4.
    pub records: u64,
    /// Open records lapsing with them (approval requests), in each.
    pub lapsing: u64,
    /// Open records in flight (no expiry), throughout.
    pub in_flight: u64,
    /// The four phases, in order.
    pub phases: Vec<Phase>,
}

/// A number from the `INFO` section `section` (`field:value` lines).
async fn info<T: std::str::FromStr>(
    conn: &mut redis::aio::MultiplexedConnection,
    section: &str,
    field: &str,
) -> T
where
    T::Err: std::fmt::Debug,
{
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
        .trim()
        .parse()
        .unwrap()
}

/// The number of keys in the server's database.
async fn dbsize(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    redis::cmd("DBSIZE").query_async(conn).await.unwrap()
}

/// Sweep `b` back to back until `done` is set; the length of each sweep,
/// sorted.
async fn sweep_until(b: &Backend, done: impl Fn() -> bool) -> Vec<Duration> {
    let mut sweeps = Vec::new();
    while !done() {
        let started = Instant::now();
        b.probe.sweep().await.expect("sweep");
        sweeps.push(started.elapsed());
    }
    sweeps.sort_unstable();
    sweeps
}

/// The server's CPU time so far (`used_cpu_sys` and `used_cpu_user`).
async fn server_cpu(conn: &mut redis::aio::MultiplexedConnection) -> Duration {
    let sys: f64 = info(conn, "cpu", "used_cpu_sys").await;
    let user: f64 = info(conn, "cpu", "used_cpu_user").await;
    Duration::from_secs_f64(sys + user)
}

/// Fill the filler records `records` of `b` and give them one expiry,
/// with the approval requests of `approvals` ([`park_open`]) lapsing at
/// the same instant: `before` plus [`MARGIN`] after they are all in,
/// as far as the fill's length can tell (setting the expiry writes one
/// field a record where the fill wrote the whole hash and its index
/// entry, so it takes less time than the fill did). Returns the instant.
async fn lapse_together(
    b: &Backend,
    records: Range<u64>,
    approvals: Range<u64>,
    before: Duration,
) -> Timestamp {
    let store = b.probe.inner();
    let started = Instant::now();
    b.fill(
        BASE + records.start,
        BASE + records.end,
        Duration::from_secs(86_400),
    )
    .await;
    let filled = started.elapsed();
    let at = store.now().await.unwrap().plus(filled + before + MARGIN);
    let started = Instant::now();
    b.expire_at(BASE + records.start, BASE + records.end, at)
        .await;
    park_open(store, approvals.clone(), Parked::Until(at)).await;
    let left = store.now().await.unwrap().until(at);
    eprintln!(
        "  {}: {} records filled in {:.1} s, their expiry set and {} approval requests added in {:.1} s; {:.1} s to go",
        b.name,
        records.end - records.start,
        filled.as_secs_f64(),
        approvals.end - approvals.start,
        started.elapsed().as_secs_f64(),
        left.as_secs_f64()
    );
    assert!(
        left > before + Duration::from_millis(200),
        "the records lapse before the phases before their expiry are measured"
    );
    at
}

/// The caller from 50 ms before `at` (as it starts 50 ms before the other
/// stores' sweep) until the server has expired `target` keys since, or
/// [`BOUND`] after `at`; meanwhile, with `sweep`, the store swept back to
/// back.
async fn expiring(
    b: &Arc<Backend>,
    client: &redis::Client,
    at: Timestamp,
    target: u64,
    sweep: bool,
) -> Phase {
    let store = b.probe.inner();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let left = store.now().await.unwrap().until(at);
    tokio::time::sleep(left.saturating_sub(Duration::from_millis(50))).await;
    let expired_before: u64 = info(&mut conn, "stats", "expired_keys").await;
    let keys_before = dbsize(&mut conn).await;
    let cpu = server_cpu(&mut conn).await;
    let cycles: u64 = info(&mut conn, "stats", "expire_cycle_cpu_milliseconds").await;
    let stop = Arc::new(AtomicBool::new(false));
    let run = format!("expiry-{sweep}");
    let during = tokio::spawn(caller(b.clone(), run, stop.clone()));
    tokio::time::sleep(store.now().await.unwrap().until(at)).await;
    let window = Instant::now();

    // Every 10 ms: has the server expired them all?
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        tokio::spawn(async move {
            loop {
                let expired: u64 = info(&mut conn, "stats", "expired_keys").await;
                let expired = expired - expired_before;
                if expired >= target || window.elapsed() >= BOUND {
                    let gone = (expired >= target).then(|| window.elapsed());
                    done.store(true, Ordering::Relaxed);
                    return (expired, gone);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let sweeps = match sweep {
        true => Some(sweep_until(b, || done.load(Ordering::Relaxed)).await),
        false => None,
    };
    let (expired, gone) = watcher.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    let calls = during.await.unwrap();
    let keys_after = dbsize(&mut conn).await;
    let cpu = server_cpu(&mut conn).await - cpu;
    let cycles = info::<u64>(&mut conn, "stats", "expire_cycle_cpu_milliseconds").await - cycles;
    eprintln!(
        "  {}: {keys_before} keys before the expiry, {keys_after} after; {expired} expired; the server's CPU meanwhile {:.0} ms, {cycles} ms of it in active expiry cycles",
        b.name,
        cpu.as_secs_f64() * 1e3
    );
    Phase {
        label: match sweep {
            true => "expiring, swept back to back",
            false => "expiring, no sweep",
        },
        expired: Some((expired, gone)),
        sweeps: sweeps.as_deref().map(Figures::of),
        calls: Figures::of(&calls),
    }
}

/// The figures of `b`, a Redis store, with `records` records lapsing
/// together (see the module's documentation).
pub async fn expiry_stall(b: &Arc<Backend>, records: u64, budget: Duration) -> Expiry {
    let Raw::Redis(client) = &b.raw else {
        panic!("{}: not a Redis store", b.name);
    };
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (lapsing, in_flight) = (OPEN / 2, OPEN - OPEN / 2);
    park_open(b.probe.inner(), 0..in_flight, Parked::InFlight).await;
    let mut phases = Vec::new();

    // Phases 1 and 2, before the first expiry.
    let at = lapse_together(b, 0..records, in_flight..OPEN, 2 * budget).await;
    let stop = Arc::new(AtomicBool::new(false));
    let alone = tokio::spawn(caller(b.clone(), "expiry-baseline".into(), stop.clone()));
    tokio::time::sleep(budget).await;
    stop.store(true, Ordering::Relaxed);
    phases.push(Phase {
        label: "before the expiry, no sweep",
        expired: None,
        sweeps: None,
        calls: Figures::of(&alone.await.unwrap()),
    });
    let cpu = server_cpu(&mut conn).await;
    let stop = Arc::new(AtomicBool::new(false));
    let alone = tokio::spawn(caller(b.clone(), "expiry-swept".into(), stop.clone()));
    let started = Instant::now();
    let sweeps = sweep_until(b, || started.elapsed() >= budget).await;
    stop.store(true, Ordering::Relaxed);
    let calls = alone.await.unwrap();
    let cpu = server_cpu(&mut conn).await - cpu;
    eprintln!(
        "  {}: the server's CPU {:.1} ms a sweep before the expiry",
        b.name,
        cpu.as_secs_f64() * 1e3 / sweeps.len() as f64
    );
    phases.push(Phase {
        label: "before the expiry, swept back to back",
        expired: None,
        sweeps: Some(Figures::of(&sweeps)),
        calls: Figures::of(&calls),
    });

    // Phase 3, then as many records again for phase 4.
    phases.push(expiring(b, client, at, records + lapsing, true).await);
    let approvals = OPEN..OPEN + lapsing;
    let at = lapse_together(b, records..2 * records, approvals, Duration::ZERO).await;
    phases.push(expiring(b, client, at, records + lapsing, false).await);
    Expiry {
        records,
        lapsing,
        in_flight,
        phases,
    }
}
