//! What a call costs on a real PostgreSQL server: one round trip to claim,
//! one to complete and one for a duplicate, which writes no WAL and draws
//! no fence.

use std::time::Duration;

use crate::postgres_support::{connect_raw, own_database};
use idem_conformance::random_key;
use idem_postgres::PostgresStore;
use idem_runtime::store::ClaimOutcome;
use idem_runtime::store::StoreExt;
use idem_testkit::store_cases::{acquire, completed, fingerprint, park, request, sent};
use idem_testkit::{skip, PostgresServer};

/// Statements executed in this database while `op` ran, from
/// `pg_stat_statements` (each a round trip: the store's statements are
/// prepared, so an execution is one Bind/Execute/Sync exchange).
async fn statements<T>(
    stats: &tokio_postgres::Client,
    op: impl std::future::Future<Output = T>,
) -> (T, Vec<(String, i64)>) {
    stats
        .batch_execute("SELECT pg_stat_statements_reset()")
        .await
        .unwrap();
    let out = op.await;
    let rows = stats
        .query(
            "SELECT query, calls FROM pg_stat_statements
             WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
               AND query NOT LIKE '%pg_stat_statements%'",
            &[],
        )
        .await
        .unwrap();
    let seen = rows
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1)))
        .collect();
    (out, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_call_costs_one_round_trip_to_claim_and_one_to_complete_and_a_duplicate_one() {
    let Some(url) = own_database("postgres round trips").await else {
        return;
    };
    let stats = connect_raw(&url).await;
    stats
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await
        .unwrap();
    let store = PostgresStore::connect(&url).await.unwrap();
    // Open the pooled connection (and prepare its statements) first.
    store.get(&random_key()).await.unwrap();

    let key = random_key();
    let f = fingerprint();
    let (claim, by_claim) = statements(&stats, store.claim(&request(&key, &f))).await;
    let ClaimOutcome::Acquired { fence, .. } = claim.unwrap() else {
        panic!("fresh key not acquired");
    };
    let (done, by_complete) = statements(
        &stats,
        store.complete(&key, fence, &sent("m-1"), Duration::from_secs(60)),
    )
    .await;
    done.unwrap();
    let (dup, by_dup) = statements(&stats, store.claim(&request(&key, &f))).await;
    assert!(matches!(dup.unwrap(), ClaimOutcome::Completed(_)));

    for (what, seen) in [
        ("claim", &by_claim),
        ("complete", &by_complete),
        ("duplicate", &by_dup),
    ] {
        let calls: i64 = seen.iter().map(|(_, n)| n).sum();
        eprintln!("postgres {what}: {calls} statement(s)");
        assert_eq!(calls, 1, "{what} took {calls} round trips: {seen:?}");
    }
    assert!(by_claim[0].0.contains("ON CONFLICT"));
    assert!(by_complete[0].0.contains("UPDATE idem_records"));
}

/// A replayed run asks for calls that are already recorded: answering them
/// must not write. Nor must asking again for a call that awaits an
/// approval (the agent retrying while nobody has answered). Measured on a
/// server of its own (WAL is server-wide): the WAL position and the fence
/// sequence before and after 100 duplicates of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_of_a_completed_call_writes_no_wal_and_draws_no_fence() {
    let Some(server) = PostgresServer::start() else {
        skip(
            "a_duplicate_of_a_completed_call_writes_no_wal",
            "PostgreSQL",
        );
        return;
    };
    let url = server.url();
    let raw = connect_raw(&url).await;
    let store = PostgresStore::connect(&url).await.unwrap();
    let (done, waiting, f) = (random_key(), random_key(), fingerprint());
    completed(&store, &done, &sent("m-1"), Duration::from_secs(600)).await;
    park(&store, &waiting, acquire(&store, &waiting).await).await;

    for (what, key) in [("completed", &done), ("awaiting approval", &waiting)] {
        let (before, fence_before) = wal_and_fences(&raw).await;
        for _ in 0..100 {
            let dup = store.claim(&request(key, &f)).await.unwrap();
            assert!(
                matches!(
                    dup,
                    ClaimOutcome::Completed(_) | ClaimOutcome::AwaitingApproval(_)
                ),
                "{dup:?}"
            );
        }
        let (after, fence_after) = wal_and_fences(&raw).await;
        let wal: i64 = raw
            .query_one(
                "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::bigint",
                &[&after, &before],
            )
            .await
            .unwrap()
            .get(0);
        eprintln!("postgres: 100 claims of the {what} record wrote {wal} WAL bytes");
        // Background records (a running-transactions snapshot) may land in
        // the window; a claim that wrote would add about 100 bytes each.
        assert!(
            wal < 200,
            "100 claims of the {what} record wrote {wal} WAL bytes"
        );
        assert_eq!(
            fence_before, fence_after,
            "a claim of the {what} record drew fences"
        );
    }
}

/// The server's WAL insert position and the fence sequence's last value.
async fn wal_and_fences(raw: &tokio_postgres::Client) -> (String, i64) {
    let row = raw
        .query_one(
            "SELECT pg_current_wal_insert_lsn()::text, (SELECT last_value FROM idem_fence)",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}
