//! Opening a SQLite store: it reads its own URL, migrates a file of
//! schema version 1, and refuses a newer schema, a file that is not
//! SQLite (keeping the driver's error) and a missing directory.

use std::sync::Arc;

use crate::sqlite_support::{file_at_schema_version, fresh_file, record, version_1_file};
use idem_conformance::random_key;
use idem_runtime::record::{Outcome, OutputJson};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, Store, StoreError};
use idem_sqlite::SqliteStore;
use idem_testkit::store_cases::{
    assert_schema_too_new, driver_error, fingerprint, request, sent, sqlite_schema_version,
};
use idem_testkit::TempDir;
use serde_json::json;

/// The SQLite store reads its own URL, as the Redis and PostgreSQL stores
/// do; `store::connect` only picks it by the scheme.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_reads_its_own_url() {
    let (_dir, path) = fresh_file();
    let url = format!("sqlite://{}?synchronous=normal", path.display());
    let store = SqliteStore::connect(&url).await.unwrap();
    assert_eq!(store.describe(), format!("sqlite:{}", path.display()));
    record(&store, &random_key(), &sent("m-1")).await;
    for (url, says) in [
        ("redis://cache/0", "not a SQLite URL"),
        ("sqlite:", "names no file"),
    ] {
        match SqliteStore::connect(url).await {
            Err(e @ StoreError::InvalidUrl { .. }) => {
                assert!(e.to_string().contains(says), "{url}: {e}")
            }
            other => panic!("{url}: expected InvalidUrl, got {other:?}"),
        }
    }
    match SqliteStore::connect("sqlite://idem.db?journal=off&synchronous=full&wal").await {
        Err(e @ StoreError::UnknownOption(_)) => {
            let StoreError::UnknownOption(unknown) = &e else {
                unreachable!()
            };
            assert_eq!(unknown.backend, "SQLite");
            assert_eq!(unknown.options, ["journal", "wal"]);
            let message = e.to_string();
            assert!(
                message.contains(r#"unknown SQLite options "journal", "wal""#),
                "{message}"
            );
        }
        other => panic!("expected UnknownOption, got {other:?}"),
    }
    for (url, option) in [
        ("sqlite://idem.db?busy_timeout_ms=soon", "busy_timeout_ms"),
        ("sqlite://idem.db?synchronous=off", "synchronous"),
    ] {
        match SqliteStore::connect(url).await {
            Err(StoreError::BadOption(bad)) => assert_eq!(bad.option, option, "{url}"),
            other => panic!("{url}: expected BadOption, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_from_a_newer_idem_is_refused() {
    let (_dir, path) = file_at_schema_version(99).await;
    assert_schema_too_new(
        SqliteStore::open(&path).await,
        99,
        idem_sqlite::SCHEMA_VERSION,
    );
}

/// A file written by idem 0.1 (schema version 1, exactly as 0.1 created
/// it) is migrated on open: its records read unchanged, a duplicate gets its
/// recorded answer, and its unknown outcome can be settled by an operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_by_schema_version_1_is_migrated_and_reads() {
    use idem_runtime::operator::{Actor, Operator, Resolution};
    use idem_runtime::record::Status;

    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem-0.1.db");
    let (done, unknown) = (random_key(), random_key());
    version_1_file(&path, &done, Some(&unknown));
    let store = Arc::new(SqliteStore::open(&path).await.unwrap());
    let f = fingerprint();
    match store.claim(&request(&done, &f)).await.unwrap() {
        ClaimOutcome::Completed(record) => assert_eq!(
            record.outcome(),
            Some(&Outcome::Success {
                output: OutputJson::from_value(&json!({ "id": "m-1" }))
            })
        ),
        other => panic!("expected the 0.1 record, got {other:?}"),
    }
    let operator = Operator::new(store.clone());
    let record = operator.show(&unknown).await.unwrap();
    assert_eq!(record.status(), Status::Unknown);
    assert!(record.info.is_empty() && record.audit.is_empty());
    let settled = operator
        .resolve(
            &unknown,
            Resolution::Succeeded(json!({ "charge": "ch_1" })),
            &Actor::new("ana").because("the processor shows the charge"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(settled.status(), Status::Succeeded);
    assert!(settled.fence().0 >= 3, "fences continue after 0.1's");
    // The store that migrated the file writes and reads its audit log.
    let query = idem_runtime::audit::AuditQuery::for_key(unknown.clone());
    let trail = operator.audit(&query, None, 10).await.unwrap();
    assert_eq!(trail.events.len(), 1, "the resolution's event: {trail:?}");
    store.close().await;
    assert_eq!(
        sqlite_schema_version(&path),
        i64::from(idem_sqlite::SCHEMA_VERSION)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_that_is_not_sqlite_is_refused_and_not_overwritten() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("notes.txt");
    let text = "these are my notes, not a database\n".repeat(200);
    std::fs::write(&path, &text).unwrap();
    match SqliteStore::open(&path).await {
        Err(StoreError::Unavailable { store, cause }) => {
            assert!(store.contains("notes.txt"), "{store}");
            assert!(cause.contains("not a SQLite database"), "{cause}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
}

/// rusqlite's error stays the source of the store's error, for reporters
/// that print the chain and callers that look at SQLite's error code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unopenable_file_keeps_the_driver_error_as_source() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "not a database\n".repeat(200)).unwrap();
    let e = SqliteStore::open(&path).await.unwrap_err();
    assert!(matches!(e, StoreError::Unavailable { .. }), "{e:?}");
    let driver: &rusqlite::Error = driver_error(&e);
    assert_eq!(
        driver.sqlite_error_code(),
        Some(rusqlite::ErrorCode::NotADatabase)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_directory_is_unavailable() {
    match SqliteStore::open("/nonexistent-idem-dir/sub/idem.db").await {
        Err(StoreError::Unavailable { store, cause }) => {
            assert!(store.contains("/nonexistent-idem-dir/sub/idem.db"));
            assert!(cause.contains("does not exist"), "{cause}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}
