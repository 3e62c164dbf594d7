//! Kinds of store opened by URL, and what a store author's crate needs
//! from the runtime.
//!
//! Each durable store is a crate of its own (`idem-sqlite`, `idem-redis`,
//! `idem-postgres`) with one [`Backend`] value that names it, lists the
//! URL schemes it opens and opens them. A program's [`Backends`] table
//! holds the backends it was built with, and picks one by the URL's
//! scheme: the `idem` facade's `store::connect` is that table with the
//! backends of its features (`sqlite`, `redis`, `postgres`). A new backend
//! is one crate and one line in that table.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use idem_runtime::store::backend::{Backends, NotBuilt, MEMORY};
//! use idem_runtime::store::StoreError;
//!
//! static ONLY_MEMORY: Backends = Backends::new(&[&MEMORY])
//!     .not_built(&[NotBuilt { schemes: &["redis"], feature: "redis" }]);
//!
//! let store = ONLY_MEMORY.connect("memory:").await.unwrap();
//! assert_eq!(store.describe(), "memory");
//!
//! let err = ONLY_MEMORY.connect("redis://cache").await.unwrap_err();
//! assert!(err.to_string().contains("the `redis` feature"), "{err}");
//!
//! let err = ONLY_MEMORY.connect("mongodb://db").await.unwrap_err();
//! assert!(matches!(err, StoreError::UnknownScheme { .. }), "{err}");
//! # });
//! ```
//!
//! A backend's crate also finds here what every notified store shares
//! with the others: [`Waiters`] (wake-ups per key, with a safety-net
//! poll), [`reconnect_pause`] (how long their listener waits to connect
//! again) and [`span_millis`] (a
//! lease or TTL as the milliseconds a server can add without overflow).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::url::{Migration, STORE_ENV};
pub use super::waiters::{reconnect_pause, Waiters};
use super::{redact, MemoryStore, Store, StoreError};
use crate::store::StoreExt;

/// A kind of store that programs open by URL.
///
/// An implementation reads the whole URL itself (its path, host, options);
/// [`Backends`] only picks it by the scheme. Every method refuses, changing
/// nothing, a URL it cannot serve exactly as written.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The backend's name, as stores describe themselves: `"sqlite"`.
    fn name(&self) -> &'static str;

    /// The URL schemes it opens, without the colon: `&["redis",
    /// "redis+cluster"]`. Two backends of one table never share a scheme.
    fn url_schemes(&self) -> &'static [&'static str];

    /// A URL of this backend as an error message shows it to a person who
    /// wrote another: `"sqlite://PATH"`.
    fn url_example(&self) -> &'static str;

    /// The schema version this build of the backend writes; `None` for a
    /// store that keeps nothing between processes.
    fn schema_version(&self) -> Option<u32>;

    /// Open the store `url` names, creating its schema or migrating it to
    /// [`schema_version`](Backend::schema_version).
    async fn connect(&self, url: &str) -> Result<Arc<dyn Store>, StoreError>;

    /// Open the store `url` names for reading only: nothing is created,
    /// migrated or changed, and whatever the URL names must already be a
    /// store of this backend
    /// ([`StoreError::NoStore`], [`StoreError::NotAnIdemStore`],
    /// [`StoreError::SchemaTooOld`], [`StoreError::SchemaTooNew`]).
    async fn connect_read_only(&self, url: &str) -> Result<Arc<dyn Store>, StoreError>;

    /// Open the store `url` names read-write, as
    /// [`connect`](Backend::connect) does, and say which schema version it
    /// found there before migrating: `None` when there was no schema of
    /// this backend yet and one was created.
    async fn connect_found(&self, url: &str) -> Result<(Arc<dyn Store>, Option<u32>), StoreError>;
}

/// A backend a program was built without: the schemes it would open and
/// the Cargo feature that builds it, so that such a URL is refused with
/// the feature to turn on rather than as an unknown scheme.
#[derive(Debug, Clone, Copy)]
pub struct NotBuilt {
    /// The URL schemes the missing backend opens.
    pub schemes: &'static [&'static str],
    /// The feature that builds it: `"redis"`.
    pub feature: &'static str,
}

