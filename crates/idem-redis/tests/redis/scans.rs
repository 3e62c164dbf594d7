//! Scans of the Redis store: each record once, in key order, from the
//! slots' indexes, and only the records of the store's own prefix.

use std::time::Duration;

use crate::redis_support::{raw, scan_all, server_url};
use idem_conformance::random_key;
use idem_redis::RedisOptions;
use idem_redis::RedisStore;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::Record;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, StoreError};
use idem_testkit::store_cases::{acquire, completed, fingerprint, request, sent};

/// Every member of the sorted set `index`.
async fn zrange(raw: &mut redis::aio::MultiplexedConnection, index: &str) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(index)
        .arg(0)
        .arg(-1)
        .query_async(raw)
        .await
        .unwrap()
}

/// The keys of every record of `store`, scanned in pages of `page`.
async fn scanned_keys(store: &RedisStore, page: usize) -> Vec<IdempotencyKey> {
    scan_all(store, page)
        .await
        .into_iter()
        .map(|r| r.key)
        .collect()
}

/// Scans page through the slots' indexes: records of other prefixes are
/// not read, every record comes once in key order, records that lapsed are
/// left out although their keys are still indexed, and a claim creating a
/// record next to such a key drops it from the index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_read_each_record_once_in_key_order_from_the_indexes() {
    let Some(url) = server_url("redis scan").await else {
        return;
    };
    let prefix = format!("idem-scan-{}", &random_key().as_str()[..8]);
    let store = RedisStore::connect_with(&url, RedisOptions::default().prefix(&prefix))
        .await
        .unwrap();
    let mut raw = raw(&url).await;
    assert!(
        scan_all(&store, 10).await.is_empty(),
        "a new prefix is empty"
    );

    // Two keys of one slot, a lapsing record under the greater.
    let slot = random_key().as_str()[..3].to_owned();
    let low = IdempotencyKey::parse(&format!("{slot}{}", "0".repeat(61))).unwrap();
    let high = IdempotencyKey::parse(&format!("{slot}{}", "1".repeat(61))).unwrap();
    completed(&store, &high, &sent("m-0"), Duration::from_millis(50)).await;
    let mut keys = Vec::new();
    for i in 0..30 {
        let key = random_key();
        let fence = acquire(&store, &key).await;
        if i % 2 == 0 {
            store
                .complete(&key, fence, &sent("m-1"), Duration::from_secs(600))
                .await
                .unwrap();
        }
        keys.push(key);
    }
    keys.sort();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let index = format!("{prefix}:{{{slot}}}:keys");
    let indexed = zrange(&mut raw, &index).await;
    assert!(indexed.contains(&high.as_str().to_owned()), "{indexed:?}");

    for page in [1, 4, 1000] {
        assert_eq!(scanned_keys(&store, page).await, keys, "page size {page}");
    }
    // RESP3 answers HGETALL with a map, not a list.
    let resp3 = RedisStore::connect_with(
        &format!("{url}?protocol=resp3"),
        RedisOptions::default().prefix(&prefix),
    )
    .await
    .unwrap();
    assert_eq!(scanned_keys(&resp3, 7).await, keys, "over RESP3");

    // A claim next to the lapsed key drops it from the index.
    acquire(&store, &low).await;
    let indexed = zrange(&mut raw, &index).await;
    assert!(indexed.contains(&low.as_str().to_owned()), "{indexed:?}");
    assert!(!indexed.contains(&high.as_str().to_owned()), "{indexed:?}");

    // A released record leaves its index.
    let gone = random_key();
    let fence = acquire(&store, &gone).await;
    store.release(&gone, fence).await.unwrap();
    let rank: Option<i64> = redis::cmd("ZRANK")
        .arg(format!("{prefix}:{{{}}}:keys", &gone.as_str()[..3]))
        .arg(gone.as_str())
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(rank, None, "a released key is still indexed");

    for bad in ["", "xyz", "abcd", &"g".repeat(64)] {
        assert!(
            matches!(
                store.scan(Some(bad), 10).await,
                Err(StoreError::BadCursor { cursor, kind: "scan", .. }) if cursor == bad
            ),
            "cursor {bad:?} accepted"
        );
    }
}

