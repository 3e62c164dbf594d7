//! The PostgreSQL store as a [`Backend`]: `postgres://` and
//! `postgresql://`, with or without TLS as `sslmode` says.

use std::sync::Arc;

use async_trait::async_trait;
use idem_runtime::store::backend::Backend;
use idem_runtime::store::{Store, StoreError};

use crate::{PostgresStore, SCHEMA_VERSION};

/// The PostgreSQL backend, for a table of
/// [`Backends`](idem_runtime::store::backend::Backends): `&idem_postgres::BACKEND`.
#[derive(Debug, Clone, Copy)]
pub struct Postgres;

/// The PostgreSQL backend.
pub const BACKEND: Postgres = Postgres;

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
        Ok(Arc::new(PostgresStore::connect(url).await?))
    }

    async fn connect_read_only(&self, url: &str) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(PostgresStore::connect_read_only(url).await?))
    }

    async fn connect_found(&self, url: &str) -> Result<(Arc<dyn Store>, Option<u32>), StoreError> {
        let store = PostgresStore::connect(url).await?;
        let found = store.schema_found();
        Ok((Arc::new(store), found))
    }
}
