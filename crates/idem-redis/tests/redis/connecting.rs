//! Connecting to Redis: URL options are refused by name before anything
//! connects, and a store connected read-only writes nothing at all (TLS:
//! the `tls` module).

use std::time::Duration;

use crate::redis_support::{own_server, raw, set, writes_nothing};
use idem_conformance::random_key;
use idem_redis::RedisStore;
use idem_runtime::store::StoreError;
use idem_runtime::store::StoreExt;
use idem_testkit::store_cases::{acquire, completed, every_write_is_refused_read_only, sent};

/// A misspelt URL option is refused by name, before anything connects.
#[tokio::test]
async fn an_unknown_url_option_is_refused_by_name() {
    let err = RedisStore::connect("redis://127.0.0.1:1/?prefx=app1")
        .await
        .unwrap_err();
    match &err {
        StoreError::UnknownOption(unknown) => {
            assert_eq!(unknown.backend, "Redis");
            assert_eq!(unknown.options, ["prefx"]);
        }
        other => panic!("expected UnknownOption, got {other:?}"),
    }
    assert!(err.to_string().contains(r#""prefx""#), "{err}");
}

/// Connected read-only, a store writes nothing at all: a prefix no idem
/// store ever used is refused as not an idem store (and stays empty), an
/// idem store reads as usual and refuses every write, and data of layout
/// version 1 is refused naming `idem migrate`, not migrated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_connected_read_only_writes_nothing() {
    let Some(server) = own_server("redis read-only").await else {
        return;
    };
    let url = server.url();
    let mut raw = raw(&url).await;
    set(&mut raw, "other-app:session", "x").await;

    writes_nothing(&mut raw, "nothing was written", async {
        for prefix in ["idem", "other-app"] {
            match RedisStore::connect_read_only(&format!("{url}?prefix={prefix}")).await {
                Err(e @ StoreError::NotAnIdemStore { .. }) => {
                    assert!(e.to_string().contains("is not an idem store"), "{e}")
                }
                other => panic!("prefix {prefix}: expected NotAnIdemStore, got {other:?}"),
            }
        }
    })
    .await;

    let live = RedisStore::connect(&url).await.unwrap();
    assert_eq!(
        live.schema_found(),
        None,
        "the first store writes the layout"
    );
    let (done, running) = (random_key(), random_key());
    completed(&live, &done, &sent("m-1"), Duration::from_secs(3600)).await;
    let running_fence = acquire(&live, &running).await;

    writes_nothing(&mut raw, "nothing was written", async {
        let reader = crate::redis_support::BACKENDS
            .connect_read_only(&url)
            .await
            .unwrap();
        assert_eq!(reader.scan(None, 100).await.unwrap().records.len(), 2);
        assert_eq!(
            reader.get(&done).await.unwrap().unwrap().outcome(),
            Some(&sent("m-1"))
        );
        every_write_is_refused_read_only(&*reader, &running, running_fence).await;
        reader.close().await;
    })
    .await;

    // Layout version 1, under a prefix of its own.
    set(&mut raw, "old:schema", "1").await;
    writes_nothing(&mut raw, "nothing was migrated", async {
        match RedisStore::connect_read_only(&format!("{url}?prefix=old")).await {
            Err(e @ StoreError::SchemaTooOld { found: 1, .. }) => {
                assert!(e.to_string().contains("idem migrate"), "{e}")
            }
            other => panic!("expected SchemaTooOld, got {other:?}"),
        }
    })
    .await;
    let migration = crate::redis_support::BACKENDS
        .migrate(&format!("{url}?prefix=old"))
        .await
        .unwrap();
    assert_eq!(
        (migration.from, migration.to),
        (Some(1), idem_redis::SCHEMA_VERSION)
    );
    live.close().await;
}