/// The backends a program was built with, picked by a URL's scheme.
///
/// A `const` value, so that a program keeps its table in a `static`.
#[derive(Clone, Copy)]
pub struct Backends {
    installed: &'static [&'static dyn Backend],
    not_built: &'static [NotBuilt],
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backends")
            .field(
                "installed",
                &self.installed.iter().map(|b| b.name()).collect::<Vec<_>>(),
            )
            .field("not_built", &self.not_built)
            .finish()
    }
}

impl Backends {
    /// A table of the backends `installed`, in the order they are asked.
    pub const fn new(installed: &'static [&'static dyn Backend]) -> Backends {
        Backends {
            installed,
            not_built: &[],
        }
    }

    /// The same table, naming the backends this build lacks.
    pub const fn not_built(self, not_built: &'static [NotBuilt]) -> Backends {
        Backends { not_built, ..self }
    }

    /// The installed backends.
    pub fn installed(&self) -> &'static [&'static dyn Backend] {
        self.installed
    }

    /// The backend that opens `url`'s scheme.
    ///
    /// A scheme of a backend this build lacks is a
    /// [`StoreError::NotBuilt`] naming the feature; any other is a
    /// [`StoreError::UnknownScheme`] listing the schemes it has.
    pub fn backend_for(&self, url: &str) -> Result<&'static dyn Backend, StoreError> {
        let scheme = scheme(url);
        if let Some(backend) = self
            .installed
            .iter()
            .find(|b| b.url_schemes().contains(&scheme))
        {
            return Ok(*backend);
        }
        if let Some(missing) = self.not_built.iter().find(|m| m.schemes.contains(&scheme)) {
            return Err(StoreError::NotBuilt {
                store: redact(url),
                feature: missing.feature,
            });
        }
        Err(StoreError::UnknownScheme {
            store: redact(url),
            expected: self.expected(),
        })
    }

    /// Open the store `url` names (see [`Backend::connect`]).
    pub async fn connect(&self, url: &str) -> Result<Arc<dyn Store>, StoreError> {
        let url = url.trim();
        self.backend_for(url)?.connect(url).await
    }

    /// Open the store `url` names for reading only (see
    /// [`Backend::connect_read_only`]).
    pub async fn connect_read_only(&self, url: &str) -> Result<Arc<dyn Store>, StoreError> {
        let url = url.trim();
        self.backend_for(url)?.connect_read_only(url).await
    }

    /// Open the store `url` names read-write, which creates its schema or
    /// migrates it, close it, and say what changed. A store that keeps
    /// nothing between processes has nothing to migrate
    /// ([`StoreError::NothingToMigrate`]).
    pub async fn migrate(&self, url: &str) -> Result<Migration, StoreError> {
        let url = url.trim();
        let backend = self.backend_for(url)?;
        let Some(to) = backend.schema_version() else {
            return Err(StoreError::NothingToMigrate { store: redact(url) });
        };
        let (store, from) = backend.connect_found(url).await?;
        let migration = Migration {
            store: store.describe(),
            from,
            to,
        };
        store.close().await;
        Ok(migration)
    }

    /// Open the store named by the `IDEM_STORE` environment variable, or
    /// `default` when it is unset or empty.
    pub async fn from_env(&self, default: &str) -> Result<Arc<dyn Store>, StoreError> {
        match std::env::var(STORE_ENV) {
            Ok(url) if !url.trim().is_empty() => self.connect(&url).await,
            Ok(_) | Err(std::env::VarError::NotPresent) => self.connect(default).await,
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(StoreError::EnvNotUnicode { var: STORE_ENV })
            }
        }
    }

    /// What the error for an unknown scheme lists: one example URL per
    /// installed backend, as `memory:, sqlite://PATH or redis://HOST`.
    fn expected(&self) -> String {
        let examples: Vec<&str> = self.installed.iter().map(|b| b.url_example()).collect();
        match examples.split_last() {
            None => String::new(),
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        }
    }
}

/// `url`'s scheme: what comes before its first `:`.
fn scheme(url: &str) -> &str {
    url.split(':').next().unwrap_or_default()
}

/// The in-memory store as a backend: `memory:` (or `memory://`), nothing
/// kept between processes.
#[derive(Debug, Clone, Copy)]
pub struct Memory;

/// The in-memory backend, for tables: `&MEMORY`.
pub const MEMORY: Memory = Memory;

