//! The Redis store as a [`Backend`]: `redis://` and `redis+cluster://`,
//! and over TLS `rediss://` and `rediss+cluster://`.

use std::sync::Arc;

use async_trait::async_trait;
use idem_runtime::store::backend::Backend;
use idem_runtime::store::{Store, StoreError};

use crate::{RedisStore, SCHEMA_VERSION};

/// The Redis backend, for a table of [`Backends`](idem_runtime::store::backend::Backends):
/// `&idem_redis::BACKEND`.
#[derive(Debug, Clone, Copy)]
pub struct Redis;

/// The Redis backend.
pub const BACKEND: Redis = Redis;

#[async_trait]
impl Backend for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn url_schemes(&self) -> &'static [&'static str] {
        &["redis", "redis+cluster", "rediss", "rediss+cluster"]
    }

    fn url_example(&self) -> &'static str {
        "redis://HOST"
    }

    fn schema_version(&self) -> Option<u32> {
        Some(SCHEMA_VERSION)
    }

    async fn connect(&self, url: &str) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(RedisStore::connect(url).await?))
    }

    async fn connect_read_only(&self, url: &str) -> Result<Arc<dyn Store>, StoreError> {
        Ok(Arc::new(RedisStore::connect_read_only(url).await?))
    }

    async fn connect_found(&self, url: &str) -> Result<(Arc<dyn Store>, Option<u32>), StoreError> {
        let store = RedisStore::connect(url).await?;
        let found = store.schema_found();
        Ok((Arc::new(store), found))
    }
}
