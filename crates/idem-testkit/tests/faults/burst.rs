//! A burst of duplicates in one process, on the in-memory store and on a
//! SQLite file: the executor's in-process flight gathers them, so one
//! claim reaches the store (the executor's tests' world, tools and probe:
//! `executor_support`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::executor_support::{probed_shared, send, App, Renewals};
use idem_runtime::store::{MemoryStore, Store};
use idem_runtime::Executor;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_duplicates_in_one_process_cost_one_claim() {
    let file = std::env::temp_dir().join(format!("idem-burst-{}.db", std::process::id()));
    let stores: Vec<Arc<dyn Store>> = vec![
        Arc::new(MemoryStore::new()),
        Arc::new(idem_sqlite::SqliteStore::open(&file).await.unwrap()),
    ];
    for inner in stores {
        let store = Arc::new(probed_shared(inner, Renewals::Renew));
        let world = App::default();
        // The call takes long enough for the whole burst to arrive (in a
        // debug build, 10,000 key derivations take about a second).
        *world.delay.lock().unwrap() = Some(Duration::from_secs(3));
        let exec = Executor::builder_shared(store.clone())
            .state(world.clone())
            .build();
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..10_000 {
            let exec = exec.clone();
            calls.spawn(async move { send(&exec, "ada", "storm").await });
        }
        let mut outputs = std::collections::BTreeSet::new();
        let mut deduplicated = 0;
        while let Some(done) = calls.join_next().await {
            let sent = done.unwrap().unwrap();
            deduplicated += usize::from(sent.meta.deduplicated);
            outputs.insert(sent.output.id);
        }
        let what = store.describe();
        assert_eq!(world.calls(), 1, "{what}: the tool ran once");
        assert_eq!(deduplicated, 9_999, "{what}");
        assert_eq!(outputs.len(), 1, "{what}: every caller got the same output");
        assert_eq!(
            store.hook().claims.load(Ordering::SeqCst),
            1,
            "{what}: one claim reached the store"
        );
    }
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
}
