//! Support for tests that need real servers or scratch files (feature
//! `test-servers`): temporary directories, and `redis-server` / PostgreSQL
//! processes started on free loopback ports and stopped afterwards.
//!
//! Nothing here is mocked: these are the real server binaries from the
//! distribution's packages. When a binary is missing the `start` functions
//! return `None`, and tests skip loudly ([`skip`],
//! [`conformance::skip`](crate::conformance::skip)), or fail when
//! `IDEM_REQUIRE_SERVERS=1`.

use std::path::{Path, PathBuf};

mod servers;

pub use servers::{PostgresServer, RedisServer};

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
/// `SKIPPED` line, or a panic under `IDEM_REQUIRE_SERVERS=1`.
pub fn skip(what: &str, server: &str) {
    assert!(
        !crate::conformance::servers_required(),
        "IDEM_REQUIRE_SERVERS=1 but {server} is not available for `{what}`"
    );
    eprintln!("SKIPPED `{what}`: {server} is not installed (set IDEM_REQUIRE_SERVERS=1 to make this a failure)");
}
