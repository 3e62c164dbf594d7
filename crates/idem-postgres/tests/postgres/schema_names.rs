//! PostgreSQL stores in schemas of their own (`?schema=`): two in one
//! database do not see each other, and a malformed schema name is a
//! configuration error.

use std::time::Duration;

use crate::postgres_support::{connect_raw, own_database};
use idem_conformance::random_key;
use idem_postgres::PostgresStore;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, StoreError};
use idem_testkit::store_cases::{acquire, completed, fingerprint, request, sent};

/// Two applications share one database, each in a schema of its own named
/// in the URL: idem creates the schemas, and neither sees the other's
/// records, sweeps them or draws fences from the other's sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_in_two_schemas_of_one_database_do_not_see_each_other() {
    let Some(url) = own_database("postgres schemas").await else {
        return;
    };
    let raw = connect_raw(&url).await;
    let (app1, app2) = (
        PostgresStore::connect(&format!("{url}?schema=app1"))
            .await
            .unwrap(),
        PostgresStore::connect(&format!("{url}?connect_timeout=5&schema=app2"))
            .await
            .unwrap(),
    );
    let (key, lapsing, f) = (random_key(), random_key(), fingerprint());
    completed(&app1, &key, &sent("m-1"), Duration::from_secs(600)).await;
    completed(&app1, &lapsing, &sent("m-2"), Duration::from_millis(1)).await;
    // The same key is free in the other schema, with a fence from a
    // sequence of its own (app1 drew 1 and 2 from its own).
    assert_eq!(acquire(&app2, &key).await, idem_runtime::record::Fence(1));
    assert_eq!(app2.scan(None, 100).await.unwrap().records.len(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(app2.sweep().await.unwrap(), 0, "app2 swept app1's record");
    for (schema, records) in [("app1", 2), ("app2", 1)] {
        let rows: i64 = raw
            .query_one(&format!("SELECT count(*) FROM {schema}.idem_records"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(rows, records, "{schema}");
    }
    let public: Option<String> = raw
        .query_one("SELECT to_regclass('public.idem_records')::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(public, None, "idem wrote to public");
    assert!(matches!(
        app1.claim(&request(&key, &f)).await.unwrap(),
        ClaimOutcome::Completed(_)
    ));

    // Connecting again finds the schema and its tables as they are.
    let again = PostgresStore::connect(&format!("{url}?schema=app2"))
        .await
        .unwrap();
    assert!(matches!(
        again.claim(&request(&key, &f)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_schema_name_is_a_configuration_error() {
    for (schema, says) in [
        ("App1", "not a usable schema name"),
        ("1app", "not a usable schema name"),
        ("pg_idem", "not a usable schema name"),
        ("app;drop", "not a usable schema name"),
        ("%61pp", "not a usable schema name"),
        ("", "not a usable schema name"),
        ("a&schema=b", "names the schema twice"),
    ] {
        // No server is contacted: the URL is refused first.
        let url = format!("postgres://idem:secret@127.0.0.1:1/db?schema={schema}");
        let err = match PostgresStore::connect(&url).await {
            Err(StoreError::BadOption(bad)) if bad.option == "schema" && !schema.contains('&') => {
                StoreError::BadOption(bad)
            }
            Err(e @ StoreError::InvalidUrl { .. }) if schema.contains('&') => e,
            other => panic!("{schema:?}: expected a configuration error, got {other:?}"),
        };
        let message = err.to_string();
        assert!(message.contains(says), "{schema:?}: {message}");
        assert!(!message.contains("secret"), "{message}");
    }
    let long = "a".repeat(64);
    let url = format!("postgres://idem@127.0.0.1:1/db?schema={long}");
    assert!(matches!(
        PostgresStore::connect(&url).await,
        Err(StoreError::BadOption(bad)) if bad.option == "schema" && bad.value == long
    ));
}
