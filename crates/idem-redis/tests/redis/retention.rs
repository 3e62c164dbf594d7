//! How long the Redis store keeps what: a record's retention and an
//! approval request's are its key's TTL, a lease is a field, and unknown
//! outcomes stored with a TTL are kept once this build connects.

use std::time::Duration;

use crate::redis_support::{open_shared, park, raw, server_url};
use idem_conformance::random_key;
use idem_redis::RedisStore;
use idem_runtime::record::Outcome;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, Expected, ExpectedState};
use idem_testkit::store_cases::{acquire, completed, fingerprint, request, sent};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_is_the_key_ttl_and_the_lease_is_a_field() {
    let Some((store, mut raw)) = open_shared("redis retention").await else {
        return;
    };
    let key = random_key();
    let fence = acquire(&store, &key).await;
    let redis_key = store.record_key(&key);
    assert!(redis_key.contains(&format!("{{{}}}", &key.as_str()[..3])));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&redis_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(pttl, -1, "an in-flight record must not expire by itself");
    let lease: Option<u64> = redis::cmd("HGET")
        .arg(&redis_key)
        .arg("lease")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(lease.is_some(), "the lease is a field of the record");

    store
        .complete(&key, fence, &sent("m-1"), Duration::from_secs(600))
        .await
        .unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&redis_key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(
        (590_000..=600_000).contains(&pttl),
        "the record's retention is its key TTL, got {pttl} ms"
    );
}

/// A request for approval lapses through its key's TTL, like a completed
/// record; once approved, the claim that runs the call makes the record
/// in flight again, without a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_request_lapses_by_its_key_ttl_until_an_approved_claim_owns_it() {
    let Some((store, mut raw)) = open_shared("redis approval retention").await else {
        return;
    };
    let (key, f) = (random_key(), fingerprint());
    let fence = acquire(&store, &key).await;
    let parked = park(&store, &key, fence, Duration::from_secs(600)).await;
    let redis_key = store.record_key(&key);
    let pttl = |raw: &mut redis::aio::MultiplexedConnection| {
        let mut raw = raw.clone();
        let redis_key = redis_key.clone();
        async move {
            redis::cmd("PTTL")
                .arg(&redis_key)
                .query_async::<i64>(&mut raw)
                .await
                .unwrap()
        }
    };
    let left = pttl(&mut raw).await;
    assert!(
        (590_000..=600_000).contains(&left),
        "a request's retention is its key TTL, got {left} ms"
    );

    let mut approved = store.get(&key).await.unwrap().unwrap();
    approved.steps.insert(
        idem_runtime::record::APPROVAL_STEP.into(),
        json!({ "approved": { "approver": "ana" } }),
    );
    store
        .replace(
            &key,
            Expected {
                fence: parked,
                state: ExpectedState::AwaitingApproval,
            },
            Some(&approved),
            None,
        )
        .await
        .unwrap();
    match store.claim(&request(&key, &f)).await.unwrap() {
        ClaimOutcome::Acquired { takeover: None, .. } => {}
        other => panic!("expected the approved call, got {other:?}"),
    }
    assert_eq!(
        pttl(&mut raw).await,
        -1,
        "an in-flight record must not lapse"
    );
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(store.record_key(&key))
        .query_async(&mut raw)
        .await
        .unwrap();
    for gone in ["req", "exp", "msg"] {
        assert!(
            !fields.iter().any(|f| f == gone),
            "{gone} left in {fields:?}"
        );
    }
}

/// A store written before unknown outcomes were kept until settled holds
/// them with their record's retention as the key's TTL, which Redis would
/// act on by deleting them. The first read-write connect of this build
/// makes each never lapse, and leaves every other record's TTL alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_outcomes_stored_with_a_key_ttl_are_kept_once_this_build_connects() {
    let Some(url) = server_url("redis keep unknown outcomes").await else {
        return;
    };
    let prefix = format!("idem-keep-{}", &random_key().as_str()[..8]);
    let url = format!("{url}?prefix={prefix}");
    let old = RedisStore::connect(&url).await.unwrap();
    let (unknown, done) = (random_key(), random_key());
    let outcome = Outcome::Unknown {
        reason: "the owner vanished".into(),
    };
    // As idem 0.2 stored them: with a retention.
    completed(&old, &unknown, &outcome, Duration::from_secs(2)).await;
    completed(&old, &done, &sent("m"), Duration::from_secs(2)).await;
    let mut raw = raw(&url).await;
    // The store predates the fix.
    let _: () = redis::cmd("DEL")
        .arg(format!("{prefix}:unknown_kept"))
        .query_async(&mut raw)
        .await
        .unwrap();
    let pttl = |key: String| {
        let mut raw = raw.clone();
        async move {
            let ms: i64 = redis::cmd("PTTL")
                .arg(key)
                .query_async(&mut raw)
                .await
                .unwrap();
            ms
        }
    };
    assert!(pttl(old.record_key(&unknown)).await > 0);
    old.close().await;

    let new = RedisStore::connect(&url).await.unwrap();
    assert_eq!(pttl(new.record_key(&unknown)).await, -1, "no key TTL left");
    assert!(
        pttl(new.record_key(&done)).await > 0,
        "other records keep theirs"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let kept = new
        .get(&unknown)
        .await
        .unwrap()
        .expect("kept until settled");
    assert_eq!(kept.outcome(), Some(&outcome));
    assert_eq!(kept.expires_at(), None);
    assert!(new.get(&done).await.unwrap().is_none(), "expired as before");
    new.close().await;
}
