//! Every store through the public `Executor` API, against the naive
//! `Mutex<HashMap>` wrapper of `benches/overhead.rs` measured in the same
//! run: latency of a first call and of a duplicate, a burst of concurrent
//! calls of one key, throughput with 1, 4, 16 and 64 workers, the cost of a
//! call as the store grows, and how long a sweep of expired records stalls
//! a caller. Per call it also counts store operations (round trips), fsyncs
//! (SQLite, with `strace`) and WAL bytes (PostgreSQL).
//!
//! ```sh
//! cargo bench --bench stores --features redis,postgres
//! ```
//!
//! Redis and PostgreSQL are real servers started on loopback in temporary
//! directories by `idem_testkit::servers` (Redis without persistence,
//! PostgreSQL with `fsync=off`); a store whose server is not installed is
//! reported as SKIPPED. SQLite files are in the system's temporary
//! directory. The results are printed as Markdown tables at the end.
//!
//! Knobs (environment variables):
//!
//! * `IDEM_BENCH_STORES`: which stores, comma-separated, of `memory`,
//!   `sqlite-full`, `sqlite-normal`, `redis`, `postgres` (default: all).
//! * `IDEM_BENCH_SIZES`: records already present for the growth table
//!   (default `10000,100000`; `10000,100000,1000000` for the full table;
//!   empty to skip).
//! * `IDEM_BENCH_SWEEP`: expired records swept while a caller keeps calling
//!   (default `100000`; `0` to skip).
//! * `IDEM_BENCH_CALLS`: the most calls per latency figure (default 2000).
//! * `IDEM_BENCH_SECS`: the longest a latency figure or a throughput point
//!   runs, in seconds (default 1).
//! * `IDEM_BENCH_BURST`: concurrent calls of one key (default 10000).
//! * `IDEM_BENCH_SQLITE_RECORD_CACHE`: bytes of decoded records the SQLite
//!   stores keep (default the store's own; `0` decodes every duplicate).
//!
//! Nothing here is a test: `cargo test` never runs it, and no result is
//! checked against a threshold.

mod common;

use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{args, send_email, EmailSent, Naive};
use idem::{Executor, MemoryStore};
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{Fence, Outcome, Record};
use idem_runtime::store::{
    ClaimOutcome, ClaimRequest, Expected, PostgresStore, RedisStore, ScanPage, SqliteOptions,
    SqliteStore, Store, StoreError, Synchronous,
};
use idem_testkit::{PostgresServer, RedisServer, TempDir};
use serde_json::Value;
use sha2::{Digest, Sha256};

// ---------------------------------------------------------------------------
// Counting store operations.

/// Forwards to the real store, counting operations (each one round trip on
/// Redis and PostgreSQL), claims sent to the store, and claims it answered
/// on the caller's thread ([`Store::claim_local`]: a map read in memory, a
/// read of the file on SQLite).
#[derive(Debug)]
struct Probe {
    inner: Arc<dyn Store>,
    ops: AtomicU64,
    claims: AtomicU64,
    local: AtomicU64,
}

