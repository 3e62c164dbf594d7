//! Which store a command works on, and opening it.
//!
//! The URL comes from `--store`, else `IDEM_STORE` (clap reads both), else
//! `sqlite://idem.db`. A SQLite file that does not exist is refused rather
//! than created: an operator who runs `idem ls` in the wrong directory
//! should learn that, not get an empty store. Error messages show the URL
//! with its password hidden.
//!
//! Commands that only read ([`open_read_only`]: `ls`, `show`, `stats`)
//! change nothing in the store, and refuse what is not an idem store or
//! needs migrating; the others ([`open`]) open it read-write, which
//! migrates an older schema.

use std::sync::Arc;

use idem_runtime::operator::Operator;
use idem_runtime::store::url::{redact, sqlite_file};
use idem_runtime::store::Store;

use crate::cli::DEFAULT_STORE;
use crate::error::CliError;

/// The URL to open: `given` (from `--store` or `IDEM_STORE`) unless empty.
pub(crate) fn url(given: Option<&str>) -> &str {
    match given.map(str::trim) {
        Some(url) if !url.is_empty() => url,
        _ => DEFAULT_STORE,
    }
}

/// Open the store at `url` read-write, for operator actions that change
/// records (an older schema is migrated).
pub(crate) async fn open(url: &str) -> Result<Operator, CliError> {
    refuse_missing_file(url)?;
    let store: Arc<dyn Store> = idem::store::connect(url).await?;
    Ok(Operator::new(store))
}

/// Open the store at `url` for reading only, for every command that only
/// reads: nothing in the store is created, migrated or changed, and a
/// database that is not an idem store is refused.
pub(crate) async fn open_read_only(url: &str) -> Result<Operator, CliError> {
    refuse_missing_file(url)?;
    let store: Arc<dyn Store> = idem::store::connect_read_only(url).await?;
    Ok(Operator::new(store))
}

/// A SQLite URL naming a file that does not exist is refused: no command
/// creates a store.
pub(crate) fn refuse_missing_file(url: &str) -> Result<(), CliError> {
    if let Some(path) = sqlite_path(url) {
        if !path.is_empty() && !std::path::Path::new(path).exists() {
            return Err(CliError::NoSqliteFile {
                url: redact(url),
                path: path.to_owned(),
            });
        }
    }
    Ok(())
}

/// A SQLite URL naming a file in a directory that does not exist is
/// refused: `idem migrate` creates the file, not the directories above it
/// (a mistyped path should be seen, not made).
pub(crate) fn refuse_missing_directory(url: &str) -> Result<(), CliError> {
    let Some(path) = sqlite_path(url).filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let path = std::path::Path::new(path);
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    if !path.exists() && !dir.is_dir() {
        return Err(CliError::NoSqliteDirectory {
            url: redact(url),
            dir: dir.display().to_string(),
        });
    }
    Ok(())
}

/// The file a `sqlite:` URL names, as `SqliteStore::connect` reads it.
fn sqlite_path(url: &str) -> Option<&str> {
    sqlite_file(url).map(|(path, _)| path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_defaults_to_the_demos_file() {
        assert_eq!(url(None), "sqlite://idem.db");
        assert_eq!(url(Some("  ")), "sqlite://idem.db");
        assert_eq!(url(Some("redis://cache")), "redis://cache");
    }

    #[test]
    fn sqlite_urls_name_their_file() {
        assert_eq!(sqlite_path("sqlite://idem.db"), Some("idem.db"));
        assert_eq!(
            sqlite_path("sqlite:///var/lib/idem.db?synchronous=normal"),
            Some("/var/lib/idem.db")
        );
        assert_eq!(sqlite_path("redis://cache"), None);
    }

    #[tokio::test]
    async fn a_missing_sqlite_file_is_not_created() {
        let path = std::env::temp_dir().join(format!("idem-cli-missing-{}.db", std::process::id()));
        let url = format!("sqlite://{}", path.display());
        let error = open(&url).await.unwrap_err();
        assert!(
            error.line(false).contains("does not exist"),
            "{}",
            error.line(false)
        );
        assert!(!path.exists());
    }
}
