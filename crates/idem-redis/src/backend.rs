//! The Redis store as a [`Backend`](idem_runtime::store::backend::Backend):
//! `redis://` and `redis+cluster://`, and over TLS `rediss://` and
//! `rediss+cluster://`.

use crate::{RedisStore, SCHEMA_VERSION};

idem_runtime::url_backend! {
    /// The Redis backend, for a table of [`Backends`](idem_runtime::store::backend::Backends):
    /// `&idem_redis::BACKEND`.
    pub struct Redis for RedisStore {
        name: "redis",
        url_schemes: &["redis", "redis+cluster", "rediss", "rediss+cluster"],
        url_example: "redis://HOST",
        schema_version: SCHEMA_VERSION,
    }
}

/// The Redis backend.
pub const BACKEND: Redis = Redis;
