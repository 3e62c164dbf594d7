//! The SQLite store as a [`Backend`](idem_runtime::store::backend::Backend):
//! `sqlite://PATH`.

use crate::{SqliteStore, SCHEMA_VERSION};

idem_runtime::url_backend! {
    /// The SQLite backend, for a table of [`Backends`](idem_runtime::store::backend::Backends):
    /// `&idem_sqlite::BACKEND`.
    pub struct Sqlite for SqliteStore {
        name: "sqlite",
        url_schemes: &["sqlite"],
        url_example: "sqlite://PATH",
        schema_version: SCHEMA_VERSION,
    }
}

/// The SQLite backend.
pub const BACKEND: Sqlite = Sqlite;
