//! PostgreSQL failures as [`StoreError`]s.

use tokio_postgres::error::SqlState;

use crate::PostgresStore;
use idem_runtime::store::{Cause, StoreError};

/// The typed error for a PostgreSQL failure; `e` stays its source.
pub(super) fn error(store: &str, e: tokio_postgres::Error) -> StoreError {
    let store = store.to_owned();
    let Some(db) = e.as_db_error() else {
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        return StoreError::Unavailable {
            store,
            cause: Cause::with_source(message, e),
        };
    };
    let message = format!("{} ({})", db.message(), db.code().code());
    let code = db.code().clone();
    let cause = Cause::with_source(message, e);
    match code {
        SqlState::DISK_FULL | SqlState::OUT_OF_MEMORY | SqlState::INSUFFICIENT_RESOURCES => {
            StoreError::Full { store, cause }
        }
        SqlState::READ_ONLY_SQL_TRANSACTION => StoreError::ReadOnly { store, cause },
        _ => StoreError::Unavailable { store, cause },
    }
}

impl PostgresStore {
    pub(super) fn error(&self, e: tokio_postgres::Error) -> StoreError {
        error(&self.name, e)
    }

    pub(super) fn protocol(&self, what: &str) -> StoreError {
        StoreError::Unavailable {
            store: self.name.clone(),
            cause: what.into(),
        }
    }
}
