//! Choosing a store by URL, so the same program moves from a laptop (one
//! SQLite file) to a fleet of workers (Redis, PostgreSQL) by configuration
//! alone.
//!
//! | URL | store |
//! |---|---|
//! | `memory:` | [`MemoryStore`]: nothing survives the process |
//! | `sqlite://idem.db`, `sqlite:///var/lib/app/idem.db` | [`SqliteStore`](super::SqliteStore) (feature `sqlite`); relative paths are relative to the working directory |
//! | `redis://[user:password@]host[:port][/db]`, `rediss://…` | [`RedisStore`](super::RedisStore) (feature `redis`) |
//! | `postgres://user[:password]@host[:port]/db`, `postgresql://…` | [`PostgresStore`](super::PostgresStore) (feature `postgres`) |
//!
//! SQLite takes options in the query: `synchronous=full` (default) or
//! `synchronous=normal` (see [`Synchronous`](super::Synchronous)), and
//! `busy_timeout_ms=5000`.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = idem_runtime::store::connect("memory:").await.unwrap();
//! assert_eq!(store.describe(), "memory");
//!
//! let err = idem_runtime::store::connect("mongodb://db").await.unwrap_err();
//! assert!(err.to_string().contains("unknown store URL scheme"));
//! # });
//! ```

use std::sync::Arc;

use super::{MemoryStore, Store, StoreError};

/// The environment variable [`from_env`] reads.
pub const STORE_ENV: &str = "IDEM_STORE";

/// The store [`from_env`] opens when [`STORE_ENV`] is unset: a SQLite file
/// in the working directory (the embedded default).
pub const DEFAULT_STORE_URL: &str = "sqlite://idem.db";

/// Open the store `url` names. See the [module docs](self) for the URLs.
///
/// A store that cannot be reached is a [`StoreError::Unavailable`] naming
/// the store (without its password) and the cause; a URL this build cannot
/// serve is a [`StoreError::Config`].
pub async fn connect(url: &str) -> Result<Arc<dyn Store>, StoreError> {
    let url = url.trim();
    let scheme = url.split(':').next().unwrap_or_default();
    match scheme {
        "memory" if matches!(url, "memory:" | "memory://") => Ok(Arc::new(MemoryStore::new())),
        "sqlite" => sqlite(url).await,
        "redis" | "rediss" => redis(url).await,
        "postgres" | "postgresql" => postgres(url).await,
        _ => Err(StoreError::Config(format!(
            "unknown store URL scheme in {:?}; expected memory:, sqlite://PATH, redis://HOST or postgres://HOST/DB",
            redact(url)
        ))),
    }
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

/// `url` with any password replaced by `***`, for error messages and
/// [`Store::describe`].
///
/// ```
/// use idem_runtime::store::url::redact;
/// assert_eq!(redact("redis://:hunter2@cache:6379/0"), "redis://:***@cache:6379/0");
/// assert_eq!(redact("postgres://app:pw@db/idem?password=pw&sslmode=disable"),
///            "postgres://app:***@db/idem?password=***&sslmode=disable");
/// // Passwords may contain `/`, `?` and `@`.
/// assert_eq!(redact("postgres://app:p/w?x@y@db/idem"), "postgres://app:***@db/idem");
/// assert_eq!(redact("sqlite:///var/lib/idem.db"), "sqlite:///var/lib/idem.db");
/// ```
pub fn redact(url: &str) -> String {
    // The credentials end at the last `@` before the host: a password may
    // itself contain `/`, `?` or `@`, so the userinfo is cut off first and
    // the path and query are looked for only after it.
    let (prefix, rest) = match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((userinfo, after)) => {
                let user = userinfo.split(':').next().unwrap_or_default();
                let hidden = if userinfo.contains(':') { ":***" } else { "" };
                (format!("{scheme}://{user}{hidden}@"), after)
            }
            None => (format!("{scheme}://"), rest),
        },
        None => (String::new(), url),
    };
    let (base, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let mut out = prefix + base;
    if let Some(query) = query {
        let params: Vec<String> = query
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
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
    use super::sqlite::{SqliteOptions, SqliteStore, Synchronous};

    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or_default();
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() {
        return Err(StoreError::Config(format!(
            "{url:?} names no file; write sqlite://idem.db or sqlite:///absolute/path.db"
        )));
    }
    let mut options = SqliteOptions::default();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        options = match (name, value.to_ascii_lowercase().as_str()) {
            ("synchronous", "full") => options.synchronous(Synchronous::Full),
            ("synchronous", "normal") => options.synchronous(Synchronous::Normal),
            ("busy_timeout_ms", ms) => match ms.parse() {
                Ok(ms) => options.busy_timeout(std::time::Duration::from_millis(ms)),
                Err(_) => {
                    return Err(StoreError::Config(format!(
                        "busy_timeout_ms must be a number of milliseconds, not {value:?}"
                    )))
                }
            },
            _ => {
                return Err(StoreError::Config(format!(
                    "unknown SQLite option {param:?} in {url:?}; known: synchronous=full|normal, busy_timeout_ms=N"
                )))
            }
        };
    }
    Ok(Arc::new(SqliteStore::open_with(path, options).await?))
}

#[cfg(not(feature = "sqlite"))]
async fn sqlite(url: &str) -> Result<Arc<dyn Store>, StoreError> {
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
