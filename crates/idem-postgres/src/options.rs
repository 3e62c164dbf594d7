//! How a [`PostgresStore`](crate::PostgresStore) connects: its options,
//! and what its URL says (the driver's configuration and idem's own
//! `schema` parameter).

use std::str::FromStr;
use std::time::Duration;

use crate::connector::RustlsConnector;
use tokio_postgres::Config;

use crate::tls::{take_tls, TlsSettings};

use idem_runtime::audit::DEFAULT_AUDIT_RETENTION;
use idem_runtime::store::redact;
use idem_runtime::store::url::split_query;
use idem_runtime::store::{BadOption, Cause, StoreError};

/// How to connect a [`PostgresStore`](crate::PostgresStore).
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    pub(super) pool_size: u32,
    pub(super) connect_timeout: Duration,
    pub(super) audit_retention: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            audit_retention: DEFAULT_AUDIT_RETENTION,
        }
    }
}

impl PostgresOptions {
    /// How many connections the pool keeps at most (default 16).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How long connecting, or waiting for a pooled connection, may take
    /// before the operation fails (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Keep audit events for `retention` (default
    /// [`DEFAULT_AUDIT_RETENTION`]): [`StoreExt::sweep`] deletes older ones,
    /// judged by the server's clock.
    ///
    /// [`StoreExt::sweep`]: idem_runtime::store::StoreExt::sweep
    pub fn audit_retention(mut self, retention: Duration) -> Self {
        self.audit_retention = retention;
        self
    }
}

/// `url` without its `schema` query parameter, and that parameter's
/// value, checked: a PostgreSQL identifier idem can use unquoted and
/// unambiguous (lower-case ASCII letters, digits and `_`, not starting with
/// a digit or `pg_`, at most 63 bytes).
fn take_schema(url: &str) -> Result<(String, Option<String>), StoreError> {
    let Some((base, query)) = split_query(url) else {
        return Ok((url.to_owned(), None));
    };
    let mut schema = None;
    let mut rest = Vec::new();
    for param in query.split('&') {
        match param.split_once('=') {
            Some(("schema", value)) => {
                if schema.replace(value).is_some() {
                    return Err(StoreError::InvalidUrl {
                        store: redact(url),
                        reason: "the URL names the schema twice; write ?schema=NAME once".into(),
                    });
                }
            }
            _ => rest.push(param),
        }
    }
    if let Some(name) = schema {
        let valid = !name.is_empty()
            && name.len() <= 63
            && !name.starts_with("pg_")
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(BadOption {
                store: redact(url),
                option: "schema",
                value: name.to_owned(),
                expected: "a usable schema name: lower-case letters, digits and _ (not first \
                           a digit, not starting with pg_, at most 63 bytes)",
            }
            .into());
        }
    }
    let url = match rest.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", rest.join("&")),
    };
    Ok((url, schema.map(str::to_owned)))
}

/// What a store's URL says: the driver's configuration, the TLS
/// connector and settings, the URL's name for messages (password hidden)
/// and the PostgreSQL schema it names.
pub(super) struct Target {
    pub(super) config: Config,
    pub(super) connector: RustlsConnector,
    pub(super) tls: TlsSettings,
    pub(super) name: String,
    pub(super) schema: Option<String>,
}

/// The [`Target`] of `url`; `read_only` makes every session's
/// transactions read-only.
pub(super) fn config(
    url: &str,
    options: &PostgresOptions,
    read_only: bool,
) -> Result<Target, StoreError> {
    let name = redact(url);
    let (driver_url, schema) = take_schema(url)?;
    let (driver_url, tls) = take_tls(&driver_url, &name)?;
    let mut config = Config::from_str(&driver_url).map_err(|e| StoreError::InvalidUrl {
        store: name.clone(),
        reason: Cause::with_source(format!("bad PostgreSQL URL: {e}"), e),
    })?;
    // Every connection, pooled and listening, resolves idem's unqualified
    // names in the schema, and a read-only store's sessions refuse writes;
    // `options` the URL already gives are kept.
    let mut settings = Vec::new();
    if let Some(schema) = &schema {
        settings.push(format!("-c search_path={schema}"));
    }
    if read_only {
        settings.push("-c default_transaction_read_only=on".to_owned());
    }
    if !settings.is_empty() {
        let settings = settings.join(" ");
        let options = match config.get_options() {
            Some(given) => format!("{given} {settings}"),
            None => settings,
        };
        config.options(&options);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(options.connect_timeout);
    }
    config.application_name("idem");
    config.ssl_mode(tls.driver_mode());
    let connector = tls.connector(&name)?;
    Ok(Target {
        config,
        connector,
        tls,
        name,
        schema,
    })
}