impl Probe {
    fn count(&self) {
        self.ops.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait::async_trait]
impl Store for Probe {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn claim(&self, r: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        self.count();
        self.claims.fetch_add(1, Ordering::Relaxed);
        self.inner.claim(r).await
    }
    fn claim_local(&self, r: &ClaimRequest<'_>) -> Option<Result<ClaimOutcome, StoreError>> {
        // Counted when answered: a claim the store answered on the caller's
        // thread is still one store operation (no round trip).
        let answer = self.inner.claim_local(r)?;
        self.count();
        self.local.fetch_add(1, Ordering::Relaxed);
        Some(answer)
    }
    async fn checkpoint(
        &self,
        k: &IdempotencyKey,
        f: Fence,
        s: &str,
        v: &Value,
        l: Duration,
    ) -> Result<(), StoreError> {
        self.count();
        self.inner.checkpoint(k, f, s, v, l).await
    }
    async fn renew(&self, k: &IdempotencyKey, f: Fence, l: Duration) -> Result<(), StoreError> {
        self.count();
        self.inner.renew(k, f, l).await
    }
    async fn complete(
        &self,
        k: &IdempotencyKey,
        f: Fence,
        o: &Outcome,
        t: Duration,
    ) -> Result<(), StoreError> {
        self.count();
        self.inner.complete(k, f, o, t).await
    }
    async fn release(&self, k: &IdempotencyKey, f: Fence) -> Result<(), StoreError> {
        self.count();
        self.inner.release(k, f).await
    }
    async fn get(&self, k: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.count();
        self.inner.get(k).await
    }
    async fn replace(
        &self,
        k: &IdempotencyKey,
        e: Expected,
        n: Option<&Record>,
        a: Option<&idem_runtime::audit::AuditEvent>,
    ) -> Result<Option<Fence>, StoreError> {
        self.count();
        self.inner.replace(k, e, n, a).await
    }
    async fn append_audit(
        &self,
        event: &idem_runtime::audit::AuditEvent,
    ) -> Result<u64, StoreError> {
        self.count();
        self.inner.append_audit(event).await
    }
    async fn audit(
        &self,
        q: &idem_runtime::audit::AuditQuery,
        c: Option<&str>,
        l: usize,
    ) -> Result<idem_runtime::audit::AuditPage, StoreError> {
        self.count();
        self.inner.audit(q, c, l).await
    }
    async fn scan(&self, c: Option<&str>, l: usize) -> Result<ScanPage, StoreError> {
        self.count();
        self.inner.scan(c, l).await
    }
    async fn wait(&self, k: &IdempotencyKey, t: Duration) -> Result<Option<Record>, StoreError> {
        self.count();
        self.inner.wait(k, t).await
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        self.count();
        self.inner.sweep().await
    }
    async fn now(&self) -> Result<Timestamp, StoreError> {
        self.count();
        self.inner.now().await
    }
    async fn close(&self) {
        self.inner.close().await
    }
}

// ---------------------------------------------------------------------------
// Configuration.

/// In the order they are measured. The memory store goes last: its
/// records live in this process, and freeing a million of them (allocated
/// on the runtime's worker threads, freed on another) leaves glibc's
/// arenas full of small free chunks that the next large allocation on a
/// worker consolidates, stalling that worker for hundreds of milliseconds.
/// Measured first, it put such a stall into the next store's figures
/// (SQLite FULL's 10,000-call burst: 1.03 s after the memory store, 68 ms
/// alone, 50 ms after it with `GLIBC_TUNABLES=glibc.malloc.mxfast=0`).
const ALL_STORES: [&str; 5] = [
    "sqlite-full",
    "sqlite-normal",
    "redis",
    "postgres",
    "memory",
];

#[derive(Debug, Clone)]
struct Config {
    stores: Vec<String>,
    sizes: Vec<usize>,
    sweep: usize,
    calls: usize,
    budget: Duration,
    burst: usize,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

impl Config {
    fn from_env() -> Config {
        let list = |name: &str, default: &str| -> Vec<String> {
            std::env::var(name)
                .unwrap_or_else(|_| default.into())
                .split(',')
                .map(|s| s.trim().replace('_', ""))
                .filter(|s| !s.is_empty())
                .collect()
        };
        let stores = list("IDEM_BENCH_STORES", &ALL_STORES.join(","));
        for s in &stores {
            assert!(
                ALL_STORES.contains(&s.as_str()),
                "unknown store {s:?} in IDEM_BENCH_STORES (known: {ALL_STORES:?})"
            );
        }
        let mut sizes: Vec<usize> = list("IDEM_BENCH_SIZES", "10000,100000")
            .iter()
            .map(|s| s.parse().expect("IDEM_BENCH_SIZES: numbers"))
            .collect();
        sizes.sort_unstable();
        Config {
            stores,
            sizes,
            sweep: env_or("IDEM_BENCH_SWEEP", 100_000),
            calls: env_or("IDEM_BENCH_CALLS", 2000usize).max(1),
            budget: Duration::from_secs_f64(env_or("IDEM_BENCH_SECS", 1.0)),
            burst: env_or("IDEM_BENCH_BURST", 10_000),
        }
    }
}

// ---------------------------------------------------------------------------
// Timing.

/// Mean latency of `f(0)`, `f(1)`, … run one after the other, until
/// `calls` calls or `budget` elapsed; returns (mean, calls made).
async fn mean_latency<F, Fut>(calls: usize, budget: Duration, mut f: F) -> (Duration, u64)
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    let started = Instant::now();
    let mut n = 0u64;
    while (n as usize) < calls && (n == 0 || started.elapsed() < budget) {
        f(n).await;
        n += 1;
    }
    (started.elapsed() / n as u32, n)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The naive wrapper's first call and duplicate, measured the same way as
/// the stores, three times: the median of each (one figure of a few µs is
/// easily thrown by other work on the machine).
async fn naive(config: &Config) -> (Duration, Duration) {
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(naive_once(config).await);
    }
    let mut firsts: Vec<Duration> = runs.iter().map(|r| r.0).collect();
    let mut duplicates: Vec<Duration> = runs.iter().map(|r| r.1).collect();
    firsts.sort_unstable();
    duplicates.sort_unstable();
    (firsts[1], duplicates[1])
}

async fn naive_once(config: &Config) -> (Duration, Duration) {
    let naive = Naive::default();
    for i in 0..100 {
        naive.call("warm", i, "send_email", &args()).await;
    }
    let (first, n) = mean_latency(config.calls * 10, config.budget, |i| {
        let naive = &naive;
        async move {
            naive.call("first", i, "send_email", &args()).await;
        }
    })
    .await;
    let (duplicate, _) = mean_latency(config.calls * 10, config.budget, |i| {
        let naive = &naive;
        async move {
            naive.call("first", i % n, "send_email", &args()).await;
        }
    })
    .await;
    (first, duplicate)
}

// ---------------------------------------------------------------------------
// Backends.

/// Where records can be written directly, bypassing idem, to fill a store.
enum Raw {
    Memory,
    Sqlite(std::path::PathBuf),
    Redis(redis::Client),
    Postgres(tokio_postgres::Client),
}

/// A store under test, the probe in front of it and an executor on it.
struct Backend {
    name: &'static str,
    probe: Arc<Probe>,
    exec: Executor,
    raw: Raw,
    // Dropped last: the server or directory the store lives in.
    _home: Box<dyn std::any::Any + Send + Sync>,
}

/// The key of the `i`th pre-populated record. Uniform, like the keys idem
/// derives (SHA-256): the memory store hashes a key by its first 16 hex
/// digits and Redis places it by its first three, so counters would pile
/// the records into a few buckets and slots.
fn filler_key(i: u64) -> String {
    hex::encode(Sha256::digest(format!("filler-{i}")))
}

/// [`filler_key`]'s counterparts: random keys in SQLite (no hash function
/// in SQL; drawn once per row in the series), two MD5s in PostgreSQL, two
/// SHA-1s in Redis.
const SQLITE_KEY: &str = "printf('%016x%016x%016x%016x', random(), random(), random(), random())";
const POSTGRES_KEY: &str = "md5('a' || g) || md5('b' || g)";

/// Copies the record `KEYS[1]` to the filler keys `ARGV[2] ..= ARGV[3]`
/// under prefix `ARGV[1]`, with their slot indexes and expiry, as the
/// claim script lays them out (one server, not a cluster: the keys are
/// computed in the script).
const REDIS_FILL: &str = r"
local t = redis.call('HGETALL', KEYS[1])
local exp = redis.call('HGET', KEYS[1], 'exp')
for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  local key = redis.sha1hex('a' .. i) .. string.sub(redis.sha1hex('b' .. i), 1, 24)
  local slot = string.sub(key, 1, 3)
  local rk = ARGV[1] .. ':{' .. slot .. '}:r:' .. key
  redis.call('HSET', rk, unpack(t))
  if exp then redis.call('PEXPIREAT', rk, exp) end
  redis.call('ZADD', ARGV[1] .. ':{' .. slot .. '}:keys', 0, key)
end
return 0";

impl Backend {
    async fn open(name: &'static str) -> Option<Backend> {
        let (store, raw, home): (Arc<dyn Store>, Raw, Box<dyn std::any::Any + Send + Sync>) =
            match name {
                "memory" => (Arc::new(MemoryStore::new()), Raw::Memory, Box::new(())),
                "sqlite-full" | "sqlite-normal" => {
                    let dir = TempDir::new("idem-bench").expect("temporary directory");
                    let path = dir.path().join("idem.db");
                    let sync = match name {
                        "sqlite-full" => Synchronous::Full,
                        _ => Synchronous::Normal,
                    };
                    let cache = env_or(
                        "IDEM_BENCH_SQLITE_RECORD_CACHE",
                        idem_runtime::store::sqlite::DEFAULT_RECORD_CACHE,
                    );
                    let options = SqliteOptions::default()
                        .synchronous(sync)
                        .record_cache(cache);
                    let store = SqliteStore::open_with(&path, options).await.expect("open");
                    (Arc::new(store), Raw::Sqlite(path), Box::new(dir))
                }
                "redis" => {
                    let Some(server) = RedisServer::start() else {
                        println!("SKIPPED redis: redis-server is not installed");
                        return None;
                    };
                    let store = RedisStore::connect(&server.url()).await.expect("connect");
                    let client = redis::Client::open(server.url()).expect("redis client");
                    (Arc::new(store), Raw::Redis(client), Box::new(server))
                }
                "postgres" => {
                    let Some(server) = PostgresServer::start() else {
                        println!("SKIPPED postgres: PostgreSQL is not installed");
                        return None;
                    };
                    let store = PostgresStore::connect(&server.url())
                        .await
                        .expect("connect");
                    let (client, connection) =
                        tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
                            .await
                            .expect("connect");
                    tokio::spawn(connection);
                    (Arc::new(store), Raw::Postgres(client), Box::new(server))
                }
                other => unreachable!("unknown store {other}"),
            };
        let probe = Arc::new(Probe {
            inner: store,
            ops: AtomicU64::new(0),
            claims: AtomicU64::new(0),
            local: AtomicU64::new(0),
        });
        let exec = Executor::builder_shared(probe.clone()).build();
        Some(Backend {
            name,
            probe,
            exec,
            raw,
            _home: home,
        })
    }

