//! Choosing a store by URL, so the same program moves from a laptop (one
//! SQLite file) to a fleet of workers (Redis, PostgreSQL) by configuration
//! alone.
//!
//! | URL | store |
//! |---|---|
//! | `memory:` | [`MemoryStore`]: nothing survives the process |
//! | `sqlite://idem.db`, `sqlite:///var/lib/app/idem.db` | [`SqliteStore`](super::SqliteStore) (feature `sqlite`); relative paths are relative to the working directory |
//! | `redis://[user:password@]host[:port][/db][?prefix=NAME]` | [`RedisStore`](super::RedisStore) (feature `redis`) on one server |
//! | `redis+cluster://[user:password@]host:port[,host:port…][?prefix=NAME]` | [`RedisStore`](super::RedisStore) (feature `redis`) on a Redis Cluster, through the seed nodes listed |
//! | `postgres://user[:password]@host[:port]/db[?schema=name]`, `postgresql://…` | [`PostgresStore`](super::PostgresStore) (feature `postgres`); `schema` keeps idem's tables in that PostgreSQL schema, created if missing, so applications can share a database |
//!
//! This build of idem has no TLS support for Redis or PostgreSQL. A URL that
//! asks for TLS (`rediss://`, `rediss+cluster://`, or a PostgreSQL URL with
//! `sslmode=require`, `verify-ca` or `verify-full`) is refused up front with
//! [`StoreError::TlsUnsupported`], never connected without it: connect over a
//! trusted network, or through a local TLS proxy with a plain URL to it.
//! `sslmode=prefer` (the PostgreSQL default) and `sslmode=disable` connect
//! in plain text.
//!
//! [`connect`] only picks the store by the URL's scheme; each store reads
//! the rest of its URL itself ([`SqliteStore::connect`](super::SqliteStore::connect),
//! [`RedisStore::connect`](super::RedisStore::connect),
//! [`PostgresStore::connect`](super::PostgresStore::connect)). SQLite takes
//! options in the query: `synchronous=full` (default) or
//! `synchronous=normal` (see [`Synchronous`](super::Synchronous)), and
//! `busy_timeout_ms=5000`. Redis takes `prefix=NAME`, the prefix of every
//! key idem writes (default `idem`), so applications sharing one server or
//! cluster keep apart, and `protocol=resp3`. Any other option is refused.
//!
//! [`connect_read_only`] opens the same URLs for reading only, as the
//! operator's read commands do: nothing is created or migrated, and
//! whatever the URL names must already be an idem store. [`migrate`] opens
//! a store read-write, which migrates it, and says from which version.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = idem_runtime::store::connect("memory:").await.unwrap();
//! assert_eq!(store.describe(), "memory");
//!
//! let err = idem_runtime::store::connect("mongodb://db").await.unwrap_err();
//! assert!(err.to_string().contains("unknown store URL scheme"));
//!
//! let err = idem_runtime::store::connect("rediss://:pw@cache:6380").await.unwrap_err();
//! assert!(matches!(err, idem_runtime::store::StoreError::TlsUnsupported { .. }));
//! assert!(err.to_string().contains("no TLS support for Redis"));
//! # });
//! ```

use std::sync::Arc;

pub use super::redact::redact;
use super::{MemoryStore, Store, StoreError};

/// The environment variable [`from_env`] reads.
pub const STORE_ENV: &str = "IDEM_STORE";

/// The store [`from_env`] opens when [`STORE_ENV`] is unset: a SQLite file
/// in the working directory (the embedded default).
pub const DEFAULT_STORE_URL: &str = "sqlite://idem.db";

/// Open the store `url` names. See the [module docs](self) for the URLs.
///
/// A store that cannot be reached is a [`StoreError::Unavailable`] naming
/// the store (without its password) and the cause; a URL asking for TLS is
/// a [`StoreError::TlsUnsupported`]; any other URL this build cannot serve
/// is a [`StoreError::Config`].
pub async fn connect(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    let (url, scheme) = parts(url)?;
    match scheme {
        "memory" if matches!(url, "memory:" | "memory://") => Ok(Arc::new(MemoryStore::new())),
        "sqlite" => sqlite(url).await,
        "redis" | "redis+cluster" => redis(url).await,
        "postgres" | "postgresql" => postgres(url).await,
        _ => Err(unknown_scheme(url)),
    }
}

