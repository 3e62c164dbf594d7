//! The PostgreSQL store's schema versions: a newer one is refused, one
//! written by schema version 1 is migrated and reads, and an old one is
//! refused read-only and migrated with a valid expiry index.

use std::sync::Arc;
use std::time::Duration;

use crate::postgres_support::{connect_raw, own_database};
use idem_conformance::random_key;
use idem_postgres::PostgresStore;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{ClaimOutcome, StoreError};
use idem_testkit::store_cases::{assert_schema_too_new, fingerprint, request, sent};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_from_a_newer_idem_is_refused() {
    let Some(url) = own_database("postgres newer schema").await else {
        return;
    };
    drop(PostgresStore::connect(&url).await.unwrap());
    connect_raw(&url)
        .await
        .batch_execute("UPDATE idem_meta SET value = 7 WHERE name = 'schema_version'")
        .await
        .unwrap();
    assert_schema_too_new(
        PostgresStore::connect(&url).await,
        7,
        idem_postgres::SCHEMA_VERSION,
    );
}

/// A database set up by idem 0.1 (schema version 1, exactly as 0.1
/// created it, with rows as 0.1 wrote them) is migrated on connect: its
/// records read unchanged, a duplicate gets its recorded answer, a dead
/// owner's call is taken over, expired records are still swept, and the
/// new states and operator changes work on the migrated table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_written_by_schema_version_1_is_migrated_and_reads() {
    use idem_runtime::operator::{Actor, Operator, Resolution};
    use idem_runtime::record::{CallInfo, RecordState, Status};
    use idem_runtime::store::{Expected, ExpectedState};

    let Some(url) = own_database("postgres schema 1 migration").await else {
        return;
    };
    let raw = connect_raw(&url).await;
    let (done, unknown, dead, lapsed) = (random_key(), random_key(), random_key(), random_key());
    // 0.1's migration 1 and its `idem_meta`, then four records as 0.1's
    // statements left them: completed, completed as unknown (with a step),
    // a dead owner's in flight (with a step), and an expired one.
    let (long_ago, far) = (1_700_000_000_000i64, 4_000_000_000_000i64);
    raw.batch_execute(&format!(
        r#"CREATE TABLE IF NOT EXISTS idem_meta (name text PRIMARY KEY, value bigint NOT NULL);
           {V1_TABLES}
           SELECT setval('idem_fence', 4);
           INSERT INTO idem_records VALUES
             ('{done}', 'send_email', '{fp}', {long_ago}, 1, NULL, 1, NULL,
              '{{"status":"success","output":"{{\"message_id\":\"m-1\"}}"}}',
              {long_ago} + 100, {far}, '{{}}'),
             ('{unknown}', 'send_email', '{fp}', {long_ago}, 2, NULL, 1, NULL,
              '{{"status":"unknown","reason":"owner vanished"}}',
              {long_ago} + 100, {far}, '{{"idem:attempt": "1"}}'),
             ('{dead}', 'send_email', '{fp}', {long_ago}, 3, NULL, 0, {long_ago} + 30000,
              NULL, NULL, NULL, '{{"charged": "{{\"id\":\"ch_1\"}}"}}'),
             ('{lapsed}', 'send_email', '{fp}', {long_ago}, 4, NULL, 1, NULL,
              '{{"status":"success","output":"{{\"message_id\":\"m-0\"}}"}}',
              {long_ago} + 100, {long_ago} + 200, '{{}}');"#,
        fp = fingerprint(),
    ))
    .await
    .unwrap();

    let store = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let f = fingerprint();
    match store.claim(&request(&done, &f)).await.unwrap() {
        ClaimOutcome::Completed(record) => {
            assert_eq!(record.outcome(), Some(&sent("m-1")));
            assert_eq!(record.fence().0, 1);
        }
        other => panic!("expected the 0.1 record, got {other:?}"),
    }
    let record = store.get(&unknown).await.unwrap().unwrap();
    assert_eq!(record.status(), Status::Unknown);
    assert_eq!(record.steps.get("idem:attempt"), Some(&json!(1)));
    assert_eq!(record.info, CallInfo::EMPTY);
    assert_eq!((record.worker.as_deref(), record.audit.len()), (None, 0));
    assert_eq!(store.get(&lapsed).await.unwrap(), None);
    assert_eq!(store.sweep().await.unwrap(), 1, "the expired 0.1 record");

    // The dead owner's call is taken over by a worker that says who it is.
    let mut takeover = request(&dead, &f);
    takeover.worker = Some("host-b:202");
    let owner = match store.claim(&takeover).await.unwrap() {
        ClaimOutcome::Acquired {
            fence,
            steps,
            takeover: Some(t),
            ..
        } => {
            assert_eq!(t.previous.0, 3);
            assert_eq!(steps.get("charged"), Some(&json!({ "id": "ch_1" })));
            assert!(fence.0 > 4, "fences continue after 0.1's");
            fence
        }
        other => panic!("expected a takeover of the 0.1 record, got {other:?}"),
    };
    assert_eq!(
        store.get(&dead).await.unwrap().unwrap().worker.as_deref(),
        Some("host-b:202")
    );
    // The migrated table takes the new state: park the call for approval.
    let mut parked = store.get(&dead).await.unwrap().unwrap();
    let now = store.now().await.unwrap();
    parked.state = RecordState::AwaitingApproval {
        fence: owner,
        requested_at: now,
        expires_at: now.plus(Duration::from_secs(600)),
        message: "ask #payments-oncall".into(),
    };
    let expected = Expected {
        fence: owner,
        state: ExpectedState::InFlight,
    };
    store
        .replace(&dead, expected, Some(&parked), None)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        store.claim(&request(&dead, &f)).await.unwrap(),
        ClaimOutcome::AwaitingApproval(_)
    ));

    // An operator settles the 0.1 unknown outcome.
    let operator = Operator::new(store.clone());
    let settled = operator
        .resolve(
            &unknown,
            Resolution::Succeeded(json!({ "message_id": "m-2" })),
            &Actor::new("ana").because("the provider shows it sent"),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(settled.status(), Status::Succeeded);
    assert_eq!(settled.audit.len(), 1);
    assert_eq!(store.get(&unknown).await.unwrap().unwrap(), settled);
    store.close().await;

    let version: i64 = raw
        .query_one(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(version, i64::from(idem_postgres::SCHEMA_VERSION));
    let index: String = raw
        .query_one(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'idem_records_expiry'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(index.contains("ARRAY[1, 2]"), "{index}");
    // Connecting again migrates nothing and reads the same.
    let again = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(
        again.get(&done).await.unwrap().unwrap().outcome(),
        Some(&sent("m-1"))
    );
}

/// idem 0.1's tables (schema version 1) and its version row, as its
/// migration left them (after an `idem_meta` table).
const V1_TABLES: &str = "CREATE SEQUENCE idem_fence;
     CREATE TABLE idem_records (
         key          text PRIMARY KEY,
         tool         text NOT NULL,
         fingerprint  text NOT NULL,
         created_at   bigint NOT NULL,
         fence        bigint NOT NULL,
         prev_fence   bigint,
         state        smallint NOT NULL CHECK (state IN (0, 1)),
         lease_until  bigint,
         outcome      text,
         completed_at bigint,
         expires_at   bigint,
         steps        jsonb NOT NULL DEFAULT '{}'
     );
     CREATE INDEX idem_records_expiry ON idem_records (expires_at) WHERE state = 1;
     INSERT INTO idem_meta (name, value) VALUES ('schema_version', 1);";

/// The 0.1 schema (version 1) with `rows` completed records.
async fn schema_version_1(raw: &tokio_postgres::Client, rows: i64) {
    raw.batch_execute(&format!(
        r#"CREATE TABLE idem_meta (name text PRIMARY KEY, value bigint NOT NULL);
           {V1_TABLES}
           INSERT INTO idem_records
             SELECT lpad(to_hex(i), 64, '0'), 'send_email', '{fp}', 1700000000000, i, NULL, 1, NULL,
                    '{{"status":"success","output":"{{}}"}}', 1700000000100, 4000000000000 + i, '{{}}'
             FROM generate_series(1, {rows}) AS i;
           SELECT setval('idem_fence', {rows} + 1);"#,
        fp = fingerprint(),
    ))
    .await
    .unwrap();
}

async fn version(raw: &tokio_postgres::Client) -> i64 {
    raw.query_one(
        "SELECT value FROM idem_meta WHERE name = 'schema_version'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// Whether the expiry index exists, is valid, and covers approvals.
async fn expiry_index(raw: &tokio_postgres::Client) -> Option<(bool, String)> {
    raw.query_opt(
        "SELECT i.indisvalid, pg_get_expr(i.indpred, i.indrelid)
         FROM pg_index i WHERE i.indexrelid = to_regclass('idem_records_expiry')",
        &[],
    )
    .await
    .unwrap()
    .map(|row| {
        (
            row.get(0),
            row.get::<_, Option<String>>(1).unwrap_or_default(),
        )
    })
}

/// A schema at version 1 with rows: read-only it is refused naming
/// `idem migrate` and left at version 1; migrated (by two workers at once)
/// it reaches version 2 with a valid expiry index built outside the
/// migration's transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_schema_is_refused_read_only_and_migrated_with_a_valid_index() {
    let Some(url) = own_database("postgres migrate").await else {
        return;
    };
    let raw = connect_raw(&url).await;
    schema_version_1(&raw, 5000).await;
    match PostgresStore::connect_read_only(&url).await {
        Err(e @ StoreError::SchemaTooOld { found: 1, .. }) => {
            assert!(e.to_string().contains("idem migrate"), "{e}")
        }
        other => panic!("expected SchemaTooOld, got {other:?}"),
    }
    assert_eq!(version(&raw).await, 1);

    let (first, second) = tokio::join!(
        crate::postgres_support::BACKENDS.migrate(&url),
        PostgresStore::connect(&url)
    );
    let migration = first.unwrap();
    let second = second.unwrap();
    assert_eq!(migration.to, idem_postgres::SCHEMA_VERSION);
    assert!(
        [Some(1), Some(idem_postgres::SCHEMA_VERSION)].contains(&migration.from)
            && [Some(1), Some(idem_postgres::SCHEMA_VERSION)].contains(&second.schema_found())
            && migration.from != second.schema_found(),
        "one of them migrated from 1: {migration:?}, {:?}",
        second.schema_found()
    );
    assert_eq!(
        version(&raw).await,
        i64::from(idem_postgres::SCHEMA_VERSION)
    );
    second.close().await;
    // Whichever built the index, a connect finishes or repeats the build.
    PostgresStore::connect(&url).await.unwrap().close().await;
    let (valid, predicate) = expiry_index(&raw).await.expect("the expiry index exists");
    assert!(valid, "the index is valid");
    assert!(predicate.contains("ARRAY[1, 2]"), "{predicate}");
    let reader = PostgresStore::connect_read_only(&url).await.unwrap();
    assert_eq!(reader.scan(None, 10_000).await.unwrap().records.len(), 5000);
    reader.close().await;

    // A concurrent build that died leaves an invalid index: the next
    // store to connect drops it and builds it again.
    raw.batch_execute(
        "DROP INDEX idem_records_expiry;
         INSERT INTO idem_records (key, tool, fingerprint, created_at, fence, state)
           VALUES ('dup-a', 't', 'f', 1, 1, 0), ('dup-b', 't', 'f', 1, 2, 0);",
    )
    .await
    .unwrap();
    let failed = raw
        .batch_execute(
            "CREATE UNIQUE INDEX CONCURRENTLY idem_records_expiry ON idem_records (tool)",
        )
        .await;
    assert!(failed.is_err(), "duplicate tools make the build fail");
    assert_eq!(
        expiry_index(&raw).await.map(|(valid, _)| valid),
        Some(false)
    );
    raw.batch_execute("DELETE FROM idem_records WHERE key LIKE 'dup-%'")
        .await
        .unwrap();
    let migration = crate::postgres_support::BACKENDS
        .migrate(&url)
        .await
        .unwrap();
    assert_eq!(
        (migration.from, migration.to),
        (
            Some(idem_postgres::SCHEMA_VERSION),
            idem_postgres::SCHEMA_VERSION
        )
    );
    let (valid, predicate) = expiry_index(&raw).await.expect("rebuilt");
    assert!(valid && predicate.contains("ARRAY[1, 2]"), "{predicate}");
}
