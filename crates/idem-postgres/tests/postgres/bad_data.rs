//! Corrupt rows in a PostgreSQL store: reported and left untouched, and
//! beside the rest in a scan.

use std::time::Duration;

use crate::postgres_support::{connect_raw, open_shared, own_database};
use idem_conformance::random_key;
use idem_postgres::PostgresStore;
use idem_runtime::store::StoreError;
use idem_runtime::store::StoreExt;
use idem_testkit::store_cases::{completed, fingerprint, request, sent};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_outcome_is_reported_and_left_untouched() {
    let Some((store, raw)) = open_shared("postgres corrupt record").await else {
        return;
    };
    let key = random_key();
    completed(&store, &key, &sent("m-1"), Duration::from_secs(600)).await;
    raw.execute(
        "UPDATE idem_records SET outcome = '{not json' WHERE key = $1",
        &[&key.as_str()],
    )
    .await
    .unwrap();
    let f = fingerprint();
    assert!(matches!(
        store.claim(&request(&key, &f)).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(store.get(&key).await, Err(StoreError::Corrupt(_))));
    let outcome: String = raw
        .query_one(
            "SELECT outcome FROM idem_records WHERE key = $1",
            &[&key.as_str()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(outcome, "{not json", "the corrupt record was overwritten");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_corrupt_row_does_not_fail_a_scan_it_is_reported_beside_the_rest() {
    let Some(url) = own_database("postgres corrupt scan").await else {
        return;
    };
    let store = PostgresStore::connect(&url).await.unwrap();
    let keys = [random_key(), random_key(), random_key()];
    for key in &keys {
        completed(&store, key, &sent("m"), Duration::from_secs(3600)).await;
    }
    let raw = connect_raw(&url).await;
    raw.execute(
        "UPDATE idem_records SET outcome = 'not json' WHERE key = $1",
        &[&keys[1].as_str()],
    )
    .await
    .unwrap();
    // A page boundary right after the corrupt row: the scan goes on past it.
    let mut sorted = keys.clone();
    sorted.sort();
    let (mut listed, mut corrupt, mut cursor) = (Vec::new(), Vec::new(), None);
    loop {
        let page = store.scan(cursor.as_deref(), 1).await.unwrap();
        listed.extend(page.records.into_iter().map(|r| r.key));
        corrupt.extend(page.corrupt.into_iter().map(|c| c.key));
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }
    let good: Vec<_> = sorted.iter().filter(|k| **k != keys[1]).cloned().collect();
    assert_eq!(listed, good);
    assert_eq!(corrupt, vec![keys[1].as_str().to_owned()]);
    store.close().await;
}