impl Memory {
    fn check(url: &str) -> Result<(), StoreError> {
        if matches!(url, "memory:" | "memory://") {
            Ok(())
        } else {
            Err(StoreError::InvalidUrl {
                store: redact(url),
                reason: "a memory store takes no path or options: write `memory:`".into(),
            })
        }
    }
}

#[async_trait]
impl Backend for Memory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn url_schemes(&self) -> &'static [&'static str] {
        &["memory"]
    }

    fn url_example(&self) -> &'static str {
        "memory:"
    }

    fn schema_version(&self) -> Option<u32> {
        None
    }

    async fn connect(&self, url: &str) -> Result<Arc<dyn Store>, StoreError> {
        Memory::check(url)?;
        Ok(Arc::new(MemoryStore::new()))
    }

    async fn connect_read_only(&self, url: &str) -> Result<Arc<dyn Store>, StoreError> {
        Memory::check(url)?;
        Err(StoreError::NoStore {
            store: "memory".into(),
        })
    }

    async fn connect_found(&self, url: &str) -> Result<(Arc<dyn Store>, Option<u32>), StoreError> {
        Ok((self.connect(url).await?, None))
    }
}

/// Declares the [`Backend`] of a store type that opens by URL, as the
/// SQLite, Redis and PostgreSQL stores do: a unit struct (with the
/// attributes and docs written before `struct`) whose
/// [`connect`](Backend::connect) and
/// [`connect_read_only`](Backend::connect_read_only) are the store
/// type's functions of those names (`async fn(&str) -> Result<Self,
/// StoreError>`), and whose [`connect_found`](Backend::connect_found)
/// reports the store's `schema_found()`.
///
/// ```text
/// idem_runtime::url_backend! {
///     /// The SQLite backend.
///     pub struct Sqlite for SqliteStore {
///         name: "sqlite",
///         url_schemes: &["sqlite"],
///         url_example: "sqlite://PATH",
///         schema_version: SCHEMA_VERSION,
///     }
/// }
/// ```
#[macro_export]
macro_rules! url_backend {
    (
        $(#[$attr:meta])*
        $vis:vis struct $backend:ident for $store:ty {
            name: $name:expr,
            url_schemes: $schemes:expr,
            url_example: $example:expr,
            schema_version: $version:expr $(,)?
        }
    ) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy)]
        $vis struct $backend;

        #[$crate::__macro_support::async_trait]
        impl $crate::store::backend::Backend for $backend {
            fn name(&self) -> &'static str {
                $name
            }

            fn url_schemes(&self) -> &'static [&'static str] {
                $schemes
            }

            fn url_example(&self) -> &'static str {
                $example
            }

            fn schema_version(&self) -> ::core::option::Option<u32> {
                ::core::option::Option::Some($version)
            }

            async fn connect(&self, url: &str) -> $crate::__macro_support::Opened {
                ::core::result::Result::Ok(::std::sync::Arc::new(<$store>::connect(url).await?))
            }

            async fn connect_read_only(&self, url: &str) -> $crate::__macro_support::Opened {
                let store = <$store>::connect_read_only(url).await?;
                ::core::result::Result::Ok(::std::sync::Arc::new(store))
            }

            async fn connect_found(
                &self,
                url: &str,
            ) -> ::core::result::Result<
                (
                    ::std::sync::Arc<dyn $crate::store::Store>,
                    ::core::option::Option<u32>,
                ),
                $crate::store::StoreError,
            > {
                let store = <$store>::connect(url).await?;
                let found = store.schema_found();
                ::core::result::Result::Ok((::std::sync::Arc::new(store), found))
            }
        }
    };
}

/// The longest lease or TTL the remote stores write, in milliseconds:
/// 2^52 ms, about 142,000 years. Longer spans are cut to it, so that the
/// server's `now + span` stays an exact integer (Redis scripts compute in
/// doubles and print with `%d`; PostgreSQL's `bigint` overflows).
pub const MAX_SPAN_MILLIS: u64 = 1 << 52;

/// `span` in milliseconds, at most [`MAX_SPAN_MILLIS`].
pub fn span_millis(span: Duration) -> u64 {
    span.as_millis().min(u128::from(MAX_SPAN_MILLIS)) as u64
}
