//! SQLite's failures as [`StoreError`]s.

use rusqlite::ffi;

use crate::shared::Shared;
use idem_runtime::store::{Cause, StoreError};

impl Shared {
    pub(super) fn closed_error(&self) -> StoreError {
        StoreError::Closed {
            store: self.name.clone(),
        }
    }

    pub(super) fn unavailable(&self, cause: impl Into<Cause>) -> StoreError {
        StoreError::Unavailable {
            store: self.name.clone(),
            cause: cause.into(),
        }
    }

    /// The typed error for a SQLite failure; `e` stays its source.
    pub(super) fn sql(&self, e: rusqlite::Error) -> StoreError {
        let store = self.name.clone();
        match e.sqlite_error_code() {
            Some(ffi::ErrorCode::DiskFull) => StoreError::Full {
                store,
                cause: Cause::from_error(e),
            },
            Some(ffi::ErrorCode::ReadOnly) => StoreError::ReadOnly {
                store,
                cause: Cause::from_error(e),
            },
            Some(ffi::ErrorCode::NotADatabase) => StoreError::Unavailable {
                store,
                cause: Cause::with_source(
                    format!(
                        "the file is not a SQLite database ({e}); it was left untouched — point the store at another path"
                    ),
                    e,
                ),
            },
            Some(ffi::ErrorCode::DatabaseBusy | ffi::ErrorCode::DatabaseLocked) => {
                StoreError::Unavailable {
                    store,
                    cause: Cause::with_source(
                        format!(
                            "the database stayed locked by another connection for longer than the busy timeout ({:?}): {e}",
                            self.busy_timeout
                        ),
                        e,
                    ),
                }
            }
            _ => StoreError::Unavailable {
                store,
                cause: Cause::from_error(e),
            },
        }
    }
}
