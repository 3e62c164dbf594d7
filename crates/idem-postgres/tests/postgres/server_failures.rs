//! A PostgreSQL server that cannot be reached or goes away: the store
//! fails closed, naming itself and keeping the driver's error; and
//! `close` closes every connection.

use std::time::Duration;

use crate::postgres_support::{connect_raw, own_database};
use idem_conformance::random_key;
use idem_postgres::PostgresStore;
use idem_runtime::store::StoreError;
use idem_runtime::store::StoreExt;
use idem_testkit::store_cases::{
    acquire, closed_port, driver_error, fails_closed_when_the_server_goes_away,
};
use idem_testkit::{skip, PostgresServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_fails_closed_naming_the_store() {
    let port = closed_port();
    let url = format!("postgres://idem:secret@127.0.0.1:{port}/postgres");
    match PostgresStore::connect(&url).await {
        Err(StoreError::Unavailable { store, cause }) => {
            assert_eq!(
                store,
                format!("postgres://idem:***@127.0.0.1:{port}/postgres")
            );
            assert!(!cause.contains("secret"));
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

/// tokio-postgres's error stays the source of the store's error, for
/// reporters that print the chain and callers that look at the driver's
/// error (its SQLSTATE, its I/O cause).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_keeps_the_driver_error_as_source() {
    let url = format!(
        "postgres://idem:secret@127.0.0.1:{}/postgres",
        closed_port()
    );
    let e = PostgresStore::connect(&url).await.unwrap_err();
    assert!(matches!(e, StoreError::Unavailable { .. }), "{e:?}");
    let driver: &tokio_postgres::Error = driver_error(&e);
    assert!(driver.as_db_error().is_none(), "{driver:?}");
    assert!(!e.to_string().contains("secret"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_going_away_fails_writes_closed() {
    let Some(mut server) = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .unwrap()
    else {
        return skip("postgres server going away", "PostgreSQL");
    };
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    fails_closed_when_the_server_goes_away(store, || server.stop()).await;
}

/// `close` closes the pool's connections and the listener's, once their
/// work is done; the server sees them go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_closes_every_connection() {
    let Some(url) = own_database("postgres close").await else {
        return;
    };
    let raw = connect_raw(&url).await;
    let connections = || async {
        let row = raw
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = 'idem' AND datname = current_database()",
                &[],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    let store = PostgresStore::connect(&url).await.unwrap();
    acquire(&store, &random_key()).await;
    assert!(
        connections().await >= 2,
        "the pool and the listener are connected"
    );
    store.close().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while connections().await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "connections still open 10 s after close"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