/// `url` trimmed, and its scheme; a URL asking for TLS, which this build
/// cannot speak, is refused here, before any connection, whatever opens it.
fn parts(url: &str) -> Result<(&str, &str), StoreError> {
    let url = url.trim();
    let scheme = url.split(':').next().unwrap_or_default();
    match scheme {
        "rediss" | "rediss+cluster" => Err(no_tls(url, "Redis")),
        "postgres" | "postgresql" if postgres_requires_tls(url) => Err(no_tls(url, "PostgreSQL")),
        _ => Ok((url, scheme)),
    }
}

fn unknown_scheme(url: &str) -> StoreError {
    StoreError::Config(format!(
        "unknown store URL scheme in {:?}; expected memory:, sqlite://PATH, redis://HOST or postgres://HOST/DB",
        redact(url)
    ))
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
/// use idem_runtime::store::StoreError;
///
/// let dir = std::env::temp_dir().join(format!("idem-doc-ro-{}", std::process::id()));
/// let url = format!("sqlite://{}/idem.db", dir.display());
/// let err = idem_runtime::store::url::connect_read_only(&url).await.unwrap_err();
/// assert!(matches!(err, StoreError::NoStore { .. }), "{err}");
/// assert!(!dir.exists(), "nothing was created");
/// # });
/// ```
pub async fn connect_read_only(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    let (url, scheme) = parts(url)?;
    match scheme {
        "memory" if matches!(url, "memory:" | "memory://") => Err(StoreError::NoStore {
            store: "memory".into(),
        }),
        "sqlite" => sqlite_read_only(url).await,
        "redis" | "redis+cluster" => redis_read_only(url).await,
        "postgres" | "postgresql" => postgres_read_only(url).await,
        _ => Err(unknown_scheme(url)),
    }
}

/// What [`migrate`] did to a store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Migration {
    /// The store (password hidden).
    pub store: String,
    /// The schema version it had: `None` when there was no schema yet and
    /// one was created.
    pub from: Option<u32>,
    /// The schema version it has now: this build's.
    pub to: u32,
}

/// Open the store `url` names read-write, which creates its schema or
/// migrates it to this build's version, close it, and say what changed.
/// Fails as [`connect`] does; `memory:` has nothing to migrate
/// ([`StoreError::Config`]).
pub async fn migrate(url: &str) -> Result<Migration, StoreError> {
    let (url, scheme) = parts(url)?;
    match scheme {
        "sqlite" => sqlite_migrate(url).await,
        "redis" | "redis+cluster" => redis_migrate(url).await,
        "postgres" | "postgresql" => postgres_migrate(url).await,
        "memory" => Err(StoreError::Config(
            "memory: keeps nothing between processes, so there is nothing to migrate".into(),
        )),
        _ => Err(unknown_scheme(url)),
    }
}

fn no_tls(url: &str, backend: &'static str) -> StoreError {
    StoreError::TlsUnsupported {
        store: redact(url),
        backend,
    }
}

/// Whether a PostgreSQL URL's `sslmode` demands TLS (`require`, `verify-ca`,
/// `verify-full`); `prefer` falls back to plain text, as tokio-postgres
/// does without a TLS connector.
fn postgres_requires_tls(url: &str) -> bool {
    // Every `?`- or `&`-separated part: a password holding `?`, `@` or `&`
    // cannot hide the query, at worst it refuses a URL it need not.
    url.split(['?', '&'])
        .skip(1)
        .any(|param| match param.split_once('=') {
            Some((key, mode)) if key.eq_ignore_ascii_case("sslmode") => matches!(
                mode.to_ascii_lowercase().as_str(),
                "require" | "verify-ca" | "verify-full" | "verify_ca" | "verify_full"
            ),
            _ => false,
        })
}

