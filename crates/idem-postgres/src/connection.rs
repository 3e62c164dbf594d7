//! Connecting a [`PostgresStore`]: its constructors, the first
//! connection, and the [`bb8`] pool of connections with every statement
//! prepared.

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::connector::RustlsConnector;
use tokio_postgres::{Client, Config};

use crate::error::error;
use crate::listener::{listen, SAFETY_POLL};
use crate::options::{config, PostgresOptions, Target};
use crate::schema::{check_read_only, migrate};
use crate::statements::{Conn, SQL};
use crate::{tls, PostgresStore};
use idem_runtime::store::backend::Waiters;
use idem_runtime::store::StoreError;

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("store", &self.name)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// Opens [`Conn`]s for the pool, and tells it which it holds are closed.
pub(super) struct Manager {
    config: Config,
    tls: RustlsConnector,
    /// The store's name (its URL, password hidden), for errors.
    name: String,
}

async fn open(config: &Config, tls: &RustlsConnector) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(tls.clone()).await?;
    tokio::spawn(async move {
        // Ends when the client is dropped or the server goes away; the
        // client then reports itself closed and the pool drops it.
        let _ = connection.await;
    });
    Ok(client)
}

impl bb8::ManageConnection for Manager {
    type Connection = Conn;
    type Error = StoreError;

    async fn connect(&self) -> Result<Conn, StoreError> {
        self.prepared().await.map_err(|e| error(&self.name, e))
    }

    /// Checked on every checkout, without a round trip: a connection
    /// whose server went away (a restart, an idle timeout, a failover)
    /// while it sat in the pool has ended its driver task, and its client
    /// says it is closed. The pool then drops it and hands out another, or
    /// opens one, so a request is never sent on a connection known to be
    /// dead. (Found dead only when a request is on it, a connection is the
    /// caller's failure: see [`Resend`](crate::statements::Resend).)
    async fn is_valid(&self, conn: &mut Conn) -> Result<(), StoreError> {
        match conn.client.is_closed() {
            false => Ok(()),
            true => Err(StoreError::Unavailable {
                store: self.name.clone(),
                cause: "the pooled connection was closed by the server".into(),
            }),
        }
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.client.is_closed()
    }
}

impl Manager {
    /// A new connection with every statement prepared.
    async fn prepared(&self) -> Result<Conn, tokio_postgres::Error> {
        let client = open(&self.config, &self.tls).await?;
        let sql = &*SQL;
        // Prepared concurrently: the client pipelines them.
        let (
            (claim, claim_relaxed, scan_open_first, scan_open_after),
            (checkpoint, renew, complete, release, replace, remove, get, scan, sweep, now),
        ) = tokio::try_join!(
            async {
                tokio::try_join!(
                    client.prepare(&sql.claim),
                    client.prepare(&sql.claim_relaxed),
                    client.prepare(&sql.scan_open_first),
                    client.prepare(&sql.scan_open_after)
                )
            },
            async {
                tokio::try_join!(
                    client.prepare(&sql.checkpoint),
                    client.prepare(&sql.renew),
                    client.prepare(&sql.complete),
                    client.prepare(&sql.release),
                    client.prepare(&sql.replace),
                    client.prepare(&sql.remove),
                    client.prepare(&sql.get),
                    client.prepare(&sql.scan),
                    client.prepare(&sql.sweep),
                    client.prepare(&sql.now),
                )
            },
        )?;
        Ok(Conn {
            client,
            claim,
            claim_relaxed,
            checkpoint,
            renew,
            complete,
            release,
            replace,
            remove,
            get,
            scan,
            scan_open_first,
            scan_open_after,
            sweep,
            now,
        })
    }
}

impl PostgresStore {
    /// Connect to `url` (`postgres://user[:password]@host[:port]/db`, with
    /// `?schema=NAME` for a schema of idem's own: see the
    /// [module docs](super)) with default options.
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connect to `url`, create or migrate the schema, and start the
    /// listener that wakes waiters.
    ///
    /// Fails with [`StoreError::Unavailable`] when the server cannot be
    /// reached, [`StoreError::SchemaTooNew`] when a newer idem created the
    /// schema, [`StoreError::InvalidUrl`] for a malformed URL (the driver's
    /// parser's error is its source) or one naming the schema twice, and
    /// [`StoreError::BadOption`] for a schema name idem cannot use.
    pub async fn connect_with(
        url: &str,
        options: PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        let target = config(url, &options, false)?;
        let client = first_connection(&target, &options).await?;
        let found = migrate(client, &target.name, target.schema.as_deref()).await?;
        Ok(Self::start(target, &options, found).await)
    }

