//! Data the Redis store did not write as this build would: schema version
//! 1 is migrated and reads, a newer schema is refused, and a corrupt hash
//! is reported and left untouched (beside the rest, in a scan).

use std::time::Duration;

use crate::redis_support::{open_shared, raw, scan_all, server_url, set};
use idem_conformance::random_key;
use idem_redis::RedisOptions;
use idem_redis::RedisStore;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{Fence, Outcome, OutputJson, RecordState, Status};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, Expected, ExpectedState, Store, StoreError};
use idem_testkit::store_cases::{
    acquire, assert_schema_too_new, assert_the_middle_one_is_corrupt, completed, fingerprint,
    request, sent,
};
use serde_json::json;

/// Data written by idem 0.1 (schema version 1: hashes without call details,
/// worker or audit, and no indexes) is migrated when a store connects: the
/// version becomes 2, its records read unchanged and are found by scans,
/// its fences continue, and an operator can settle its unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_written_by_schema_version_1_is_migrated_and_reads() {
    let Some(url) = server_url("redis schema 1").await else {
        return;
    };
    let prefix = format!("idem-v1-{}", &random_key().as_str()[..8]);
    let mut raw = raw(&url).await;
    let (done, unknown, running) = (random_key(), random_key(), random_key());
    let fp = "f".repeat(64);
    let far = 4_000_000_000_000u64;
    let hset = |key: &IdempotencyKey, fields: &[(&str, String)]| {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(format!(
            "{prefix}:{{{}}}:r:{}",
            &key.as_str()[..3],
            key.as_str()
        ));
        for (name, value) in fields {
            cmd.arg(*name).arg(value);
        }
        cmd
    };
    let common = |fence: u64| {
        vec![
            ("tool", "send_email".to_owned()),
            ("fp", fp.clone()),
            ("created", "1700000000000".to_owned()),
            ("fence", fence.to_string()),
        ]
    };
    let completed = |fence: u64, outcome: &str| {
        let mut fields = common(fence);
        fields.extend([
            ("state", "c".to_owned()),
            ("outcome", outcome.to_owned()),
            ("done", "1700000000100".to_owned()),
            ("exp", far.to_string()),
        ]);
        fields
    };
    let mut pipe = redis::pipe();
    pipe.add_command(hset(
        &done,
        &completed(1, r#"{"status":"success","output":"{\"id\":\"m-1\"}"}"#),
    ))
    .add_command(hset(&unknown, &{
        let mut fields = completed(2, r#"{"status":"unknown","reason":"owner vanished"}"#);
        fields.push(("s:idem:attempt", "1".to_owned()));
        fields
    }))
    .add_command(hset(&running, &{
        let mut fields = common(3);
        fields.extend([("state", "f".to_owned()), ("lease", far.to_string())]);
        fields
    }));
    for key in [&done, &unknown] {
        pipe.cmd("PEXPIREAT")
            .arg(format!(
                "{prefix}:{{{}}}:r:{}",
                &key.as_str()[..3],
                key.as_str()
            ))
            .arg(far);
    }
    for key in [&done, &unknown, &running] {
        pipe.cmd("SET")
            .arg(format!("{prefix}:{{{}}}:fence", &key.as_str()[..3]))
            .arg(3);
    }
    pipe.cmd("SET").arg(format!("{prefix}:schema")).arg(1);
    let _: () = pipe.query_async(&mut raw).await.unwrap();

    let store = RedisStore::connect_with(&url, RedisOptions::default().prefix(&prefix))
        .await
        .unwrap();
    let version: String = redis::cmd("GET")
        .arg(format!("{prefix}:schema"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(version, idem_redis::SCHEMA_VERSION.to_string());

    let f = fingerprint();
    match store.claim(&request(&done, &f)).await.unwrap() {
        ClaimOutcome::Completed(record) => {
            assert_eq!(
                record.outcome(),
                Some(&Outcome::Success {
                    output: OutputJson::from_value(&json!({ "id": "m-1" }))
                })
            );
            assert!(record.info.is_empty() && record.worker.is_none() && record.audit.is_empty());
        }
        other => panic!("expected the 0.1 record, got {other:?}"),
    }
    assert!(matches!(
        store.claim(&request(&running, &f)).await.unwrap(),
        ClaimOutcome::InFlight {
            fence: Fence(3),
            ..
        }
    ));
    let mut expected = vec![done.clone(), unknown.clone(), running.clone()];
    expected.sort();
    for page in [1, 2, 10] {
        let found: Vec<IdempotencyKey> = scan_all(&store, page)
            .await
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(found, expected, "page size {page}");
    }

    // An operator settles the unknown outcome.
    let record = store.get(&unknown).await.unwrap().unwrap();
    assert_eq!(record.status(), Status::Unknown);
    let now = store.now().await.unwrap();
    let mut settled = record.clone();
    settled.state = RecordState::Completed {
        fence: record.fence(),
        outcome: sent("ch_1"),
        completed_at: now,
        expires_at: now.plus(Duration::from_secs(600)),
    };
    let fence = store
        .replace(
            &unknown,
            Expected {
                fence: Fence(2),
                state: ExpectedState::Completed,
            },
            Some(&settled),
            None,
        )
        .await
        .unwrap()
        .unwrap();
    assert!(fence.0 > 3, "fences continue after 0.1's, got {fence}");
    let read = store.get(&unknown).await.unwrap().unwrap();
    assert_eq!(read.status(), Status::Succeeded);
    assert_eq!(read.steps.get("idem:attempt"), Some(&json!(1)));

    // A second store finds the data migrated.
    RedisStore::connect_with(&url, RedisOptions::default().prefix(&prefix))
        .await
        .unwrap();
}

/// An audit log written before the audit index (layout version 2): once a
/// version 3 store connects, reads of the whole log merge every slot's
/// stream for the events before the migration and go by the index after
/// it; across the pages, every event once, oldest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audit_log_from_before_the_index_reads_whole_across_the_migration() {
    use idem_runtime::audit::{AuditEvent, AuditQuery};
    use idem_runtime::clock::Timestamp;
    let Some(url) = server_url("redis audit migration").await else {
        return;
    };
    let prefix = format!("idem-test-{}", &random_key().as_str()[..8]);
    let options = || RedisOptions::default().prefix(&prefix);
    let event = |n: u64, at: u64| AuditEvent {
        seq: None,
        at: Timestamp(at),
        by: "ops".into(),
        action: idem_runtime::record::AuditAction::Released,
        reason: Some(n.to_string()),
        key: random_key(),
        tool: "send_email".into(),
        namespace: None,
        fingerprint: fingerprint(),
        before: None,
        after: None,
    };
    let old = RedisStore::connect_with(&url, options()).await.unwrap();
    let start = old.now().await.unwrap().as_millis() - 10_000;
    for n in 0..40 {
        old.append_audit(&event(n, start + n)).await.unwrap();
    }
    old.close().await;
    // As version 2 left it: no index, no time it is complete from.
    let mut raw = raw(&url).await;
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(format!("{prefix}:schema"))
        .arg(2)
        .ignore()
        .cmd("DEL")
        .arg(format!("{prefix}:{{audit}}:slots"))
        .arg(format!("{prefix}:{{audit}}:indexed_since"))
        .ignore()
        .query_async(&mut raw)
        .await
        .unwrap();
    let reader = RedisStore::connect_read_only_with(&url, options())
        .await
        .unwrap();
    assert_eq!(reader.schema_found(), Some(2), "read as it is");

    let store = RedisStore::connect_with(&url, options()).await.unwrap();
    assert_eq!(store.schema_found(), Some(2), "migrated");
    let after = store.now().await.unwrap().as_millis() + 1;
    for n in 40..80 {
        store.append_audit(&event(n, after + n)).await.unwrap();
    }
    for reading in [&store, &reader] {
        let (mut cursor, mut read) = (None, Vec::new());
        loop {
            let page = reading
                .audit(&AuditQuery::default(), cursor.as_deref(), 15)
                .await
                .unwrap();
            read.extend(page.events.into_iter().map(|e| e.reason.unwrap()));
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let expected: Vec<String> = (0..80).map(|n| n.to_string()).collect();
        assert_eq!(read, expected, "{}", reading.describe());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_from_a_newer_idem_is_refused() {
    let Some(url) = server_url("redis newer schema").await else {
        return;
    };
    let prefix = format!("idem-test-{}", &random_key().as_str()[..8]);
    let mut raw = raw(&url).await;
    set(&mut raw, format!("{prefix}:schema"), 99).await;
    assert_schema_too_new(
        RedisStore::connect_with(&url, RedisOptions::default().prefix(&prefix)).await,
        99,
        idem_redis::SCHEMA_VERSION,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_with_a_missing_field_is_corrupt_and_left_untouched() {
    let Some((store, mut raw)) = open_shared("redis corrupt record").await else {
        return;
    };
    let key = random_key();
    let fence = completed(&store, &key, &sent("m-1"), Duration::from_secs(600)).await;
    let redis_key = store.record_key(&key);
    let _: i64 = redis::cmd("HDEL")
        .arg(&redis_key)
        .arg("tool")
        .query_async(&mut raw)
        .await
        .unwrap();
    let before: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&redis_key)
        .query_async(&mut raw)
        .await
        .unwrap();

    let f = fingerprint();
    match store.claim(&request(&key, &f)).await {
        Err(StoreError::Corrupt(c)) => assert!(c.detail.contains("missing"), "{c}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(matches!(store.get(&key).await, Err(StoreError::Corrupt(_))));
    assert!(matches!(
        store.release(&key, fence).await,
        Err(StoreError::Corrupt(_))
    ));
    let after: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&redis_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(before, after, "the corrupt record was changed");

    // Garbage in a field is corrupt too.
    let _: i64 = redis::cmd("HSET")
        .arg(&redis_key)
        .arg("tool")
        .arg("send_email")
        .arg("outcome")
        .arg("{not json")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(matches!(
        store.claim(&request(&key, &f)).await,
        Err(StoreError::Corrupt(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_corrupt_hash_does_not_fail_a_scan_it_is_reported_beside_the_rest() {
    let Some(url) = server_url("redis corrupt scan").await else {
        return;
    };
    let prefix = format!("idem-corrupt-{}", &random_key().as_str()[..8]);
    let store = RedisStore::connect(&format!("{url}?prefix={prefix}"))
        .await
        .unwrap();
    let keys = [random_key(), random_key(), random_key()];
    for key in &keys {
        completed(&store, key, &sent("m"), Duration::from_secs(3600)).await;
    }
    let mut raw = raw(&url).await;
    let _: () = redis::cmd("HSET")
        .arg(store.record_key(&keys[1]))
        .arg("state")
        .arg("nonsense")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_the_middle_one_is_corrupt(&store, &keys).await;
    store.close().await;
}

/// Data of layout version 3 kept no open sets: a store connected read-only
/// still lists its open records (by reading the store), and a version 4
/// store connecting builds the sets, after which a page is three round
/// trips and lists the same records, newest first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_records_of_layout_version_3_are_indexed_on_connect() {
    use crate::redis_support::{park, scan_open_all};
    let Some(url) = server_url("redis open migration").await else {
        return;
    };
    let prefix = format!("idem-v3-{}", &random_key().as_str()[..8]);
    let options = || RedisOptions::default().prefix(&prefix);
    let old = RedisStore::connect_with(&url, options()).await.unwrap();
    let mut open = Vec::new();
    for n in 0..60 {
        let key = random_key();
        let fence = acquire(&old, &key).await;
        match n % 4 {
            0 => open.push(key),
            1 => {
                park(&old, &key, fence, Duration::from_secs(600)).await;
                open.push(key);
            }
            2 => {
                let unknown = Outcome::Unknown { reason: "?".into() };
                old.complete(&key, fence, &unknown, Duration::from_secs(600))
                    .await
                    .unwrap();
                open.push(key);
            }
            _ => old
                .complete(&key, fence, &sent("m"), Duration::from_secs(600))
                .await
                .unwrap(),
        }
    }
    old.close().await;
    open.sort();
    // As version 3 left it: no open sets.
    let mut raw = raw(&url).await;
    let sets: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*:open"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!sets.is_empty());
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(format!("{prefix}:schema"))
        .arg(3)
        .ignore()
        .cmd("DEL")
        .arg(&sets)
        .ignore()
        .query_async(&mut raw)
        .await
        .unwrap();
    let keys = |records: &[idem_runtime::record::Record]| {
        let mut keys: Vec<IdempotencyKey> = records.iter().map(|r| r.key.clone()).collect();
        keys.sort();
        keys
    };

    let reader = RedisStore::connect_read_only_with(&url, options())
        .await
        .unwrap();
    assert_eq!(reader.schema_found(), Some(3), "read as it is");
    let (by_scanning, _) = scan_open_all(&reader, 7).await;
    assert_eq!(keys(&by_scanning), open, "read-only, by reading the store");

    let store = RedisStore::connect_with(&url, options()).await.unwrap();
    assert_eq!(store.schema_found(), Some(3), "migrated");
    let version: String = redis::cmd("GET")
        .arg(format!("{prefix}:schema"))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(version, "4");
    let (indexed, trips) = scan_open_all(&store, 7).await;
    assert_eq!(indexed, by_scanning, "the same records in the same order");
    assert!(
        trips.iter().all(|&t| t == 3),
        "round trips per page: {trips:?}"
    );
    // A store connected read-only from now on reads the sets too.
    let reader = RedisStore::connect_read_only_with(&url, options())
        .await
        .unwrap();
    let before = reader.round_trips();
    let page = reader.scan_open(None, 7).await.unwrap();
    assert_eq!(page.records, indexed[..7]);
    assert_eq!(reader.round_trips() - before, 3);
}
