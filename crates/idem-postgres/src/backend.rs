//! The PostgreSQL store as a [`Backend`]: `postgres://` and
//! `postgresql://`; a URL whose `sslmode` demands TLS is refused (no TLS
//! in this build).

use std::sync::Arc;

use async_trait::async_trait;
use idem_runtime::store::backend::Backend;
use idem_runtime::store::{redact, Store, StoreError};

use crate::{PostgresStore, SCHEMA_VERSION};

/// The PostgreSQL backend, for a table of
/// [`Backends`](idem_runtime::store::backend::Backends): `&idem_postgres::BACKEND`.
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

/// The PostgreSQL backend.
pub const BACKEND: Postgres = Postgres;

/// A URL whose `sslmode` demands TLS (`require`, `verify-ca`,
/// `verify-full`), which this build cannot speak, is refused before any
/// connection; `prefer` falls back to plain text, as tokio-postgres does
/// without a TLS connector.
fn plain(url: &str) -> Result<&str, StoreError> {
    // Every `?`- or `&`-separated part: a password holding `?`, `@` or `&`
    // cannot hide the query, at worst it refuses a URL it need not.
    let requires_tls = url
        .split(['?', '&'])
        .skip(1)
        .any(|param| match param.split_once('=') {
            Some((key, mode)) if key.eq_ignore_ascii_case("sslmode") => matches!(
                mode.to_ascii_lowercase().as_str(),
                "require" | "verify-ca" | "verify-full" | "verify_ca" | "verify_full"
            ),
            _ => false,
        });
    if requires_tls {
        return Err(StoreError::TlsUnsupported {
            store: redact(url),
            backend: "PostgreSQL",
        });
    }
    Ok(url)
}

#[async_trait]
impl Backend for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn url_schemes(&self) -> &'static [&'static str] {
        &["postgres", "postgresql"]
    }

    fn url_example(&self) -> &'static str {
        "postgres://HOST/DB"
    }

    fn schema_version(&self) -> Option<u32> {
        Some(SCHEMA_VERSION)
    }

    async fn connect(&self, url: &str) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(PostgresStore::connect(plain(url)?).await?))
    }

    async fn connect_read_only(&self, url: &str) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(
            PostgresStore::connect_read_only(plain(url)?).await?,
        ))
    }

    async fn connect_found(&self, url: &str) -> Result<(Arc<dyn Store>, Option<u32>), StoreError> {
        let store = PostgresStore::connect(plain(url)?).await?;
        let found = store.schema_found();
        Ok((Arc::new(store), found))
    }
}