    /// Connect to `url` for reading only, with default options. See
    /// [`PostgresStore::connect_read_only_with`].
    pub async fn connect_read_only(url: &str) -> Result<PostgresStore, StoreError> {
        Self::connect_read_only_with(url, PostgresOptions::default()).await
    }

    /// Connect to `url` for reading only: nothing is created or migrated,
    /// and every session runs with `default_transaction_read_only = on`,
    /// so the server itself refuses anything that would write, as
    /// [`StoreError::ReadOnly`]. Reads work as on a store connected
    /// read-write.
    ///
    /// Refuses, changing nothing: a database or PostgreSQL schema without
    /// idem's tables and schema version ([`StoreError::NotAnIdemStore`]),
    /// a schema older than [`OLDEST_READABLE`]
    /// ([`StoreError::SchemaTooOld`]) or newer than [`SCHEMA_VERSION`]
    /// ([`StoreError::SchemaTooNew`]); otherwise fails as
    /// [`PostgresStore::connect_with`] does.
    ///
    /// [`OLDEST_READABLE`]: crate::OLDEST_READABLE
    /// [`SCHEMA_VERSION`]: crate::SCHEMA_VERSION
    pub async fn connect_read_only_with(
        url: &str,
        options: PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        let target = config(url, &options, true)?;
        let client = first_connection(&target, &options).await?;
        let found = check_read_only(&client, &target.name, target.schema.as_deref()).await?;
        Ok(Self::start(target, &options, Some(found)).await)
    }

    /// The schema version the database had when this store connected:
    /// `None` when this store created the schema, an older version than
    /// [`SCHEMA_VERSION`] when a store connected read-write migrated it (a
    /// store connected read-only never does).
    ///
    /// [`SCHEMA_VERSION`]: crate::SCHEMA_VERSION
    pub fn schema_found(&self) -> Option<u32> {
        self.schema_found
    }
}

/// The connection that checks (or migrates) the schema. Its failure is
/// the first a TLS problem shows in, and is told as one when it is.
async fn first_connection(
    target: &Target,
    options: &PostgresOptions,
) -> Result<Client, StoreError> {
    let name = &target.name;
    let connected = tokio::time::timeout(
        options.connect_timeout,
        open(&target.config, &target.connector),
    )
    .await
    .map_err(|_| StoreError::Unavailable {
        store: name.to_owned(),
        cause: format!("no connection within {:?}", options.connect_timeout).into(),
    })?;
    match connected {
        Ok(client) => Ok(client),
        Err(e) => Err(tls::diagnose(
            error(name, e),
            &target.tls,
            &target.config,
            options.connect_timeout,
        )
        .await),
    }
}

impl PostgresStore {
    /// The pool and the listener, on a checked schema.
    async fn start(
        target: Target,
        options: &PostgresOptions,
        schema_found: Option<u32>,
    ) -> PostgresStore {
        let Target {
            config,
            connector,
            name,
            ..
        } = target;
        let pool = bb8::Pool::builder()
            .max_size(options.pool_size)
            .connection_timeout(options.connect_timeout)
            // `is_valid` costs no round trip: a connection closed while
            // idle is replaced before a request is sent on it.
            .test_on_check_out(true)
            .build_unchecked(Manager {
                config: config.clone(),
                tls: connector.clone(),
                name: name.clone(),
            });

        let waiters = Arc::new(Waiters::new(SAFETY_POLL));
        let (listening, ready) = tokio::sync::oneshot::channel();
        let listener = tokio::spawn(listen(
            config,
            connector,
            waiters.clone(),
            options.connect_timeout,
            listening,
        ));
        let _ = tokio::time::timeout(options.connect_timeout, ready).await;
        PostgresStore {
            pool: Mutex::new(Some(pool)),
            name,
            schema_found,
            waiters,
            listener,
            audit_retention: options.audit_retention,
        }
    }

    /// A pooled connection, or [`StoreError::Closed`].
    pub(super) async fn conn(&self) -> Result<bb8::PooledConnection<'static, Manager>, StoreError> {
        let pool = self.pool.lock().expect("not poisoned").clone();
        let Some(pool) = pool else {
            return Err(StoreError::Closed {
                store: self.name.clone(),
            });
        };
        pool.get_owned().await.map_err(|e| match e {
            bb8::RunError::User(e) => e,
            bb8::RunError::TimedOut => StoreError::Unavailable {
                store: self.name.clone(),
                cause: "timed out waiting for a connection".into(),
            },
        })
    }
}
