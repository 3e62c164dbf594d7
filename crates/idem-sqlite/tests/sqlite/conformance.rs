//! The SQLite store against the public conformance suite, on a manual clock
//! in a fresh file per case.

use std::sync::Arc;
use std::time::Duration;

use idem_conformance::Harness;
use idem_runtime::clock::ManualClock;
use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_testkit::TempDir;

struct SqliteHarness {
    store: Arc<SqliteStore>,
    clock: ManualClock,
    dir: TempDir,
}

impl Harness for SqliteHarness {
    type Store = SqliteStore;
    fn store(&self) -> Arc<SqliteStore> {
        self.store.clone()
    }
    async fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }
    async fn reopen(&self) -> Option<Arc<SqliteStore>> {
        Some(Arc::new(open(&self.dir, &self.clock).await))
    }
}

async fn open(dir: &TempDir, clock: &ManualClock) -> SqliteStore {
    let options = SqliteOptions::default().clock(Arc::new(clock.clone()));
    SqliteStore::open_with(dir.path().join("idem.db"), options)
        .await
        .unwrap()
}

async fn harness() -> Option<SqliteHarness> {
    let dir = TempDir::new("idem-sqlite-conformance").unwrap();
    let clock = ManualClock::new(1_700_000_000_000);
    let store = open(&dir, &clock).await;
    Some(SqliteHarness {
        store: Arc::new(store),
        clock,
        dir,
    })
}

idem_conformance::store_conformance_tests!(harness);
