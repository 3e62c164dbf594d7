//! Configuration: which stores, and the knobs (environment variables).

use std::time::Duration;

/// In the order they are measured. The memory store goes last: its
/// records live in this process, and freeing a million of them (allocated
/// on the runtime's worker threads, freed on another) leaves glibc's
/// arenas full of small free chunks that the next large allocation on a
/// worker consolidates, stalling that worker for hundreds of milliseconds.
/// Measured first, it put such a stall into the next store's figures
/// (SQLite FULL's 10,000-call burst: 1.03 s after the memory store, 68 ms
/// alone, 50 ms after it with `GLIBC_TUNABLES=glibc.malloc.mxfast=0`).
///
/// `redis-tls` and `postgres-tls` are the same servers' settings over TLS
/// (`rediss://` with the bench's own CA, `sslmode=verify-full`), for the
/// cost of TLS against `redis` and `postgres` in the same run.
pub const ALL_STORES: [&str; 7] = [
    "sqlite-full",
    "sqlite-normal",
    "redis",
    "redis-tls",
    "postgres",
    "postgres-tls",
    "memory",
];

#[derive(Debug, Clone)]
pub struct Config {
    pub stores: Vec<String>,
    pub sizes: Vec<usize>,
    pub sweep: usize,
    pub calls: usize,
    pub budget: Duration,
    pub burst: usize,
    /// The stores measured by class (`IDEM_BENCH_CLASSES`).
    pub class_stores: Vec<String>,
    /// The stores whose inbox is measured at scale (`IDEM_BENCH_INBOX`).
    pub inbox_stores: Vec<String>,
}

pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
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
    pub fn from_env() -> Config {
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
        let class_stores = list("IDEM_BENCH_CLASSES", "sqlite-full,sqlite-normal,postgres");
        for s in &class_stores {
            assert!(
                ALL_STORES.contains(&s.as_str()),
                "unknown store {s:?} in IDEM_BENCH_CLASSES (known: {ALL_STORES:?})"
            );
        }
        let inbox_stores = list("IDEM_BENCH_INBOX", "");
        for s in &inbox_stores {
            assert!(
                ALL_STORES.contains(&s.as_str()),
                "unknown store {s:?} in IDEM_BENCH_INBOX (known: {ALL_STORES:?})"
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
            class_stores,
            inbox_stores,
        }
    }
}
