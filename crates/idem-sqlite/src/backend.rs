//! The SQLite store as a [`Backend`]: `sqlite://PATH`.

use std::sync::Arc;

use async_trait::async_trait;
use idem_runtime::store::backend::Backend;
use idem_runtime::store::{Store, StoreError};

use crate::{SqliteStore, SCHEMA_VERSION};

/// The SQLite backend, for a table of [`Backends`](idem_runtime::store::backend::Backends):
/// `&idem_sqlite::BACKEND`.
#[derive(Debug, Clone, Copy)]
pub struct Sqlite;

/// The SQLite backend.
pub const BACKEND: Sqlite = Sqlite;

#[async_trait]
impl Backend for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn url_schemes(&self) -> &'static [&'static str] {
        &["sqlite"]
    }

    fn url_example(&self) -> &'static str {
        "sqlite://PATH"
    }

    fn schema_version(&self) -> Option<u32> {
        Some(SCHEMA_VERSION)
    }

    async fn connect(&self, url: &str) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(SqliteStore::connect(url).await?))
    }

    async fn connect_read_only(&self, url: &str) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(SqliteStore::connect_read_only(url).await?))
    }

    async fn connect_found(&self, url: &str) -> Result<(Arc<dyn Store>, Option<u32>), StoreError> {
        let store = SqliteStore::connect(url).await?;
        let found = store.schema_found();
        Ok((Arc::new(store), found))
    }
}
