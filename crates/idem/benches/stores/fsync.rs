//! fsyncs, counted by running this binary under `strace -c`.

use std::sync::Arc;

use idem_sqlite::{SqliteOptions, SqliteStore, Synchronous};
use idem_testkit::TempDir;

use crate::class::Class;
use crate::runtime;
use idem_runtime::store::StoreExt;

pub const FSYNC_CHILD: &str = "IDEM_BENCH_FSYNC_CHILD";
pub const FSYNC_CALLS: u64 = 200;

/// In a child: open `PATH`, make `FIRST` first calls then as many
/// duplicates as `DUPS` of `CLASS` (see [`Class::tag`]), close.
pub fn fsync_child(spec: &str) {
    let parts: Vec<&str> = spec.split(' ').collect();
    let [path, sync, first, dups, class] = parts[..] else {
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
        let class = Class::from_tag(class);
        let exec = class.executor(store.clone());
        for i in 0..first {
            class.call(&exec, "f", i).await;
        }
        for i in 0..dups {
            class.call(&exec, "f", i % first.max(1)).await;
        }
        store.close().await;
    });
}

/// fsync + fdatasync calls of one child run, or `None` without `strace`.
pub fn count_fsyncs(
    dir: &TempDir,
    tag: &str,
    normal: bool,
    first: u64,
    dups: u64,
    class: Class,
) -> Option<u64> {
    let db = dir.path().join(format!("{tag}.db"));
    let out = dir.path().join(format!("{tag}.strace"));
    let sync = if normal { "normal" } else { "full" };
    let status = std::process::Command::new("strace")
        .args(["-f", "-c", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&out)
        .arg(std::env::current_exe().ok()?)
        .env(
            FSYNC_CHILD,
            format!("{} {sync} {first} {dups} {}", db.display(), class.tag()),
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
pub fn fsyncs(normal: bool) -> Option<(f64, f64)> {
    let dir = TempDir::new("idem-bench-fsync").ok()?;
    let class = Class::Idempotent;
    let open = count_fsyncs(&dir, "open", normal, 0, 0, class)?;
    let first = count_fsyncs(&dir, "first", normal, FSYNC_CALLS, 0, class)?;
    let both = count_fsyncs(&dir, "both", normal, FSYNC_CALLS, FSYNC_CALLS, class)?;
    let n = FSYNC_CALLS as f64;
    Some((
        (first as f64 - open as f64) / n,
        (both as f64 - first as f64) / n,
    ))
}

/// fsyncs per first call of `class`, net of opening and closing.
pub fn class_fsyncs(normal: bool, class: Class) -> Option<f64> {
    let dir = TempDir::new("idem-bench-fsync").ok()?;
    let open = count_fsyncs(&dir, "open", normal, 0, 0, class)?;
    let first = count_fsyncs(&dir, "first", normal, FSYNC_CALLS, 0, class)?;
    Some((first as f64 - open as f64) / FSYNC_CALLS as f64)
}