/// Two applications share one server, each with its own `?prefix=`: a key
/// one of them recorded is unknown to the other, which runs its own call
/// under it, and each scan lists only its own records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_prefixes_on_one_server_do_not_see_each_others_records() {
    let Some(url) = server_url("two_prefixes_on_one_server_do_not_see_each_others_records").await
    else {
        return;
    };
    let app1 = RedisStore::connect(&format!("{url}?prefix=app1"))
        .await
        .unwrap();
    let app2 = RedisStore::connect(&format!("{url}?prefix=app2"))
        .await
        .unwrap();
    let key = random_key();
    let f = fingerprint();
    completed(&app1, &key, &sent("app1"), Duration::from_secs(600)).await;

    assert!(
        app2.get(&key).await.unwrap().is_none(),
        "app2 read app1's record"
    );
    let ClaimOutcome::Acquired { fence, .. } = app2.claim(&request(&key, &f)).await.unwrap() else {
        panic!("app2 did not own the key app1 recorded");
    };
    app2.complete(&key, fence, &sent("app2"), Duration::from_secs(600))
        .await
        .unwrap();
    let outcome = |r: Option<Record>| r.and_then(|r| r.outcome().cloned());
    assert_eq!(outcome(app1.get(&key).await.unwrap()), Some(sent("app1")));
    assert_eq!(outcome(app2.get(&key).await.unwrap()), Some(sent("app2")));

    for (store, tag) in [(&app1, "app1"), (&app2, "app2")] {
        let listed = scan_all(store, 100).await;
        assert_eq!(listed.len(), 1, "{tag} lists another prefix's records");
        assert_eq!(outcome(listed.into_iter().next()), Some(sent(tag)));
    }
    let mut raw = raw(&url).await;
    let app1_keys: Vec<String> = redis::cmd("KEYS")
        .arg("app1:*")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!app1_keys.is_empty() && app1_keys.iter().all(|k| k.starts_with("app1:")));
}

/// A record Redis deletes itself (an approval request that lapsed) leaves
/// its key in its slot's open set: an open scan leaves it out and drops it
/// (a store connected read-only only leaves it out), and the sweep drops
/// every such key. Over RESP3 the scan reads the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_lapsed_records_are_dropped_from_the_open_sets() {
    use crate::redis_support::{park, scan_open_all};
    let Some(url) = server_url("redis open stale").await else {
        return;
    };
    let prefix = format!("idem-open-{}", &random_key().as_str()[..8]);
    let options = || RedisOptions::default().prefix(&prefix);
    let store = RedisStore::connect_with(&url, options()).await.unwrap();
    let reader = RedisStore::connect_read_only_with(&url, options())
        .await
        .unwrap();
    let mut raw = raw(&url).await;
    let open_set = |key: &IdempotencyKey| format!("{prefix}:{{{}}}:open", &key.as_str()[..3]);
    let (lapsing, swept, running) = (random_key(), random_key(), random_key());
    for key in [&lapsing, &swept] {
        let fence = acquire(&store, key).await;
        park(&store, key, fence, Duration::from_millis(50)).await;
    }
    acquire(&store, &running).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    let probe = raw.clone();
    let score = |key: IdempotencyKey| {
        let mut raw = probe.clone();
        let set = open_set(&key);
        async move {
            let score: Option<f64> = redis::cmd("ZSCORE")
                .arg(set)
                .arg(key.as_str())
                .query_async(&mut raw)
                .await
                .unwrap();
            score
        }
    };
    assert!(score(lapsing.clone()).await.is_some(), "Redis left the key");

    let listed = |records: Vec<Record>| -> Vec<IdempotencyKey> {
        records.into_iter().map(|r| r.key).collect()
    };
    let (read, _) = scan_open_all(&reader, 10).await;
    assert_eq!(listed(read), vec![running.clone()]);
    assert!(score(lapsing.clone()).await.is_some(), "a reader wrote");
    let (read, _) = scan_open_all(&store, 1).await;
    assert_eq!(listed(read), vec![running.clone()]);
    assert!(score(lapsing.clone()).await.is_none(), "a stale key stayed");
    assert!(score(running.clone()).await.is_some());

    // The sweep drops what no reader met.
    let _: () = redis::cmd("ZADD")
        .arg(open_set(&swept))
        .arg(1)
        .arg(swept.as_str())
        .query_async(&mut raw)
        .await
        .unwrap();
    store.sweep().await.unwrap();
    assert!(score(swept.clone()).await.is_none(), "the sweep left it");
    assert!(
        score(running.clone()).await.is_some(),
        "the sweep dropped an open key"
    );

    let resp3 = RedisStore::connect_with(&format!("{url}?protocol=resp3"), options())
        .await
        .unwrap();
    let (read, _) = scan_open_all(&resp3, 10).await;
    assert_eq!(listed(read), vec![running.clone()], "over RESP3");
    for bad in ["", "12", "x:y", &format!("12:{}", "g".repeat(64))] {
        assert!(
            matches!(
                store.scan_open(Some(bad), 10).await,
                Err(StoreError::BadCursor { cursor, .. }) if cursor == bad
            ),
            "cursor {bad:?} accepted"
        );
    }
}
