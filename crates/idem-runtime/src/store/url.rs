//! Store URLs: the names a program's configuration gives its store, so the
//! same program moves from a laptop (one SQLite file) to a fleet of workers
//! (Redis, PostgreSQL) by configuration alone.
//!
//! | URL | store |
//! |---|---|
//! | `memory:` | [`MemoryStore`](super::MemoryStore): nothing survives the process |
//! | `sqlite://idem.db`, `sqlite:///var/lib/app/idem.db` | `SqliteStore` (crate `idem-sqlite`, the facade's feature `sqlite`); relative paths are relative to the working directory |
//! | `redis://[user:password@]host[:port][/db][?prefix=NAME]` | `RedisStore` (crate `idem-redis`, feature `redis`) on one server |
//! | `redis+cluster://[user:password@]host:port[,host:port…][?prefix=NAME]` | `RedisStore` on a Redis Cluster, through the seed nodes listed |
//! | `postgres://user[:password]@host[:port]/db[?schema=name]`, `postgresql://…` | `PostgresStore` (crate `idem-postgres`, feature `postgres`); `schema` keeps idem's tables in that PostgreSQL schema, created if missing, so applications can share a database |
//!
//! A table of [backends](super::backend) picks the store by the URL's
//! scheme (the `idem` facade's `store::connect`); each backend reads the
//! rest of its URL itself. SQLite takes options in the query:
//! `synchronous=full` (default) or `synchronous=normal`, and
//! `busy_timeout_ms=5000`. Redis takes `prefix=NAME`, the prefix of every
//! key idem writes (default `idem`), so applications sharing one server or
//! cluster keep apart, and `protocol=resp3`. Any other option is refused.
//!
//! This build of idem has no TLS support for Redis or PostgreSQL. A URL that
//! asks for TLS (`rediss://`, `rediss+cluster://`, or a PostgreSQL URL with
//! `sslmode=require`, `verify-ca` or `verify-full`) is refused up front with
//! [`StoreError::TlsUnsupported`](super::StoreError::TlsUnsupported), never
//! connected without it: connect over a trusted network, or through a local
//! TLS proxy with a plain URL to it. `sslmode=prefer` (the PostgreSQL
//! default) and `sslmode=disable` connect in plain text.

pub use super::redact::redact;

/// The environment variable the facade's `store::from_env` reads.
pub const STORE_ENV: &str = "IDEM_STORE";

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
