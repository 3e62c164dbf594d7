//! The index of open records: the open scan's statements walk it, in its
//! order, from the cursor, on a table of many settled records.

use std::time::Instant;

use crate::postgres_support::open_own;
use idem_runtime::store::StoreExt;

/// Records in the table (`IDEM_OPEN_INDEX_ROWS`, default 200,000), one in
/// a hundred open.
fn rows() -> i64 {
    std::env::var("IDEM_OPEN_INDEX_ROWS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000)
}

/// The plan of `execute` (an `EXECUTE` of a prepared statement), run.
async fn plan(client: &tokio_postgres::Client, execute: &str) -> String {
    client
        .query(
            &format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) {execute}"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_scan_walks_the_index_of_open_records_from_its_cursor() {
    let Some((store, raw)) = open_own("postgres open index").await else {
        return;
    };
    let valid: bool = raw
        .query_one(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('idem_records_open')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(valid, "the index of open records was built");

    // Settled records and, one in a hundred, records in flight, a
    // millisecond apart (g = 100, 200, … open).
    let n = rows();
    let started = Instant::now();
    raw.execute(
        "INSERT INTO idem_records (key, tool, fingerprint, created_at, fence, state,
                                   lease_until, outcome, completed_at, expires_at)
         SELECT lpad(to_hex(g), 64, '0'), 'send_email', repeat('f', 64),
                1700000000000 + g, g,
                CASE WHEN g % 100 = 0 THEN 0 ELSE 1 END,
                CASE WHEN g % 100 = 0 THEN 4000000000000 END,
                CASE WHEN g % 100 = 0 THEN NULL
                     WHEN g % 7 = 0 THEN '{\"status\":\"failure\",\"failure\":{\"code\":\"permanent\",\"message\":\"no\"}}'
                     ELSE '{\"status\":\"success\",\"output\":\"{}\"}' END,
                CASE WHEN g % 100 = 0 THEN NULL ELSE 1700000000000 + g END,
                CASE WHEN g % 100 = 0 THEN NULL ELSE 4000000000000 END
         FROM generate_series(1, $1::bigint) AS g",
        &[&n],
    )
    .await
    .unwrap();
    raw.batch_execute("ANALYZE idem_records").await.unwrap();
    println!("{n} records written in {:?}", started.elapsed());

    let [first, after] = idem_postgres::scan_open_statements();
    raw.batch_execute(&format!(
        "PREPARE open_first AS {first}; PREPARE open_after AS {after}"
    ))
    .await
    .unwrap();
    // A cursor halfway down.
    let middle = 1_700_000_000_000i64 + n / 2;
    let middle_key = format!("{:064x}", n / 2);
    // The store's prepared statements are planned for their parameters
    // the first five times, then perhaps generically: both plans.
    for mode in ["force_custom_plan", "force_generic_plan"] {
        raw.batch_execute(&format!("SET plan_cache_mode = {mode}"))
            .await
            .unwrap();
        let first = plan(&raw, "EXECUTE open_first(51)").await;
        let after = plan(
            &raw,
            &format!("EXECUTE open_after({middle}, '{middle_key}', 51)"),
        )
        .await;
        println!("{mode}, first page:\n{first}\n{mode}, after a cursor:\n{after}");
        for plan in [&first, &after] {
            assert!(
                plan.contains("Index Scan using idem_records_open on idem_records"),
                "{plan}"
            );
            assert!(
                !plan.contains("Seq Scan") && !plan.contains("Sort"),
                "{plan}"
            );
            // The index yields the page (and the row that says more
            // follow), nothing else.
            assert!(plan.contains("rows=51 "), "{plan}");
        }
        assert!(
            after.contains("Index Cond: (ROW(created_at, key) < ROW("),
            "{after}"
        );
    }

    // The store's own pages: the newest open records, then those below a
    // cursor halfway down, 50 each.
    let started = Instant::now();
    let page = store.scan_open(None, 50).await.unwrap();
    let took = started.elapsed();
    assert_eq!(page.records.len(), 50);
    let newest = n / 100 * 100;
    assert_eq!(page.records[0].key.as_str(), format!("{newest:064x}"));
    let cursor = format!("{middle}:{middle_key}");
    let started = Instant::now();
    let deep = store.scan_open(Some(&cursor), 50).await.unwrap();
    let deep_took = started.elapsed();
    assert_eq!(deep.records.len(), 50);
    // Strictly below the cursor, which names an open record itself.
    let below = (n / 2 - 1) / 100 * 100;
    assert_eq!(deep.records[0].key.as_str(), format!("{below:064x}"));
    assert!(deep.cursor.is_some());
    println!("pages of 50 of {n} records: first {took:?}, halfway down {deep_took:?}");
    store.close().await;
}
