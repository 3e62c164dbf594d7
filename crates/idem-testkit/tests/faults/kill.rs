//! Worker processes killed with SIGKILL in the middle of calls, then
//! restarted, on every durable store: the simulated providers' ledger,
//! which no kill can touch, shows no duplicate effect, no re-run of a
//! started irreversible call, no lost result, no call refused whose effect
//! applied, and every unknown outcome surfaced as `outcome_unknown` (the
//! scenario, its world and its checks: `idem_testkit::process`, shared with the
//! fault simulation).
//!
//! Each test prints its counts on a `KILL-TEST` line (`--nocapture`).

use idem_runtime::store::StoreExt;
use idem_testkit::process::{kill_workers_mid_call, run_worker};
use idem_testkit::TempDir;

/// The name of the entry point below, which the workers run.
const ENTRY: &str = "kill::kill_worker";

/// The entry point of the worker processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child process"]
async fn kill_worker() {
    run_worker().await;
}

/// The scenario on the store at `url`, with the ledger in a temporary
/// directory of its own.
async fn kill_on(store: &str, url: &str) {
    let dir = TempDir::new("idem-kill").expect("a temporary directory");
    kill_workers_mid_call(store, ENTRY, url, dir.path()).await;
}

/// Workers share one SQLite file in a temporary directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_workers_killed_mid_call_leave_no_duplicate_and_no_lost_effect() {
    let dir = TempDir::new("idem-kill-sqlite").unwrap();
    let path = dir.path().join("idem.db");
    // Create the file first so the workers race on claims, not on setup.
    idem_sqlite::SqliteStore::open(&path)
        .await
        .unwrap()
        .close()
        .await;
    let url = format!("sqlite://{}", path.display());
    kill_on("sqlite", &url).await;
}

/// Run the scenario on a server of its own that `start` brings up, or skip
/// loudly when its binaries are missing (a failure under
/// `IDEM_REQUIRE_SERVERS=1`).
async fn on_server<S: Send + 'static>(
    store: &str,
    server: &str,
    start: fn() -> Option<S>,
    url: fn(&S) -> String,
) {
    let Some(running) = tokio::task::spawn_blocking(start).await.unwrap() else {
        let test = format!("{store} workers killed mid-call");
        return idem_testkit::skip(&test, server);
    };
    kill_on(store, &url(&running)).await;
}

/// Workers share one `redis-server` of the test's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_workers_killed_mid_call_leave_no_duplicate_and_no_lost_effect() {
    use idem_testkit::RedisServer;

    on_server(
        "redis",
        "redis-server",
        RedisServer::start,
        RedisServer::url,
    )
    .await;
}

/// Workers share one PostgreSQL server of the test's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_workers_killed_mid_call_leave_no_duplicate_and_no_lost_effect() {
    use idem_testkit::PostgresServer;

    on_server(
        "postgres",
        "PostgreSQL",
        PostgresServer::start,
        PostgresServer::url,
    )
    .await;
}
