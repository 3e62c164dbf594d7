//! A Redis server that cannot be reached, goes away, is full or is a
//! read-only replica: the store fails closed, naming itself and keeping
//! the driver's error; and `close` closes every connection.

use std::time::{Duration, Instant};

use crate::redis_support::{own_server, raw};
use idem_conformance::random_key;
use idem_redis::RedisStore;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{Store, StoreError};
use idem_testkit::store_cases::{
    acquire, assert_resent_only_when_safe, closed_port, driver_error,
    fails_closed_when_the_server_goes_away, fingerprint, no_call_after_a_restart_fails, request,
    write_to_break,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_fails_closed_naming_the_store() {
    let port = closed_port();
    let url = format!("redis://:secret@127.0.0.1:{port}/");
    let started = Instant::now();
    match RedisStore::connect(&url).await {
        Err(StoreError::Unavailable { store, cause }) => {
            assert_eq!(store, format!("redis://:***@127.0.0.1:{port}/"));
            assert!(!cause.is_empty());
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// The redis crate's error stays the source of the store's error, for
/// reporters that print the chain and callers that look at the driver's
/// error kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_keeps_the_driver_error_as_source() {
    let url = format!("redis://:secret@127.0.0.1:{}/", closed_port());
    let e = RedisStore::connect(&url).await.unwrap_err();
    assert!(matches!(e, StoreError::Unavailable { .. }), "{e:?}");
    let driver: &redis::RedisError = driver_error(&e);
    assert!(driver.is_connection_refusal(), "{driver:?}");
    assert!(!e.to_string().contains("secret"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_going_away_fails_writes_closed() {
    let Some(mut server) = own_server("redis server going away").await else {
        return;
    };
    let store = RedisStore::connect(&server.url()).await.unwrap();
    fails_closed_when_the_server_goes_away(store, || server.stop()).await;
}

/// A restart of the server closes the store's connection; the connection
/// manager (RESP3, the store's default) hears it and connects again, or,
/// if the server was still down then, the next request is refused a
/// connection before anything is sent and goes out on a fresh one: no
/// call made once the server is back fails (before, the first call after
/// each restart failed, "broken pipe"). The server comes back empty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_after_a_restart_of_the_server_fails() {
    let Some(mut server) = own_server("redis server restarted").await else {
        return;
    };
    let store = RedisStore::connect(&server.url()).await.unwrap();
    // Every other restart keeps the server down for 2 s, longer than the
    // manager tries to connect again: the next request is then refused a
    // connection, and sent on the one made after it.
    let mut round = 0;
    let restart = || {
        round += 1;
        if round % 2 == 0 {
            server.stop();
            std::thread::sleep(Duration::from_secs(2));
        }
        server.restart()
    };
    no_call_after_a_restart_fails(std::sync::Arc::new(store), 4, false, restart).await;
}

/// A script the server may have run is not sent again when its connection
/// drops on the way: a completion held by `CLIENT PAUSE` when the server
/// restarts fails with the store's error, and the record (saved before,
/// loaded again) is still in flight, not completed by a second sending.
/// A renewal, the same run twice, held the same way is sent again once
/// the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_dropped_after_it_was_sent_is_resent_only_when_safe() {
    let Some(mut server) = own_server("redis request dropped in flight").await else {
        return;
    };
    let store = std::sync::Arc::new(RedisStore::connect(&server.url()).await.unwrap());
    for resent in [false, true] {
        let key = random_key();
        let fence = acquire(&*store, &key).await;
        let mut raw = raw(&server.url()).await;
        // The record comes back with the server, from its dump.
        command(&mut raw, "SAVE").await;
        command(&mut raw, "CLIENT PAUSE 20000 WRITE").await;
        let held = write_to_break(store.clone(), &key, fence, resent);
        // Sent, and held by the pause on the server.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("clients")
                .query_async(&mut raw)
                .await
                .unwrap();
            if info.lines().any(|l| l.trim() == "blocked_clients:1") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the script was never held: {info}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::task::block_in_place(|| server.restart());
        let answer = held.await.unwrap();
        assert_resent_only_when_safe(&*store, &key, resent, answer).await;
    }
}

/// Run `line` (words separated by spaces) on `raw`, expecting `OK`.
async fn command(raw: &mut redis::aio::MultiplexedConnection, line: &str) {
    let words: Vec<&str> = line.split(' ').collect();
    let _: () = redis::cmd(words[0])
        .arg(&words[1..])
        .query_async(raw)
        .await
        .unwrap();
}

/// A server out of memory under `noeviction` refuses the claim as `Full`,
/// and a read-only replica as `ReadOnly`: the classification reads the
/// redis crate's error kinds, which changed shape in its 1.0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_and_read_only_servers_are_told_apart() {
    // A server of its own: it is made full, then a replica.
    let Some(server) = own_server("redis full and read-only").await else {
        return;
    };
    let store = RedisStore::connect(&server.url()).await.unwrap();
    let mut raw = raw(&server.url()).await;
    let f = fingerprint();
    command(&mut raw, "CONFIG SET maxmemory-policy noeviction").await;
    command(&mut raw, "CONFIG SET maxmemory 1").await;
    match store.claim(&request(&random_key(), &f)).await {
        Err(StoreError::Full { store: name, .. }) => assert_eq!(name, store.describe()),
        other => panic!("a full server must refuse the claim as Full, got {other:?}"),
    }
    command(&mut raw, "CONFIG SET maxmemory 0").await;
    command(&mut raw, &format!("REPLICAOF 127.0.0.1 {}", closed_port())).await;
    match store.claim(&request(&random_key(), &f)).await {
        Err(StoreError::ReadOnly { store: name, .. }) => assert_eq!(name, store.describe()),
        other => panic!("a replica must refuse the claim as ReadOnly, got {other:?}"),
    }
}

/// `close` drops the store's connection and its subscriber's; the server
/// sees them go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_closes_every_connection() {
    // A server of its own, so only this test's clients are counted.
    let Some(server) = own_server("redis close").await else {
        return;
    };
    let mut raw = raw(&server.url()).await;
    let clients = || {
        let mut raw = raw.clone();
        async move {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut raw)
                .await
                .unwrap();
            list.lines().count()
        }
    };
    let alone = clients().await;
    let store = RedisStore::connect(&server.url()).await.unwrap();
    acquire(&store, &random_key()).await;
    assert!(
        clients().await >= alone + 2,
        "the store and its subscriber are connected"
    );
    store.close().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while clients().await > alone {
        assert!(
            Instant::now() < deadline,
            "connections still open 10 s after close"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _: () = redis::cmd("PING").query_async(&mut raw).await.unwrap();
}
