//! The stores a test runs on, one function per backend, each giving a
//! [`TestStore`]: a fresh memory store or SQLite file for every test, or
//! the shared server of the test binary (Redis, a Redis Cluster,
//! PostgreSQL), which the kit starts at its first use and the binary's
//! tests share (their keys are random and their namespaces their own).
//! [`on_every_store!`](crate::on_every_store) calls these functions by the
//! names it is given.
//!
//! A server function returns `None` after a loud [`skip`] of the test when
//! the server's binaries are missing (a failure under
//! `IDEM_REQUIRE_SERVERS=1`).

use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use idem_runtime::clock::ManualClock;
use idem_runtime::store::MemoryStore;
use idem_runtime::Store;

use crate::servers::{skip, PostgresServer, RedisCluster, RedisServer, TempDir};

/// The instant the manual clocks of the memory and SQLite stores start at.
const START_MILLIS: u64 = 1_800_000_000_000;

/// One store for one test: which backend, how to reach it, and, for the
/// stores that read one, its manual clock. Keeps the store's temporary
/// directory while it lives.
#[derive(Debug)]
pub struct TestStore {
    name: &'static str,
    url: Option<String>,
    clock: Option<ManualClock>,
    memory: Option<Arc<MemoryStore>>,
    /// The SQLite file, which `open` opens on the manual clock.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    sqlite: Option<PathBuf>,
    _dir: Option<TempDir>,
}

impl TestStore {
    fn server(name: &'static str, url: String) -> TestStore {
        TestStore {
            name,
            url: Some(url),
            clock: None,
            memory: None,
            sqlite: None,
            _dir: None,
        }
    }

    /// The backend's name, as [`on_every_store!`](crate::on_every_store)
    /// names its module: `memory`, `sqlite`, `redis`, `redis_cluster` or
    /// `postgres`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The store's URL (`sqlite://…`, `redis://…`, `redis+cluster://…`,
    /// `postgres://…`), for [`connect`] or for a
    /// program under test. Whoever opens it reads the system clock, or the
    /// server's.
    ///
    /// # Panics
    ///
    /// On the memory store, which has no URL.
    pub fn url(&self) -> &str {
        self.url
            .as_deref()
            .expect("the memory store has no URL; list only durable stores")
    }

    /// The manual clock that the store [`open`](TestStore::open) gives
    /// reads: `Some` on memory and SQLite (starting at the same instant for
    /// every test), `None` on a server, which keeps its own time.
    pub fn clock(&self) -> Option<&ManualClock> {
        self.clock.as_ref()
    }

    /// The store: on memory the same store each time; on SQLite a new
    /// handle on the test's file, reading [`clock`](TestStore::clock); on a
    /// server a new connection.
    ///
    /// # Panics
    ///
    /// When the store cannot be opened (or this build of idem-runtime
    /// cannot serve it).
    pub async fn open(&self) -> Arc<dyn Store> {
        if let Some(memory) = &self.memory {
            return memory.clone();
        }
        #[cfg(feature = "sqlite")]
        if let (Some(path), Some(clock)) = (&self.sqlite, &self.clock) {
            let options = idem_sqlite::SqliteOptions::default().clock(Arc::new(clock.clone()));
            return Arc::new(
                idem_sqlite::SqliteStore::open_with(path, options)
                    .await
                    .expect("open the test's SQLite store"),
            );
        }
        crate::stores::connect(self.url())
            .await
            .unwrap_or_else(|e| panic!("connect to the test's {} store: {e}", self.name))
    }
}

/// A fresh memory store on a manual clock.
pub async fn memory(_test: &str) -> Option<TestStore> {
    let clock = ManualClock::new(START_MILLIS);
    Some(TestStore {
        name: "memory",
        url: None,
        memory: Some(Arc::new(MemoryStore::with_clock(Arc::new(clock.clone())))),
        clock: Some(clock),
        sqlite: None,
        _dir: None,
    })
}

/// A fresh SQLite file, `idem.db` in a temporary directory of its own
/// (deleted with the [`TestStore`]); [`TestStore::open`] reads a manual
/// clock.
///
/// # Panics
///
/// When the directory cannot be created.
pub async fn sqlite(_test: &str) -> Option<TestStore> {
    let dir = TempDir::new("idem-store").expect("create a temporary directory");
    let path = dir.path().join("idem.db");
    Some(TestStore {
        name: "sqlite",
        url: Some(format!("sqlite://{}", path.display())),
        clock: Some(ManualClock::new(START_MILLIS)),
        memory: None,
        sqlite: Some(path),
        _dir: Some(dir),
    })
}

static REDIS: LazyLock<Option<RedisServer>> = LazyLock::new(RedisServer::start);
static REDIS_CLUSTER: LazyLock<Option<RedisCluster>> = LazyLock::new(RedisCluster::start);
static POSTGRES: LazyLock<Option<PostgresServer>> = LazyLock::new(PostgresServer::start);

/// The URL `url` reads from a shared server (started on first use, off the
/// runtime's threads), or `None` after a loud skip of `test` naming
/// `binaries`.
async fn shared(test: &str, binaries: &str, url: fn() -> Option<String>) -> Option<String> {
    let url = tokio::task::spawn_blocking(url)
        .await
        .expect("start the server");
    if url.is_none() {
        skip(test, binaries);
    }
    url
}

