//! How a [`RedisStore`](crate::RedisStore) is opened as its URL says: the
//! store's constructors, which connect, check (and migrate) the data
//! layout, load the scripts and start the subscriber that wakes waiters.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::connection::{invalid_url, Connection};
use crate::notify::{self, SAFETY_POLL};
use crate::options::{self, RedisOptions};
use crate::scripts::Scripts;
use crate::{tls, RedisStore};
use idem_runtime::store::backend::Waiters;
use idem_runtime::store::redact;
use idem_runtime::store::{BadOption, Cause, StoreError};

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("store", &self.name)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.subscriber.abort();
    }
}

impl RedisStore {
    /// Connect to `url` with default options: one server,
    /// `redis://[user:password@]host[:port][/db][?prefix=NAME]`, or a
    /// cluster, `redis+cluster://[user:password@]host:port[,host:port…][?prefix=NAME]`
    /// (see the [module docs](super)).
    pub async fn connect(url: &str) -> Result<RedisStore, StoreError> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connect to `url`, check the data layout version, load the scripts and
    /// start the subscriber that wakes waiters. Options in the URL's query
    /// (`prefix`, `replicas`) override those of `options`.
    ///
    /// Data written by an older idem is migrated first (see
    /// [`SCHEMA_VERSION`](crate::SCHEMA_VERSION); on a single server only).
    ///
    /// Fails with [`StoreError::Unavailable`] when the server cannot be
    /// reached, [`StoreError::SchemaTooNew`] when a newer idem wrote the
    /// data, [`StoreError::InvalidUrl`] for a malformed URL (the driver's
    /// parser's error is its source), [`StoreError::UnknownOption`] for an
    /// unknown URL option and [`StoreError::BadOption`] for a value of
    /// `replicas` or `prefix` it cannot take.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<RedisStore, StoreError> {
        Self::open(url, options, false).await
    }

    /// Connect to `url` for reading only, with default options. See
    /// [`RedisStore::connect_read_only_with`].
    pub async fn connect_read_only(url: &str) -> Result<RedisStore, StoreError> {
        Self::connect_read_only_with(url, RedisOptions::default()).await
    }

    /// Connect to `url` for reading only: the layout version under
    /// `PREFIX:schema` is read, never written or migrated, and every
    /// operation but reads ([`StoreExt::get`](idem_runtime::store::StoreExt::get), [`StoreExt::scan`](idem_runtime::store::StoreExt::scan),
    /// [`StoreExt::scan_open`](idem_runtime::store::StoreExt::scan_open),
    /// [`StoreExt::wait`](idem_runtime::store::StoreExt::wait), [`StoreExt::now`](idem_runtime::store::StoreExt::now)) fails with [`StoreError::ReadOnly`]
    /// before it reaches the server. Only idem's scripts are loaded into
    /// the server's script cache, which holds no data.
    ///
    /// Every store connected read-write writes the layout version first,
    /// so a prefix without it was never an idem store's:
    /// [`StoreError::NotAnIdemStore`]. Data older than [`OLDEST_READABLE`](crate::OLDEST_READABLE)
    /// is [`StoreError::SchemaTooOld`], newer than [`SCHEMA_VERSION`](crate::SCHEMA_VERSION)
    /// [`StoreError::SchemaTooNew`]; otherwise it fails as
    /// [`RedisStore::connect_with`] does.
    pub async fn connect_read_only_with(
        url: &str,
        options: RedisOptions,
    ) -> Result<RedisStore, StoreError> {
        Self::open(url, options, true).await
    }

    /// Whether this store was connected read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The layout version the data had when this store connected: `None`
    /// when this store wrote the first, an older version than
    /// [`SCHEMA_VERSION`](crate::SCHEMA_VERSION) when a store connected read-write migrated it (a
    /// store connected read-only never does).
    pub fn schema_found(&self) -> Option<u32> {
        self.schema_found
    }

    async fn open(
        url: &str,
        options: RedisOptions,
        read_only: bool,
    ) -> Result<RedisStore, StoreError> {
        let name = redact(url);
        let target = options::parse(url, &name)?;
        let mut options = match target.prefix.clone() {
            Some(prefix) => options.prefix(prefix),
            None => options,
        };
        if let Some(replicas) = target.replicas {
            options = options.wait_for_replicas(replicas, Duration::from_secs(1));
        }
        if options.prefix.is_empty() || options.prefix.contains(['{', '}']) {
            return Err(BadOption {
                store: name,
                option: "prefix",
                value: options.prefix,
                expected: "a key prefix: non-empty, with no braces",
            }
            .into());
        }
        let certificates = match &target.tls {
            Some(files) => Some(tls::certificates(files, &name)?),
            None => None,
        };
        let unavailable = |e: redis::RedisError| StoreError::Unavailable {
            store: name.clone(),
            cause: Cause::from_error(e),
        };
        // Until the scripts are loaded, a failure may be TLS's: a
        // certificate that does not verify, or a URL that disagrees with
        // the server about TLS.
        let connecting = async {
            let mut conn = Connection::open(
                &target.servers,
                certificates.as_ref(),
                &options,
                unavailable,
                &name,
            )
            .await?;
            let schema_found =
                Self::check_layout(&mut conn, &options.prefix, read_only, &name).await?;
            let indexed_since = Self::read_indexed_since(&mut conn, &options.prefix)
                .await
                .map_err(unavailable)?;
            let scripts = Arc::new(Scripts::new());
            for script in scripts.all() {
                conn.load(script).await.map_err(unavailable)?;
            }
            Ok((conn, schema_found, indexed_since, scripts))
        };
        let (conn, schema_found, indexed_since, scripts) = match connecting.await {
            Ok(connected) => connected,
            Err(e) => return Err(tls::diagnose(e, &target, options.connection_timeout).await),
        };

        let waiters = Arc::new(Waiters::new(SAFETY_POLL));
        let channel = format!("{}:done", options.prefix);
        let (subscribed, ready) = tokio::sync::oneshot::channel();
        let subscriber = tokio::spawn(
            notify::subscriber(
                &target.servers,
                certificates,
                channel.clone(),
                waiters.clone(),
                options.connection_timeout,
                subscribed,
            )
            .map_err(|e| invalid_url(&name, e))?,
        );
        // Waiters poll as a safety net, so a slow subscriber is no error;
        // but give it a moment so the first waiters are woken promptly.
        let _ = tokio::time::timeout(options.connection_timeout, ready).await;

        Ok(RedisStore {
            trips: conn.trips.clone(),
            indexed_since,
            conn: Mutex::new(Some(conn)),
            scripts,
            name,
            prefix: options.prefix,
            channel,
            waiters,
            subscriber,
            replicas: options.replicas,
            audit_retention: options.audit_retention,
            read_only,
            schema_found,
            // A store connected read-write migrated older data on
            // connecting; one connected read-only reads it as it is.
            open_indexed: !read_only
                || schema_found.is_none_or(|v| v >= crate::schema::OPEN_INDEXED_SINCE),
        })
    }

    /// How many requests this store has sent to its server and waited for
    /// since it connected: one per command, script or pipeline (a batch
    /// sent to a cluster's nodes at once counts once). Pub/sub, which wakes
    /// waiters, is not counted. For measuring what an operation costs.
    pub fn round_trips(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }

    /// [`StoreError::ReadOnly`] on a store connected read-only (after
    /// [`StoreError::Closed`] once closed).
    pub(super) fn writable(&self) -> Result<(), StoreError> {
        self.conn()?;
        match self.read_only {
            false => Ok(()),
            true => Err(StoreError::ReadOnly {
                store: self.name.clone(),
                cause:
                    "it was connected read-only, for reading; connect it read-write to change it"
                        .into(),
            }),
        }
    }

    /// A handle on the shared connection, or [`StoreError::Closed`].
    pub(super) fn conn(&self) -> Result<Connection, StoreError> {
        self.conn
            .lock()
            .expect("not poisoned")
            .clone()
            .ok_or_else(|| StoreError::Closed {
                store: self.name.clone(),
            })
    }
}