    async fn call(&self, run: &str, step: u64) -> idem::executor::CallOutput<EmailSent> {
        self.exec
            .call(send_email, args())
            .run(run, step)
            .await
            .expect("call")
    }

    fn ops(&self) -> u64 {
        self.probe.ops.load(Ordering::Relaxed)
    }

    /// The server's WAL insert position (PostgreSQL), in bytes.
    async fn wal(&self) -> Option<u64> {
        let Raw::Postgres(client) = &self.raw else {
            return None;
        };
        let row = client
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await
            .expect("wal position");
        let lsn: String = row.get(0);
        let (hi, lo) = lsn.split_once('/').expect("an LSN");
        Some((u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap())
    }

    /// Let the writes of the phase before finish settling: a SQLite WAL is
    /// checkpointed, so that the next figure is not the checkpointer
    /// copying that phase's pages beside it (the machine has two cores).
    async fn settle(&self) {
        if let Raw::Sqlite(path) = &self.raw {
            let path = path.clone();
            tokio::task::spawn_blocking(move || {
                let conn = rusqlite::Connection::open(path).unwrap();
                conn.busy_timeout(Duration::from_secs(60)).unwrap();
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                    .unwrap();
            })
            .await
            .unwrap();
        }
    }

    /// The key of a real call recorded through the executor, kept for
    /// `ttl`: the record every filler record copies.
    async fn template(&self, ttl: Duration) -> IdempotencyKey {
        let exec = Executor::builder_shared(self.probe.inner.clone())
            .ttl(ttl)
            .build();
        let run = format!("template-{}", ttl.as_millis());
        let out = exec.call(send_email, args()).run(run, 0).await.unwrap();
        out.meta.key.expect("a write has a key")
    }

    /// Add the filler records `from .. to` (see [`filler_key`]), copies of
    /// a real record kept for `ttl` (already expired when `ttl` is 1 ms).
    async fn fill(&self, from: u64, to: u64, ttl: Duration) {
        if from >= to {
            return;
        }
        let template = self.template(ttl).await;
        if ttl < Duration::from_millis(100) {
            tokio::time::sleep(ttl + Duration::from_millis(20)).await;
        }
        const BATCH: u64 = 100_000;
        match &self.raw {
            Raw::Memory => {
                let store = &self.probe.inner;
                let f = idem_runtime::key::Fingerprint::new("0".repeat(64));
                let outcome = Outcome::Success {
                    output: idem_runtime::record::OutputJson::from_value(&serde_json::json!({
                        "message_id": "<15@example.com>"
                    })),
                };
                for i in from..to {
                    let key = IdempotencyKey::parse(&filler_key(i)).unwrap();
                    let req = ClaimRequest {
                        key: &key,
                        tool: "send_email",
                        fingerprint: &f,
                        check_fingerprint: true,
                        lease: Duration::from_secs(60),
                        info: idem_runtime::record::CallInfoRef::EMPTY,
                        worker: None,
                    };
                    let ClaimOutcome::Acquired { fence, .. } = store.claim(&req).await.unwrap()
                    else {
                        panic!("filler key {i} taken");
                    };
                    store.complete(&key, fence, &outcome, ttl).await.unwrap();
                }
                if ttl < Duration::from_millis(100) {
                    tokio::time::sleep(ttl + Duration::from_millis(20)).await;
                }
            }
            Raw::Sqlite(path) => {
                let path = path.clone();
                let template = template.as_str().to_owned();
                tokio::task::spawn_blocking(move || {
                    let conn = rusqlite::Connection::open(path).unwrap();
                    conn.busy_timeout(Duration::from_secs(60)).unwrap();
                    let sql = format!(
                        "WITH RECURSIVE s(i, k) AS (
                             SELECT ?1, {SQLITE_KEY}
                             UNION ALL SELECT i + 1, {SQLITE_KEY} FROM s WHERE i + 1 < ?2
                         )
                         INSERT INTO idem_records (key, expires_at, record)
                         SELECT k, t.expires_at,
                                CAST(replace(CAST(t.record AS TEXT), t.key, k) AS BLOB)
                         FROM s, idem_records AS t WHERE t.key = ?3"
                    );
                    let mut start = from;
                    while start < to {
                        let end = (start + BATCH).min(to);
                        let n = conn
                            .execute(&sql, rusqlite::params![start as i64, end as i64, template])
                            .unwrap();
                        assert_eq!(n as u64, end - start);
                        start = end;
                    }
                })
                .await
                .unwrap();
            }
            Raw::Redis(client) => {
                let mut conn = client.get_multiplexed_async_connection().await.unwrap();
                let template = format!("idem:{{{}}}:r:{}", &template.as_str()[..3], template);
                let script = redis::Script::new(REDIS_FILL);
                let mut start = from;
                while start < to {
                    // A script blocks the server: keep each one short.
                    let end = (start + BATCH / 50).min(to);
                    let _: i64 = script
                        .key(&template)
                        .arg("idem")
                        .arg(start)
                        .arg(end - 1)
                        .invoke_async(&mut conn)
                        .await
                        .unwrap();
                    start = end;
                }
            }
            Raw::Postgres(client) => {
                let columns = "tool, fingerprint, created_at, fence, prev_fence, state, \
                    lease_until, outcome, completed_at, expires_at, steps, requested_at, \
                    message, namespace, call_id, run_id, step, args, worker, audit";
                let sql = format!(
                    "INSERT INTO idem_records (key, {columns})
                     SELECT {POSTGRES_KEY}, {columns}
                     FROM idem_records AS t, generate_series($1::bigint, $2::bigint) AS g
                     WHERE t.key = $3"
                );
                let mut start = from;
                while start < to {
                    let end = (start + BATCH).min(to);
                    let n = client
                        .execute(
                            &sql,
                            &[&(start as i64), &(end as i64 - 1), &template.as_str()],
                        )
                        .await
                        .unwrap();
                    assert_eq!(n, end - start);
                    start = end;
                }
                client.batch_execute("ANALYZE idem_records").await.unwrap();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Measurements.

#[derive(Debug, Default, Clone, Copy)]
struct PerCall {
    latency: Duration,
    ops: f64,
    wal: Option<f64>,
}

#[derive(Debug, Default)]
struct Report {
    store: &'static str,
    first: PerCall,
    duplicate: PerCall,
    fsyncs: Option<(f64, f64)>,
    burst: Option<(Duration, u64, u64, u64)>,
    workers: Vec<(usize, f64)>,
    sizes: Vec<(usize, Duration, Duration)>,
    sweep: Option<Sweep>,
}

#[derive(Debug, Clone, Copy)]
struct Sweep {
    records: u64,
    deleted: u64,
    took: Duration,
    calls: u64,
    median: Duration,
    p99: Duration,
    worst: Duration,
    baseline_median: Duration,
    baseline_worst: Duration,
}

/// First calls (distinct keys) then duplicates of them; per call: mean
/// latency, store operations, WAL bytes.
async fn first_and_duplicate(b: &Backend, config: &Config, run: &str) -> (PerCall, PerCall) {
    b.settle().await;
    let (ops0, wal0) = (b.ops(), b.wal().await);
    let (first, n) = mean_latency(config.calls, config.budget, |i| async move {
        b.call(run, i).await;
    })
    .await;
    b.settle().await;
    let (ops1, wal1) = (b.ops(), b.wal().await);
    let (duplicate, m) = mean_latency(config.calls, config.budget, |i| async move {
        let out = b.call(run, i % n).await;
        debug_assert!(out.meta.deduplicated);
    })
    .await;
    let (ops2, wal2) = (b.ops(), b.wal().await);
    let per =
        |a: Option<u64>, z: Option<u64>, calls: u64| Some((z? as f64 - a? as f64) / calls as f64);
    (
        PerCall {
            latency: first,
            ops: (ops1 - ops0) as f64 / n as f64,
            wal: per(wal0, wal1, n),
        },
        PerCall {
            latency: duplicate,
            ops: (ops2 - ops1) as f64 / m as f64,
            wal: per(wal1, wal2, m),
        },
    )
}

/// `config.burst` concurrent calls of one new key: wall time, claims sent
/// to the store, claims it answered on the caller's thread, and how many
/// callers got a recorded (deduplicated) answer.
async fn burst(b: &Backend, config: &Config) -> (Duration, u64, u64, u64) {
    let claims = b.probe.claims.load(Ordering::Relaxed);
    let local = b.probe.local.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..config.burst {
        let exec = b.exec.clone();
        calls.spawn(async move {
            let out = exec
                .call(send_email, args())
                .run("burst", 0)
                .await
                .expect("call");
            u64::from(out.meta.deduplicated)
        });
    }
    let deduplicated = calls.join_all().await.into_iter().sum();
    let took = started.elapsed();
    let claims = b.probe.claims.load(Ordering::Relaxed) - claims;
    let local = b.probe.local.load(Ordering::Relaxed) - local;
    (took, claims, local, deduplicated)
}

/// Calls per second with `workers` tasks, each making first calls on its
/// own keys one after the other.
async fn throughput(b: &Arc<Backend>, workers: usize, budget: Duration) -> f64 {
    let deadline = Instant::now() + budget;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..workers {
        let b = b.clone();
        tasks.spawn(async move {
            let run = format!("workers-{workers}-{w}");
            let mut n = 0u64;
            while Instant::now() < deadline {
                b.call(&run, n).await;
                n += 1;
            }
            n
        });
    }
    let calls: u64 = tasks.join_all().await.into_iter().sum();
    calls as f64 / started.elapsed().as_secs_f64()
}

/// The latencies of a caller making first calls one after the other,
/// until `stop` is set, sorted.
async fn caller(b: Arc<Backend>, run: String, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let mut latencies = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        b.call(&run, latencies.len() as u64).await;
        latencies.push(started.elapsed());
    }
    latencies.sort_unstable();
    latencies
}

/// The `q` quantile of sorted `latencies`.
fn quantile(latencies: &[Duration], q: f64) -> Duration {
    match latencies.len() {
        0 => Duration::ZERO,
        n => latencies[((n - 1) as f64 * q).round() as usize],
    }
}

/// Fill the store with `records` expired records and sweep them while a
/// caller keeps calling; its worst latency then and without a sweep.
async fn sweep_stall(b: &Arc<Backend>, records: u64, budget: Duration) -> Sweep {
    const BASE: u64 = 1 << 40;
    b.fill(BASE, BASE + records, Duration::from_millis(1)).await;

    let stop = Arc::new(AtomicBool::new(false));
    let alone = tokio::spawn(caller(b.clone(), "sweep-baseline".into(), stop.clone()));
    tokio::time::sleep(budget).await;
    stop.store(true, Ordering::Relaxed);
    let baseline = alone.await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let during = tokio::spawn(caller(b.clone(), "sweep-caller".into(), stop.clone()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let deleted = b.probe.sweep().await.expect("sweep");
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let during = during.await.unwrap();
    Sweep {
        records,
        deleted,
        took,
        calls: during.len() as u64,
        median: quantile(&during, 0.5),
        p99: quantile(&during, 0.99),
        worst: quantile(&during, 1.0),
        baseline_median: quantile(&baseline, 0.5),
        baseline_worst: quantile(&baseline, 1.0),
    }
}

/// First call and duplicate with `size` records present, for each size.
async fn growth(b: &Backend, config: &Config) -> Vec<(usize, Duration, Duration)> {
    let mut present = 0;
    let mut rows = Vec::new();
    for &size in &config.sizes {
        let started = Instant::now();
        b.fill(present as u64, size as u64, Duration::from_secs(86_400))
            .await;
        eprintln!(
            "  {}: {} records added in {:.1} s",
            b.name,
            size - present,
            started.elapsed().as_secs_f64()
        );
        present = size;
        let calls = config.calls.min(1000);
        let config = Config {
            calls,
            ..config.clone()
        };
        let (first, duplicate) = first_and_duplicate(b, &config, &format!("size-{size}")).await;
        rows.push((size, first.latency, duplicate.latency));
    }
    rows
}

async fn measure(name: &'static str, config: &Config) -> Option<Report> {
    let b = Arc::new(Backend::open(name).await?);
    eprintln!("== {name}");
    // Warm up: connections, prepared statements, the SQLite reader pool.
    for i in 0..50 {
        b.call("warm", i).await;
        b.call("warm", i).await;
    }
    let (first, duplicate) = first_and_duplicate(&b, config, "first").await;
    eprintln!(
        "  first {:.1} µs, duplicate {:.1} µs",
        micros(first.latency),
        micros(duplicate.latency)
    );
    let mut report = Report {
        store: name,
        first,
        duplicate,
        ..Report::default()
    };
    if config.burst > 0 {
        let burst = burst(&b, config).await;
        eprintln!(
            "  burst {:?}, {} claims sent, {} answered locally",
            burst.0, burst.1, burst.2
        );
        report.burst = Some(burst);
    }
    for workers in [1, 4, 16, 64] {
        let rate = throughput(&b, workers, config.budget).await;
        eprintln!("  {workers} workers: {rate:.0} calls/s");
        report.workers.push((workers, rate));
    }
    if config.sweep > 0 && name != "redis" {
        let sweep = sweep_stall(&b, config.sweep as u64, config.budget).await;
        eprintln!("  {sweep:?}");
        report.sweep = Some(sweep);
    }
    report.sizes = growth(&b, config).await;
    if let Raw::Sqlite(_) = b.raw {
        report.fsyncs = fsyncs(name == "sqlite-normal");
    }
    b.probe.close().await;
    Some(report)
}

// ---------------------------------------------------------------------------
// fsyncs, counted by running this binary under `strace -c`.

const FSYNC_CHILD: &str = "IDEM_BENCH_FSYNC_CHILD";
const FSYNC_CALLS: u64 = 200;

/// In a child: open `PATH`, make `FIRST` first calls then as many
/// duplicates as `DUPS`, close.
fn fsync_child(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    let [path, sync, first, dups] = parts[..] else {
        panic!("malformed {FSYNC_CHILD}: {spec}");
    };
    let sync = match sync {
        "normal" => Synchronous::Normal,
        _ => Synchronous::Full,
    };
    let (first, dups): (u64, u64) = (first.parse().unwrap(), dups.parse().unwrap());
    let rt = runtime();
    rt.block_on(async {
        let options = SqliteOptions::default().synchronous(sync);
        let store = Arc::new(SqliteStore::open_with(path, options).await.unwrap());
        let exec = Executor::builder_shared(store.clone()).build();
        for i in 0..first {
            exec.call(send_email, args()).run("f", i).await.unwrap();
        }
        for i in 0..dups {
            exec.call(send_email, args())
                .run("f", i % first.max(1))
                .await
                .unwrap();
        }
        store.close().await;
    });
}

/// fsync + fdatasync calls of one child run, or `None` without `strace`.
fn count_fsyncs(dir: &TempDir, tag: &str, normal: bool, first: u64, dups: u64) -> Option<u64> {
    let db = dir.path().join(format!("{tag}.db"));
    let out = dir.path().join(format!("{tag}.strace"));
    let sync = if normal { "normal" } else { "full" };
    let status = std::process::Command::new("strace")
        .args(["-f", "-c", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&out)
        .arg(std::env::current_exe().ok()?)
        .env(
            FSYNC_CHILD,
            format!("{} {sync} {first} {dups}", db.display()),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    if !status.success() {
        return None;
    }
    let text = std::fs::read_to_string(out).ok()?;
    Some(
        text.lines()
            .filter_map(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                match cols.last() {
                    Some(&("fsync" | "fdatasync")) => cols.get(3)?.parse::<u64>().ok(),
                    _ => None,
                }
            })
            .sum(),
    )
}

/// fsyncs per first call and per duplicate, net of opening and closing.
fn fsyncs(normal: bool) -> Option<(f64, f64)> {
    let dir = TempDir::new("idem-bench-fsync").ok()?;
    let open = count_fsyncs(&dir, "open", normal, 0, 0)?;
    let first = count_fsyncs(&dir, "first", normal, FSYNC_CALLS, 0)?;
    let both = count_fsyncs(&dir, "both", normal, FSYNC_CALLS, FSYNC_CALLS)?;
    let n = FSYNC_CALLS as f64;
    Some((
        (first as f64 - open as f64) / n,
        (both as f64 - first as f64) / n,
    ))
}

// ---------------------------------------------------------------------------
// Report.

fn ratio(d: Duration, naive: Duration) -> String {
    format!("{:.1}×", d.as_secs_f64() / naive.as_secs_f64())
}

fn print_tables(config: &Config, naive: (Duration, Duration), reports: &[Report]) {
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

    if config.sweep > 0 {
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
    println!("{s}");
}

/// The runtime every part of the bench runs on: two workers, as the
/// machine has two cores.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn main() {
    if let Ok(spec) = std::env::var(FSYNC_CHILD) {
        fsync_child(&spec);
        return;
    }
    let config = Config::from_env();
    eprintln!("{config:?}");
    let rt = runtime();
    rt.block_on(async {
        let naive = naive(&config).await;
        eprintln!(
            "naive: first {:.2} µs, duplicate {:.2} µs",
            micros(naive.0),
            micros(naive.1)
        );
        let mut reports = Vec::new();
        for name in ALL_STORES {
            if config.stores.iter().any(|s| s == name) {
                if let Some(report) = measure(name, &config).await {
                    reports.push(report);
                    // So far, in case a later store fails.
                    eprintln!("{name} done");
                    print_tables(&config, naive, &reports);
                }
            }
        }
    });
}
