//! Timing: the mean latency of calls made one after the other, and the
//! naive wrapper's, measured the same way; a caller's latencies while
//! something else runs, and their quantiles.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::Backend;
use crate::common::{args, Naive};
use crate::config::Config;

/// Mean latency of `f(0)`, `f(1)`, … run one after the other, until
/// `calls` calls or `budget` elapsed; returns (mean, calls made).
pub async fn mean_latency<F, Fut>(calls: usize, budget: Duration, mut f: F) -> (Duration, u64)
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

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The naive wrapper's first call and duplicate, measured the same way as
/// the stores, three times: the median of each (one figure of a few µs is
/// easily thrown by other work on the machine).
pub async fn naive(config: &Config) -> (Duration, Duration) {
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

pub async fn naive_once(config: &Config) -> (Duration, Duration) {
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

/// The latencies of a caller making first calls one after the other,
/// until `stop` is set, sorted.
pub async fn caller(b: Arc<Backend>, run: String, stop: Arc<AtomicBool>) -> Vec<Duration> {
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
pub fn quantile(latencies: &[Duration], q: f64) -> Duration {
    match latencies.len() {
        0 => Duration::ZERO,
        n => latencies[((n - 1) as f64 * q).round() as usize],
    }
}
