//! What a write waits for on a real PostgreSQL server: a claim that need
//! not be durable (an `idempotent_write`'s) commits with
//! `synchronous_commit = off` for its own transaction; every other claim,
//! and every completion, waits for the WAL flush as the server says.
//!
//! The setting in force is read by a trigger inside each write's own
//! transaction, so the test sees what the commit will do, not a guess.

use std::time::Duration;

use crate::postgres_support::open_own;
use idem_conformance::random_key;
use idem_runtime::store::ClaimOutcome;
use idem_runtime::store::StoreExt;
use idem_testkit::store_cases::{fingerprint, request, sent};

/// The `synchronous_commit` each write of `idem_records` ran under, in
/// order, as `"INSERT off"`.
async fn settings(raw: &tokio_postgres::Client) -> Vec<String> {
    raw.query("SELECT op || ' ' || setting FROM seen ORDER BY n", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_claim_that_need_not_be_durable_skips_the_wal_flush() {
    let Some((store, raw)) = open_own("postgres durability").await else {
        return;
    };
    raw.batch_execute(
        "CREATE TABLE seen (n serial PRIMARY KEY, op text, setting text);
         CREATE FUNCTION note_setting() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO seen (op, setting)
             VALUES (TG_OP, current_setting('synchronous_commit'));
           RETURN NULL;
         END $$;
         CREATE TRIGGER note_setting AFTER INSERT OR UPDATE ON idem_records
           FOR EACH ROW EXECUTE FUNCTION note_setting();",
    )
    .await
    .unwrap();
    let f = fingerprint();

    // An idempotent write's claim: no flush; its completion: the flush.
    let relaxed = random_key();
    let req = idem_testkit::store_cases::request(&relaxed, &f);
    let claim = store
        .claim(&idem_runtime::store::ClaimRequest {
            durable: false,
            ..req
        })
        .await
        .unwrap();
    let ClaimOutcome::Acquired { fence, .. } = claim else {
        panic!("fresh key not acquired: {claim:?}");
    };
    store
        .complete(&relaxed, fence, &sent("m-1"), Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(settings(&raw).await, ["INSERT off", "UPDATE on"]);

    // Its duplicate writes nothing at all.
    let dup = store
        .claim(&idem_runtime::store::ClaimRequest {
            durable: false,
            ..request(&relaxed, &f)
        })
        .await
        .unwrap();
    assert!(matches!(dup, ClaimOutcome::Completed(_)), "{dup:?}");
    assert_eq!(settings(&raw).await.len(), 2, "a duplicate wrote");

    // A claim that must be durable waits for the flush, as everything else.
    let durable = random_key();
    let ClaimOutcome::Acquired { .. } = store.claim(&request(&durable, &f)).await.unwrap() else {
        panic!("fresh key not acquired");
    };
    assert_eq!(settings(&raw).await[2..], ["INSERT on"]);

    // The setting was the claim's transaction's alone: the connection the
    // store pooled is back to the server's setting.
    let next = random_key();
    store.claim(&request(&next, &f)).await.unwrap();
    assert_eq!(settings(&raw).await[3..], ["INSERT on"]);
}
