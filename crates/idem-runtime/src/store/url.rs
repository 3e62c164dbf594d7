//! Store URLs: the names a program's configuration gives its store, so the
//! same program moves from a laptop (one SQLite file) to a fleet of workers
//! (Redis, PostgreSQL) by configuration alone.
//!
//! | URL | store |
//! |---|---|
//! | `memory:` | [`MemoryStore`](super::MemoryStore): nothing survives the process |
//! | `sqlite://idem.db`, `sqlite:///var/lib/app/idem.db` | `SqliteStore` (crate `idem-sqlite`, the facade's feature `sqlite`); relative paths are relative to the working directory |
//! | `redis://[user:password@]host[:port][/db][?prefix=NAME]` | `RedisStore` (crate `idem-redis`, feature `redis`) on one server |
//! | `rediss://[user:password@]host[:port][/db][?ca=PATH][&cert=PATH&key=PATH]` | the same over TLS: the platform's CAs, or only those of `ca`; a client certificate for mutual TLS |
//! | `redis+cluster://[user:password@]host:port[,host:port…][?prefix=NAME]` | `RedisStore` on a Redis Cluster, through the seed nodes listed |
//! | `rediss+cluster://…[?ca=PATH][&cert=PATH&key=PATH]` | the same over TLS |
//! | `postgres://user[:password]@host[:port]/db[?schema=name]`, `postgresql://…` | `PostgresStore` (crate `idem-postgres`, feature `postgres`); `schema` keeps idem's tables in that PostgreSQL schema, created if missing, so applications can share a database |
//! | `postgres://…?sslmode=verify-full&sslrootcert=PATH[&sslcert=PATH&sslkey=PATH]` | the same over TLS, with libpq's parameters: `sslmode` `disable`, `prefer` (the default: TLS when offered), `require`, `verify-ca`, `verify-full`; `sslrootcert`, `sslcert`, `sslkey`; `channel_binding` |
//!
//! A table of [backends](super::backend) picks the store by the URL's
//! scheme (the `idem` facade's `store::connect`); each backend reads the
//! rest of its URL itself. SQLite takes options in the query:
//! `synchronous=full` (default) or `synchronous=normal`, and
//! `busy_timeout_ms=5000`. Redis takes `prefix=NAME`, the prefix of every
//! key idem writes (default `idem`), so applications sharing one server or
//! cluster keep apart, and `protocol=resp3`. Any other option is refused.
//!
//! TLS is rustls with the `ring` crypto provider (no OpenSSL), trusting
//! the platform's certificate authorities unless the URL names a CA file
//! (`ca=` for Redis, `sslrootcert=` for PostgreSQL) or
//! [`TLS_CA_FILE_ENV`] does. Redis certificates are always verified;
//! PostgreSQL's `prefer` and `require` encrypt without verifying, as
//! libpq's do, unless a CA file is named. A TLS connection that cannot be
//! made is a [`StoreError::Tls`](super::StoreError::Tls) naming the host,
//! what went wrong and what to write.

pub use super::redact::redact;

// Store URLs are cut by hand rather than by the `url` crate, which
// refuses or rewrites forms idem accepts: `redis+cluster://h1:1,h2:2/`
// (several hosts: "invalid port number"), `postgres://app:p/w?x@y@db/idem`
// (a password holding `/`, `?` or `@`: "invalid port number") and
// `sqlite://idem.db` (a relative file read as the host `idem.db`).

/// `url` cut at the `?` that starts its query: the part before and the
/// query, or `None` when there is none. The query starts after the
/// credentials: a password may hold `?` (or `@`, `/`), so the `?` is
/// looked for after the last `@`. PostgreSQL's options and
/// [`redact`] read a URL this same way, so what one takes for the query
/// is what the other hides.
///
/// ```
/// use idem_runtime::store::url::split_query;
/// assert_eq!(split_query("postgres://app:p?w@db/idem?sslmode=require"),
///            Some(("postgres://app:p?w@db/idem", "sslmode=require")));
/// assert_eq!(split_query("postgres://app:p?w@db/idem"), None);
/// ```
pub fn split_query(url: &str) -> Option<(&str, &str)> {
    let after_scheme = url.find("://").map_or(0, |at| at + "://".len());
    let host_start = url[after_scheme..]
        .rfind('@')
        .map_or(after_scheme, |at| after_scheme + at + 1);
    let at = host_start + url[host_start..].find('?')?;
    Some((&url[..at], &url[at + 1..]))
}

/// The file a `sqlite:` URL names and its query (empty when it has
/// none), or `None` when `url` is not a SQLite URL: `sqlite://idem.db`
/// (relative to the working directory), `sqlite:///var/lib/idem.db`,
/// `sqlite:idem.db`.
///
/// ```
/// use idem_runtime::store::url::sqlite_file;
/// assert_eq!(sqlite_file("sqlite://idem.db"), Some(("idem.db", "")));
/// assert_eq!(sqlite_file("sqlite:///var/idem.db?synchronous=normal"),
///            Some(("/var/idem.db", "synchronous=normal")));
/// assert_eq!(sqlite_file("redis://cache"), None);
/// ```
pub fn sqlite_file(url: &str) -> Option<(&str, &str)> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    Some(rest.split_once('?').unwrap_or((rest, "")))
}

/// The environment variable the facade's `store::from_env` reads.
pub const STORE_ENV: &str = "IDEM_STORE";

/// The environment variable naming a file of certificate authorities (PEM)
/// that TLS connections to Redis and PostgreSQL trust instead of the
/// platform's, when the URL names none itself (Redis's `?ca=PATH`,
/// PostgreSQL's `sslrootcert=PATH`).
pub const TLS_CA_FILE_ENV: &str = "IDEM_TLS_CA_FILE";

/// The store `from_env` opens when [`STORE_ENV`] is unset: a SQLite file
/// in the working directory (the embedded default).
pub const DEFAULT_STORE_URL: &str = "sqlite://idem.db";

/// What [`Backends::migrate`](super::backend::Backends::migrate) did to a
/// store.
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
