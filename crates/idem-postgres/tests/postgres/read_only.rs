//! The PostgreSQL store connected read-only: a database without idem is
//! refused and nothing is created in it, and an idem store reads as usual
//! and refuses every write.

use std::time::Duration;

use crate::postgres_support::{connect_raw, own_database};
use idem_conformance::random_key;
use idem_postgres::PostgresStore;
use idem_runtime::store::StoreError;
use idem_runtime::store::StoreExt;
use idem_testkit::store_cases::{acquire, completed, every_write_is_refused_read_only, sent};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_without_idem_connected_read_only_is_refused_and_nothing_is_created() {
    let Some(url) = own_database("postgres read-only foreign").await else {
        return;
    };
    let raw = connect_raw(&url).await;
    raw.batch_execute("CREATE TABLE users (id int PRIMARY KEY); INSERT INTO users VALUES (1);")
        .await
        .unwrap();
    for url in [url.clone(), format!("{url}?schema=app1")] {
        match PostgresStore::connect_read_only(&url).await {
            Err(e @ StoreError::NotAnIdemStore { .. }) => {
                assert!(e.to_string().contains("is not an idem store"), "{e}")
            }
            other => panic!("{url}: expected NotAnIdemStore, got {other:?}"),
        }
    }
    let created: i64 = raw
        .query_one(
            "SELECT (SELECT count(*) FROM pg_class WHERE relname LIKE 'idem%')
                  + (SELECT count(*) FROM pg_namespace WHERE nspname = 'app1')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(created, 0, "no table, sequence or schema was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_connected_read_only_reads_and_refuses_every_write() {
    let Some(url) = own_database("postgres read-only").await else {
        return;
    };
    let live = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(live.schema_found(), None);
    let (done, running) = (random_key(), random_key());
    completed(&live, &done, &sent("m-1"), Duration::from_secs(3600)).await;
    let running_fence = acquire(&live, &running).await;

    let reader = PostgresStore::connect_read_only(&url).await.unwrap();
    assert_eq!(reader.schema_found(), Some(idem_postgres::SCHEMA_VERSION));
    assert_eq!(reader.scan(None, 100).await.unwrap().records.len(), 2);
    assert_eq!(
        reader.get(&done).await.unwrap().unwrap().outcome(),
        Some(&sent("m-1"))
    );
    every_write_is_refused_read_only(&reader, &running, running_fence).await;
    reader.close().await;
    live.close().await;
}
