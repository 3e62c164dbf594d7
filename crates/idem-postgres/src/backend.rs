//! The PostgreSQL store as a [`Backend`](idem_runtime::store::backend::Backend):
//! `postgres://` and `postgresql://`, with or without TLS as `sslmode` says.

use crate::{PostgresStore, SCHEMA_VERSION};

idem_runtime::url_backend! {
    /// The PostgreSQL backend, for a table of
    /// [`Backends`](idem_runtime::store::backend::Backends): `&idem_postgres::BACKEND`.
    pub struct Postgres for PostgresStore {
        name: "postgres",
        url_schemes: &["postgres", "postgresql"],
        url_example: "postgres://HOST/DB",
        schema_version: SCHEMA_VERSION,
    }
}

/// The PostgreSQL backend.
pub const BACKEND: Postgres = Postgres;
