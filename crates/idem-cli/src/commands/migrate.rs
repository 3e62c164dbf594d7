//! `idem migrate`: bring a store's schema to this idem's version. Commands
//! that only read never migrate (they refuse an older schema they cannot
//! read); this one opens the store read-write, which does.

use idem_runtime::store::url::Migration;
use serde::Serialize;

use super::Output;
use crate::error::CliError;
use crate::store;

/// `idem migrate --json`.
#[derive(Debug, Serialize)]
struct MigrationJson<'a> {
    /// The store, password hidden.
    store: &'a str,
    /// The schema version found; `null` when there was none and it was
    /// created.
    from: Option<u32>,
    /// The schema version now.
    to: u32,
}

/// `idem migrate`: migrate the store at `url`, saying from which version to
/// which. A SQLite file that does not exist is created (the command that
/// makes a new team's first store), in a directory that must exist.
pub(super) async fn run(url: &str, out: &Output) -> Result<(), CliError> {
    store::refuse_missing_directory(url)?;
    let migration = idem::store::migrate(url).await?;
    if out.json {
        return out.json(&MigrationJson {
            store: &migration.store,
            from: migration.from,
            to: migration.to,
        });
    }
    out.text(&format!("{}\n", said(&migration)))
}

/// The migration, said for people.
fn said(migration: &Migration) -> String {
    let Migration {
        store, from, to, ..
    } = migration;
    match from {
        None => format!("created the schema of {store} at version {to}"),
        Some(from) if from == to => {
            format!("{store} is at schema version {to} already; nothing to migrate")
        }
        Some(from) => format!("migrated {store} from schema version {from} to {to}"),
    }
}
