//! Records' stores: the contract every backend implements (see
//! [`Store`]), the in-memory store, and the durable stores this build was
//! made with, opened by URL.
//!
//! | URL | store | feature |
//! |---|---|---|
//! | `memory:` | [`MemoryStore`]: nothing survives the process | always |
//! | `sqlite://idem.db`, `sqlite:///var/lib/app/idem.db` | `SqliteStore` (crate `idem-sqlite`) | `sqlite` (default) |
//! | `redis://…`, `redis+cluster://…` | `RedisStore` (crate `idem-redis`) | `redis` |
//! | `postgres://…`, `postgresql://…` | `PostgresStore` (crate `idem-postgres`) | `postgres` |
//!
//! [`connect`] picks the backend by the URL's scheme from [`BACKENDS`],
//! the table of the backends this build has; each reads the rest of its
//! URL itself ([`url`] lists the options). A URL of a backend this build
//! lacks is refused naming the feature to turn on.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = idem::store::connect("memory:").await.unwrap();
//! assert_eq!(store.describe(), "memory");
//!
//! let err = idem::store::connect("mongodb://db").await.unwrap_err();
//! assert!(err.to_string().contains("unknown store URL scheme"));
//! # });
//! ```

use std::sync::Arc;

pub use idem_runtime::store::*;

use idem_runtime::store::backend::{Backends, MEMORY};
use idem_runtime::store::url::Migration;

#[cfg(feature = "postgres")]
#[doc(inline)]
pub use idem_postgres::{PostgresOptions, PostgresStore};
#[cfg(feature = "redis")]
#[doc(inline)]
pub use idem_redis::{RedisOptions, RedisStore};
#[cfg(feature = "sqlite")]
#[doc(inline)]
pub use idem_sqlite::{SqliteOptions, SqliteStore, Synchronous};

/// The SQLite store's crate: its constants and options (feature `sqlite`).
#[cfg(feature = "sqlite")]
pub use idem_sqlite as sqlite;

/// The Redis store's crate (feature `redis`).
#[cfg(feature = "redis")]
pub use idem_redis as redis;

/// The PostgreSQL store's crate (feature `postgres`).
#[cfg(feature = "postgres")]
pub use idem_postgres as postgres;

/// The backends this build of idem was made with, which [`connect`] and
/// the functions beside it choose from; a new backend is one line here.
pub static BACKENDS: Backends = Backends::new(&[
    &MEMORY,
    #[cfg(feature = "sqlite")]
    &idem_sqlite::BACKEND,
    #[cfg(feature = "redis")]
    &idem_redis::BACKEND,
    #[cfg(feature = "postgres")]
    &idem_postgres::BACKEND,
])
.not_built(&[
    #[cfg(not(feature = "sqlite"))]
    idem_runtime::store::backend::NotBuilt {
        schemes: &["sqlite"],
        feature: "sqlite",
    },
    #[cfg(not(feature = "redis"))]
    idem_runtime::store::backend::NotBuilt {
        schemes: &["redis", "redis+cluster", "rediss", "rediss+cluster"],
        feature: "redis",
    },
    #[cfg(not(feature = "postgres"))]
    idem_runtime::store::backend::NotBuilt {
        schemes: &["postgres", "postgresql"],
        feature: "postgres",
    },
]);

/// Open the store `url` names (see the [module docs](self) for the URLs).
///
/// A store that cannot be reached is a [`StoreError::Unavailable`] naming
/// the store (without its password) and the cause; a TLS connection that
/// cannot be made (a certificate that does not verify, a URL that
/// disagrees with the server about TLS) is a [`StoreError::Tls`]; a scheme
/// of no backend is a
/// [`StoreError::UnknownScheme`], one of a backend this build lacks a
/// [`StoreError::NotBuilt`].
pub async fn connect(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    BACKENDS.connect(url).await
}

/// Open the store `url` names for reading only: nothing in it is created,
/// migrated or changed, and every operation that would write fails with
/// [`StoreError::ReadOnly`]. For operators' reads (list, show, log,
/// stats), which must change nothing.
///
/// Refuses, changing nothing: a SQLite file that does not exist
/// ([`StoreError::NoStore`]); a database, PostgreSQL schema or Redis
/// prefix idem never wrote ([`StoreError::NotAnIdemStore`]); data of a
/// schema version too old to read without migrating
/// ([`StoreError::SchemaTooOld`]: run `idem migrate`) or newer than this
/// build ([`StoreError::SchemaTooNew`]). `memory:` names no store to read:
/// [`StoreError::NoStore`].
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// # #[cfg(feature = "sqlite")] {
/// use idem::store::StoreError;
///
/// let dir = std::env::temp_dir().join(format!("idem-doc-ro-{}", std::process::id()));
/// let url = format!("sqlite://{}/idem.db", dir.display());
/// let err = idem::store::connect_read_only(&url).await.unwrap_err();
/// assert!(matches!(err, StoreError::NoStore { .. }), "{err}");
/// assert!(!dir.exists(), "nothing was created");
/// # }
/// # });
/// ```
pub async fn connect_read_only(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    BACKENDS.connect_read_only(url).await
}

/// Open the store `url` names read-write, which creates its schema or
/// migrates it to this build's version, close it, and say what changed.
/// Fails as [`connect`] does; `memory:` has nothing to migrate
/// ([`StoreError::NothingToMigrate`]).
pub async fn migrate(url: &str) -> Result<Migration, StoreError> {
    BACKENDS.migrate(url).await
}

/// Open the store named by the `IDEM_STORE` environment variable
/// ([`STORE_ENV`]), or [`DEFAULT_STORE_URL`] (a SQLite file in the working
/// directory) when it is unset or empty.
pub async fn from_env() -> Result<Arc<dyn Store>, StoreError> {
    BACKENDS.from_env(DEFAULT_STORE_URL).await
}
