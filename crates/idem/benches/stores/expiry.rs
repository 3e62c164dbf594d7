//! The sweep figure for Redis, which deletes expired records itself (its
//! active expiry): [`Store::sweep`] deletes none and only walks the slots'
//! open sets and trims the audit streams. What a caller feels is the
//! server deleting many records that lapse together while the store is
//! swept. So `records` records are given one expiry a few seconds ahead,
//! with [`OPEN`] open records beside them (half of them approval requests
//! lapsing at the same instant, whose keys the sweep drops from the open
//! sets, half in flight, which it walks past); one caller makes first
//! calls alone before the expiry, then (still before it) while the store
//! is swept back to back, the sweeps' share, then from the expiry on
//! while the store is swept back to back, until the server has expired
//! every one of them (its `expired_keys` counter) or for at most
//! [`BOUND`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idem_runtime::store::Store;

use crate::backend::{Backend, Raw};
use crate::inbox::{park_open, Parked};
use crate::measure::{caller, quantile};

/// Open records put beside the expiring ones: half approval requests
/// lapsing with them, half in flight.
pub const OPEN: u64 = 4000;

/// The longest the window after the expiry is measured.
pub const BOUND: Duration = Duration::from_secs(30);

/// How far past the fill, the expiry pass and the baseline the records
/// lapse.
const MARGIN: Duration = Duration::from_secs(2);

/// One Redis store's figures.
#[derive(Debug, Clone, Copy)]
pub struct Expiry {
    /// The records lapsing together (the filler).
    pub records: u64,
    /// Open records lapsing with them (approval requests).
    pub lapsing: u64,
    /// Open records in flight (no expiry).
    pub in_flight: u64,
    /// Keys the server expired in the window (the filler and the approval
    /// requests: `expired_keys` of `INFO stats`).
    pub expired: u64,
    /// From the expiry until the server had expired them all; `None` if
    /// it had not within [`BOUND`].
    pub gone: Option<Duration>,
    /// How many sweeps ran in the window, back to back.
    pub sweeps: u64,
    /// The median sweep's length.
    pub sweep_median: Duration,
    /// The slowest sweep's length.
    pub sweep_worst: Duration,
    /// The caller's first calls in the window.
    pub calls: u64,
    /// Their median latency.
    pub median: Duration,
    /// Their 99th percentile.
    pub p99: Duration,
    /// The slowest of them.
    pub worst: Duration,
    /// The same caller's median for `budget` before the expiry, with no
    /// sweep.
    pub baseline_median: Duration,
    /// Its slowest call then.
    pub baseline_worst: Duration,
    /// The same caller's median, p99 and slowest for `budget` before the
    /// expiry while the store is swept back to back: the sweeps' share.
    pub swept: (Duration, Duration, Duration),
}

/// Sweep `b` back to back until `done` is set; the length of each sweep.
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

/// The figures of `b`, a Redis store, with `records` records lapsing
/// together (see the module's documentation).
pub async fn expiry_stall(b: &Arc<Backend>, records: u64, budget: Duration) -> Expiry {
    const BASE: u64 = 1 << 40;
    let Raw::Redis(client) = &b.raw else {
        panic!("{}: not a Redis store", b.name);
    };
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let store = b.probe.inner().clone();

    // Copies of a record kept a day; then one expiry for all. Setting it
    // writes one field a record where the fill wrote the whole hash and
    // its index entry, so it takes less time than the fill did.
    let started = Instant::now();
    b.fill(BASE, BASE + records, Duration::from_secs(86_400))
        .await;
    let filled = started.elapsed();
    let at = store
        .now()
        .await
        .unwrap()
        .plus(filled + 2 * budget + MARGIN);
    let started = Instant::now();
    b.expire_at(BASE, BASE + records, at).await;
    let (lapsing, in_flight) = (OPEN / 2, OPEN - OPEN / 2);
    park_open(&store, 0..lapsing, Parked::Until(at)).await;
    park_open(&store, lapsing..OPEN, Parked::InFlight).await;
    let left = store.now().await.unwrap().until(at);
    eprintln!(
        "  {}: {records} records filled in {:.1} s, their expiry set and {OPEN} open records added in {:.1} s; {:.1} s to go",
        b.name,
        filled.as_secs_f64(),
        started.elapsed().as_secs_f64(),
        left.as_secs_f64()
    );
    assert!(
        left > 2 * budget + Duration::from_millis(200),
        "the records lapse before the baseline is measured"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let alone = tokio::spawn(caller(b.clone(), "expiry-baseline".into(), stop.clone()));
    tokio::time::sleep(budget).await;
    stop.store(true, Ordering::Relaxed);
    let baseline = alone.await.unwrap();

    let cpu = server_cpu(&mut conn).await;
    let stop = Arc::new(AtomicBool::new(false));
    let alone = tokio::spawn(caller(b.clone(), "expiry-swept".into(), stop.clone()));
    let started = Instant::now();
    let sweeps = sweep_until(b, || started.elapsed() >= budget).await;
    stop.store(true, Ordering::Relaxed);
    let swept = alone.await.unwrap();
    let cpu = server_cpu(&mut conn).await - cpu;
    eprintln!(
        "  {}: {} sweeps before the expiry, median {:.1} ms, the server's CPU {:.1} ms a sweep",
        b.name,
        sweeps.len(),
        quantile(&sweeps, 0.5).as_secs_f64() * 1e3,
        cpu.as_secs_f64() * 1e3 / sweeps.len() as f64
    );

    // The caller starts 50 ms before the expiry, as it starts 50 ms before
    // the other stores' sweep.
    let left = store.now().await.unwrap().until(at);
    tokio::time::sleep(left.saturating_sub(Duration::from_millis(50))).await;
    let expired_before: u64 = info(&mut conn, "stats", "expired_keys").await;
    let keys_before = dbsize(&mut conn).await;
    let stop = Arc::new(AtomicBool::new(false));
    let during = tokio::spawn(caller(b.clone(), "expiry-caller".into(), stop.clone()));
    tokio::time::sleep(store.now().await.unwrap().until(at)).await;
    let window = Instant::now();

    // Every 10 ms: has the server expired them all?
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        tokio::spawn(async move {
            let target = records + lapsing;
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
    let sweeps = sweep_until(b, || done.load(Ordering::Relaxed)).await;
    stop.store(true, Ordering::Relaxed);
    let during = during.await.unwrap();
    let (expired, gone) = watcher.await.unwrap();
    let keys_after = dbsize(&mut conn).await;
    eprintln!(
        "  {}: {keys_before} keys before the expiry, {keys_after} after; {expired} expired",
        b.name
    );
    Expiry {
        records,
        lapsing,
        in_flight,
        expired,
        gone,
        sweeps: sweeps.len() as u64,
        sweep_median: quantile(&sweeps, 0.5),
        sweep_worst: quantile(&sweeps, 1.0),
        calls: during.len() as u64,
        median: quantile(&during, 0.5),
        p99: quantile(&during, 0.99),
        worst: quantile(&during, 1.0),
        baseline_median: quantile(&baseline, 0.5),
        baseline_worst: quantile(&baseline, 1.0),
        swept: (
            quantile(&swept, 0.5),
            quantile(&swept, 0.99),
            quantile(&swept, 1.0),
        ),
    }
}
