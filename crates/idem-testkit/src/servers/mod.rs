//! Support for tests that need real servers or scratch files: temporary
//! directories, and `redis-server` / PostgreSQL processes started on free
//! loopback ports and stopped afterwards.
//!
//! Nothing here is mocked: these are the real server binaries from the
//! distribution's packages. When a binary is missing the `start` functions
//! return `None`, and tests skip loudly ([`skip`],
//! [`conformance::skip`](idem_conformance::skip)), or fail when
//! `IDEM_REQUIRE_SERVERS=1`.

use std::path::{Path, PathBuf};

mod certs;
mod daemons;
mod postgres;
mod watchdog;

pub use certs::{CertifiedKeyFiles, TestCertificates};
pub use daemons::{RedisCluster, RedisServer};
pub use postgres::PostgresServer;
pub use watchdog::Watchdog;

/// A directory under the system's temporary directory, deleted with
/// everything in it when dropped.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Create a fresh directory whose name starts with `prefix`.
    pub fn new(prefix: &str) -> std::io::Result<TempDir> {
        let bytes: [u8; 8] = rand::random();
        let path = std::env::temp_dir().join(format!("{prefix}-{}", hex::encode(bytes)));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Report that `what` cannot run because `server` is missing: a loud
/// `SKIPPED` line, or a panic when
/// [`servers_required`](idem_conformance::servers_required)
/// (`IDEM_REQUIRE_SERVERS=1`), the one rule that the public conformance
/// suite's [`conformance::skip`](idem_conformance::skip) of a
/// case follows too.
pub fn skip(what: &str, server: &str) {
    assert!(
        !idem_conformance::servers_required(),
        "IDEM_REQUIRE_SERVERS=1 but {server} is not available for `{what}`"
    );
    eprintln!("SKIPPED `{what}`: {server} is not installed (set IDEM_REQUIRE_SERVERS=1 to make this a failure)");
}

/// The workspace's root directory (where `target/` and `.ci/` are), for
/// the tools `.ci/run` installs there and the transcripts tests keep.
pub fn workspace_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// A Python that can `import mcp` (the official Python MCP SDK, the
/// client of the MCP tests): `IDEM_PYTHON`, else the virtual environment
/// `.ci/run` makes in `target/python-mcp` under the [workspace
/// root](workspace_root). `None` when neither has the SDK.
pub fn python_mcp() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("IDEM_PYTHON").map(PathBuf::from),
        Some(workspace_root().join("target/python-mcp/bin/python")),
    ];
    candidates.into_iter().flatten().find(|python| {
        std::process::Command::new(python)
            .args(["-c", "import mcp"])
            .output()
            .is_ok_and(|out| out.status.success())
    })
}

/// Run the Python MCP client script `script` with `python` (one
/// [`python_mcp`] found) and the environment `envs`, as the tests that
/// drive idem with the official SDK do: its transcript (standard output) is
/// kept in `target/tmp/KEEP_AS` under the [workspace root](workspace_root)
/// for reading, printed, and
/// returned. Panics, with the transcript and standard error, unless the
/// script succeeded and said "all cases passed".
pub fn run_python_clients(
    python: &Path,
    script: &Path,
    envs: &[(&str, &std::ffi::OsStr)],
    keep_as: &str,
) -> String {
    let output = std::process::Command::new(python)
        .arg(script)
        .envs(envs.iter().copied())
        .output()
        .expect("python runs");
    let transcript = String::from_utf8_lossy(&output.stdout).into_owned();
    let dir = workspace_root().join("target/tmp");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(dir.join(keep_as), transcript.as_bytes());
    println!("{transcript}");
    assert!(
        output.status.success(),
        "the Python client's cases failed:\n{transcript}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(transcript.contains("all cases passed"), "{transcript}");
    transcript
}

/// The conformance harness of a store that runs on its server's clock
/// (Redis, PostgreSQL): time passes by sleeping, so the cases use 200 ms
/// ticks.
pub struct ServerClockHarness<S> {
    store: std::sync::Arc<S>,
    expires_natively: bool,
    reopen: Option<Reopen<S>>,
    audit_retention: std::time::Duration,
}

/// Connects a second store to the same server.
type Reopen<S> =
    Box<dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = S> + Send>> + Send + Sync>;

impl<S> std::fmt::Debug for ServerClockHarness<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerClockHarness")
            .field("expires_natively", &self.expires_natively)
            .field("reopens", &self.reopen.is_some())
            .finish_non_exhaustive()
    }
}

impl<S: idem_runtime::store::Store> ServerClockHarness<S> {
    /// A harness for `store`.
    pub fn new(store: S) -> Self {
        ServerClockHarness {
            store: std::sync::Arc::new(store),
            expires_natively: false,
            reopen: None,
            audit_retention: idem_runtime::audit::DEFAULT_AUDIT_RETENTION,
        }
    }

    /// Declare the audit retention the store was opened with (see
    /// [`Harness::audit_retention`](idem_conformance::Harness::audit_retention)).
    pub fn with_audit_retention(mut self, retention: std::time::Duration) -> Self {
        self.audit_retention = retention;
        self
    }

    /// Declare that the backend deletes expired records by itself (see
    /// [`Harness::expires_natively`](idem_conformance::Harness::expires_natively)).
    pub fn expiring_natively(mut self) -> Self {
        self.expires_natively = true;
        self
    }

    /// How to connect a new store to the same server (see
    /// [`Harness::reopen`](idem_conformance::Harness::reopen)).
    pub fn reopening<F, Fut>(mut self, connect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = S> + Send + 'static,
    {
        self.reopen = Some(Box::new(move || Box::pin(connect())));
        self
    }
}

impl<S: idem_runtime::store::Store> idem_conformance::Harness for ServerClockHarness<S> {
    type Store = S;

    fn store(&self) -> std::sync::Arc<S> {
        self.store.clone()
    }

    async fn advance(&self, by: std::time::Duration) {
        tokio::time::sleep(by).await;
    }

    fn tick(&self) -> std::time::Duration {
        std::time::Duration::from_millis(200)
    }

    fn expires_natively(&self) -> bool {
        self.expires_natively
    }

    fn audit_retention(&self) -> std::time::Duration {
        self.audit_retention
    }

    async fn reopen(&self) -> Option<std::sync::Arc<S>> {
        match &self.reopen {
            Some(connect) => Some(std::sync::Arc::new(connect().await)),
            None => None,
        }
    }
}