/// The test binary's `redis-server`, or `None` after a loud skip of
/// `test`.
pub async fn redis(test: &str) -> Option<TestStore> {
    let url = shared(test, "redis-server", || {
        REDIS.as_ref().map(RedisServer::url)
    })
    .await?;
    Some(TestStore::server("redis", url))
}

/// The test binary's Redis Cluster (three primaries), or `None` after a
/// loud skip of `test`.
pub async fn redis_cluster(test: &str) -> Option<TestStore> {
    let url = shared(test, "redis-server and redis-cli", || {
        REDIS_CLUSTER.as_ref().map(RedisCluster::url)
    })
    .await?;
    Some(TestStore::server("redis_cluster", url))
}

/// The test binary's PostgreSQL server, or `None` after a loud skip of
/// `test`.
pub async fn postgres(test: &str) -> Option<TestStore> {
    let url = shared(test, "PostgreSQL", || {
        POSTGRES.as_ref().map(PostgresServer::url)
    })
    .await?;
    Some(TestStore::server("postgres", url))
}

/// Run each test on each of the stores listed: one module per store (named
/// after it, as [`stores`](crate::stores) names its functions: `memory`,
/// `sqlite`, `redis`, `redis_cluster`, `postgres`), one
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` per test in
/// it, so that test `t` on Redis is `redis::t`. A store listed with
/// attributes (`#[cfg(feature = "redis")] redis`) gets them on its module.
///
/// Each test gets the [`TestStore`] of its store; a missing server skips
/// the test loudly, or fails it under `IDEM_REQUIRE_SERVERS=1`. `run` says
/// how to call the test with it (by default `scenario(store).await`, for
/// tests that take the [`TestStore`]):
///
/// ```
/// use idem_runtime::store::StoreExt;
/// use idem_testkit::stores::TestStore;
///
/// /// Called as `sqlite::records_survive`, `redis::records_survive`…
/// async fn records_survive(url: &str) {
///     let _store = idem_testkit::stores::connect(url).await.unwrap();
/// }
///
/// /// Called with the store itself.
/// async fn sweeps_on_the_clock(store: TestStore) {
///     let _swept = store.open().await.sweep().await.unwrap();
/// }
///
/// idem_testkit::on_every_store! {
///     stores: [sqlite, redis, postgres],
///     run: |scenario, store| scenario(store.url()).await,
///     tests: [records_survive],
/// }
///
/// mod on_every_clock {
///     use super::sweeps_on_the_clock;
///     idem_testkit::on_every_store! {
///         stores: [memory, sqlite, #[cfg(any())] postgres],
///         tests: [sweeps_on_the_clock],
///     }
/// }
/// # fn main() {}
/// ```
///
/// The calling crate needs tokio (features `macros` and `rt-multi-thread`).
#[macro_export]
macro_rules! on_every_store {
    (@store [$(#[$attr:meta])*] $store:ident |$scenario:ident, $fixture:ident| $run:expr;
        [$($test:ident),* $(,)?]) => {
        $(#[$attr])*
        mod $store {
            // What `run` names, as in the module the macro was called in.
            #[allow(unused_imports)]
            use super::*;

            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let test = ::core::concat!(
                        ::core::stringify!($store),
                        "::",
                        ::core::stringify!($test)
                    );
                    if let ::core::option::Option::Some($fixture) =
                        $crate::stores::$store(test).await
                    {
                        let $scenario = super::$test;
                        $run
                    }
                }
            )*
        }
    };
    (
        stores: [$($(#[$attr:meta])* $store:ident),+ $(,)?],
        run: |$scenario:ident, $fixture:ident| $run:expr,
        tests: $tests:tt $(,)?
    ) => {
        $(
            $crate::on_every_store!(
                @store [$(#[$attr])*] $store |$scenario, $fixture| $run; $tests
            );
        )+
    };
    (
        stores: [$($(#[$attr:meta])* $store:ident),+ $(,)?],
        tests: $tests:tt $(,)?
    ) => {
        $crate::on_every_store!(
            stores: [$($(#[$attr])* $store),+],
            run: |scenario, store| scenario(store).await,
            tests: $tests,
        );
    };
}

/// The backends of this kit's features (and the memory store), as a
/// program's table holds them: what [`connect`] opens.
pub static BACKENDS: idem_runtime::store::backend::Backends =
    idem_runtime::store::backend::Backends::new(&[
        &idem_runtime::store::backend::MEMORY,
        #[cfg(feature = "sqlite")]
        &idem_sqlite::BACKEND,
        #[cfg(feature = "redis")]
        &idem_redis::BACKEND,
        #[cfg(feature = "postgres")]
        &idem_postgres::BACKEND,
    ]);

/// Open the store `url` names with one of [`BACKENDS`].
pub async fn connect(
    url: &str,
) -> Result<std::sync::Arc<dyn idem_runtime::store::Store>, idem_runtime::store::StoreError> {
    BACKENDS.connect(url).await
}
