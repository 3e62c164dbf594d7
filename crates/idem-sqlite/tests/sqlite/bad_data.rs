//! Bad data in a SQLite store: a corrupt row is reported and left
//! untouched (beside the rest, in a scan), and a full database fails
//! closed.

use std::time::Duration;

use crate::sqlite_support::{fresh_file, fresh_store, record, sqlite};
use idem_conformance::random_key;
use idem_runtime::record::{Outcome, OutputJson};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, FastPath, StoreError};
use idem_sqlite::{SqliteOptions, SqliteStore};
use idem_testkit::store_cases::{assert_the_middle_one_is_corrupt, fingerprint, request, sent};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_row_is_reported_and_left_untouched() {
    let (_dir, path, store) = fresh_store().await;
    let key = random_key();
    record(&store, &key, &sent("m-1")).await;
    sqlite(
        &path,
        &format!(
            "UPDATE idem_records SET record = x'00ff13' WHERE key = '{}'",
            key.as_str()
        ),
    );
    let f = fingerprint();
    assert!(matches!(
        store.claim(&request(&key, &f)).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        store.claim_local(&request(&key, &f)),
        Some(Err(StoreError::Corrupt(_)))
    ));
    assert!(matches!(store.get(&key).await, Err(StoreError::Corrupt(_))));
    let fence = idem_runtime::record::Fence(1);
    assert!(matches!(
        store
            .complete(&key, fence, &sent("m-2"), Duration::from_secs(1))
            .await,
        Err(StoreError::Corrupt(_))
    ));
    let conn = rusqlite::Connection::open(&path).unwrap();
    let bytes: Vec<u8> = conn
        .query_row(
            "SELECT record FROM idem_records WHERE key = ?1",
            [key.as_str()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        bytes,
        vec![0x00, 0xff, 0x13],
        "the corrupt row was overwritten"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_corrupt_row_does_not_fail_a_scan_it_is_reported_beside_the_rest() {
    let (_dir, path, store) = fresh_store().await;
    let keys = [random_key(), random_key(), random_key()];
    for key in &keys {
        record(&store, key, &sent("m")).await;
    }
    sqlite(
        &path,
        &format!(
            "UPDATE idem_records SET record = x'00ff13' WHERE key = '{}'",
            keys[1].as_str()
        ),
    );
    assert_the_middle_one_is_corrupt(&store, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_database_fails_closed_with_full() {
    let (_dir, path) = fresh_file();
    let options = SqliteOptions::default().max_size(64 * 1024);
    let store = SqliteStore::open_with(&path, options).await.unwrap();
    let f = fingerprint();
    let big = Outcome::Success {
        output: OutputJson::from_value(&json!("x".repeat(4000))),
    };
    let mut full = None;
    for _ in 0..100 {
        let key = random_key();
        match store.claim(&request(&key, &f)).await {
            Ok(ClaimOutcome::Acquired { fence, .. }) => {
                if let Err(e) = store
                    .complete(&key, fence, &big, Duration::from_secs(60))
                    .await
                {
                    full = Some(e);
                    break;
                }
            }
            Ok(other) => panic!("unexpected {other:?}"),
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    match full {
        Some(StoreError::Full { store, cause }) => {
            assert!(store.contains("idem.db"));
            assert!(cause.contains("full"), "{cause}");
        }
        other => panic!("expected Full, got {other:?}"),
    }
}
