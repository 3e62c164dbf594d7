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
    acquire, assert_resent_only_when_safe, closed_port, driver_error,
    fails_closed_when_the_server_goes_away, no_call_after_a_restart_fails, write_to_break,
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

/// A server of the test's own, to stop or restart; `None` after a loud
/// skip.
async fn own_server(test: &str) -> Option<PostgresServer> {
    let server = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .unwrap();
    if server.is_none() {
        skip(test, "PostgreSQL");
    }
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_going_away_fails_writes_closed() {
    let Some(mut server) = own_server("postgres server going away").await else {
        return;
    };
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    fails_closed_when_the_server_goes_away(store, || server.stop()).await;
}

/// A restart of the server closes every connection the store's pool holds;
/// each is seen closed when it is next checked out and replaced before a
/// request is sent on it, so no call made once the server is back fails
/// (before, 3 of 4 restarts cost a call "connection closed").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_after_a_restart_of_the_server_fails() {
    let Some(mut server) = own_server("postgres server restarted").await else {
        return;
    };
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    no_call_after_a_restart_fails(std::sync::Arc::new(store), 3, true, || server.restart()).await;
}

/// A request the server may have applied is not sent again when its
/// connection breaks under it: a completion blocked on the record's row
/// (locked by another session) when the server restarts fails with the
/// store's error, and the record is still in flight after the server is
/// back, not completed by a second sending. A renewal, the same applied
/// twice, blocked the same way is sent again once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_broken_after_it_was_sent_is_resent_only_when_safe() {
    let Some(mut server) = own_server("postgres request broken in flight").await else {
        return;
    };
    let store = std::sync::Arc::new(PostgresStore::connect(&server.url()).await.unwrap());
    for resent in [false, true] {
        let key = random_key();
        let fence = acquire(&*store, &key).await;
        let locker = connect_raw(&server.url()).await;
        locker.batch_execute("BEGIN").await.unwrap();
        locker
            .execute(
                "SELECT 1 FROM idem_records WHERE key = $1 FOR UPDATE",
                &[&key.as_str()],
            )
            .await
            .unwrap();
        let blocked = write_to_break(store.clone(), &key, fence, resent);
        // Sent, and waiting for the row's lock on the server.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let waiting: i64 = locker
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE application_name = 'idem' AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            if waiting == 1 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the request never blocked"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::task::block_in_place(|| server.restart());
        let answer = blocked.await.unwrap();
        assert_resent_only_when_safe(&*store, &key, resent, answer).await;
    }
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