/// Open the store named by the `IDEM_STORE` environment variable, or
/// [`DEFAULT_STORE_URL`] when it is unset or empty.
pub async fn from_env() -> Result<Arc<dyn Store>, StoreError> {
    match std::env::var(STORE_ENV) {
        Ok(url) if !url.trim().is_empty() => connect(&url).await,
        Ok(_) | Err(std::env::VarError::NotPresent) => connect(DEFAULT_STORE_URL).await,
        Err(std::env::VarError::NotUnicode(_)) => Err(StoreError::Config(format!(
            "{STORE_ENV} is not valid UTF-8"
        ))),
    }
}

#[cfg(not(all(feature = "sqlite", feature = "redis", feature = "postgres")))]
fn not_built(url: &str, feature: &str) -> StoreError {
    StoreError::Config(format!(
        "{} needs idem built with the `{feature}` feature",
        redact(url)
    ))
}

#[cfg(feature = "sqlite")]
async fn sqlite(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(super::sqlite::SqliteStore::connect(url).await?))
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Err(not_built(url, "sqlite"))
}

#[cfg(feature = "sqlite")]
async fn sqlite_read_only(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(
        super::sqlite::SqliteStore::connect_read_only(url).await?,
    ))
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite_read_only(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Err(not_built(url, "sqlite"))
}

#[cfg(feature = "sqlite")]
async fn sqlite_migrate(url: &str) -> Result<Migration, StoreError> {
    let store = super::sqlite::SqliteStore::connect(url).await?;
    let migration = Migration {
        store: store.describe(),
        from: store.schema_found(),
        to: super::sqlite::SCHEMA_VERSION,
    };
    store.close().await;
    Ok(migration)
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite_migrate(url: &str) -> Result<Migration, StoreError> {
    Err(not_built(url, "sqlite"))
}

#[cfg(feature = "redis")]
async fn redis(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(super::redis::RedisStore::connect(url).await?))
}

#[cfg(not(feature = "redis"))]
async fn redis(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Err(not_built(url, "redis"))
}

#[cfg(feature = "redis")]
async fn redis_read_only(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(
        super::redis::RedisStore::connect_read_only(url).await?,
    ))
}

#[cfg(not(feature = "redis"))]
async fn redis_read_only(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Err(not_built(url, "redis"))
}

#[cfg(feature = "redis")]
async fn redis_migrate(url: &str) -> Result<Migration, StoreError> {
    let store = super::redis::RedisStore::connect(url).await?;
    let migration = Migration {
        store: store.describe(),
        from: store.schema_found(),
        to: super::redis::SCHEMA_VERSION,
    };
    store.close().await;
    Ok(migration)
}

#[cfg(not(feature = "redis"))]
async fn redis_migrate(url: &str) -> Result<Migration, StoreError> {
    Err(not_built(url, "redis"))
}

#[cfg(feature = "postgres")]
async fn postgres(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(
        super::postgres::PostgresStore::connect(url).await?,
    ))
}

#[cfg(not(feature = "postgres"))]
async fn postgres(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Err(not_built(url, "postgres"))
}

#[cfg(feature = "postgres")]
async fn postgres_read_only(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Ok(Arc::new(
        super::postgres::PostgresStore::connect_read_only(url).await?,
    ))
}

#[cfg(not(feature = "postgres"))]
async fn postgres_read_only(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    Err(not_built(url, "postgres"))
}

#[cfg(feature = "postgres")]
async fn postgres_migrate(url: &str) -> Result<Migration, StoreError> {
    let store = super::postgres::PostgresStore::connect(url).await?;
    let migration = Migration {
        store: store.describe(),
        from: store.schema_found(),
        to: super::postgres::SCHEMA_VERSION,
    };
    store.close().await;
    Ok(migration)
}

#[cfg(not(feature = "postgres"))]
async fn postgres_migrate(url: &str) -> Result<Migration, StoreError> {
    Err(not_built(url, "postgres"))
}
