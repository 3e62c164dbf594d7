//! The PostgreSQL store beyond the conformance suite, on a real PostgreSQL
//! server: round trips, several processes, wake-up latency, bad data and a
//! server that goes away.
#![cfg(feature = "postgres")]

mod support;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use idem_runtime::conformance::random_key;
use idem_runtime::store::{ClaimOutcome, PostgresStore, Store, StoreError};
use idem_testkit::servers::{claim_from_processes, run_child, skip, PostgresServer};
use serde_json::json;
use support::{
    acquire, closed_port, driver_error, every_write_is_refused_read_only,
    fails_closed_when_the_server_goes_away, fingerprint, park, request, sent, wake_up_latencies,
};

static SERVER: LazyLock<Option<PostgresServer>> = LazyLock::new(PostgresServer::start);

async fn server_url(test: &str) -> Option<String> {
    support::server_url(test, "PostgreSQL", || {
        SERVER.as_ref().map(PostgresServer::url)
    })
    .await
}

/// The URL of [`fresh_database`] on the shared server, or `None` after a
/// loud skip.
async fn own_database(test: &str) -> Option<String> {
    Some(fresh_database(&server_url(test).await?).await)
}

/// A fresh database on the shared server, so a test that counts
/// statements or rewrites the schema sees only its own.
async fn fresh_database(url: &str) -> String {
    let admin = connect_raw(url).await;
    let name = format!("idem_{}", &random_key().as_str()[..12]);
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    url.replace("/postgres", &format!("/{name}"))
}

async fn connect_raw(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

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
    let fence = acquire(&store, &done).await;
    store
        .complete(&done, fence, &sent("m-1"), Duration::from_secs(600))
        .await
        .unwrap();
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

// The entry point of the child processes of the multi-process test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child processes started by the multi-process tests"]
async fn multi_process_child() {
    run_child().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_processes_claiming_one_key_have_one_owner() {
    let Some(url) = server_url("postgres several processes").await else {
        return;
    };
    // Create the schema first so the children race on claims, not setup.
    drop(PostgresStore::connect(&url).await.unwrap());
    let key = random_key();
    let report = tokio::task::spawn_blocking(move || {
        claim_from_processes("multi_process_child", &url, &key, 4, 250)
    })
    .await
    .unwrap();
    assert_eq!(report.runs, 1, "more than one process ran the tool");
    assert_eq!(report.finished, 1000);
    assert_eq!(report.outcomes.len(), 1, "claimants saw different outcomes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_notify_within_milliseconds() {
    let Some(url) = server_url("postgres wake-up latency").await else {
        return;
    };
    let store = Arc::new(PostgresStore::connect(&url).await.unwrap());
    let latencies = wake_up_latencies(store.clone(), store, 10).await;
    eprintln!(
        "postgres wake-up latency over 10 waits: median {:?}, max {:?}",
        latencies[5], latencies[9]
    );
    assert!(latencies[5] < Duration::from_millis(50), "{latencies:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_outcome_is_reported_and_left_untouched() {
    let Some(url) = server_url("postgres corrupt record").await else {
        return;
    };
    let store = PostgresStore::connect(&url).await.unwrap();
    let raw = connect_raw(&url).await;
    let key = random_key();
    let fence = acquire(&store, &key).await;
    store
        .complete(&key, fence, &sent("m-1"), Duration::from_secs(600))
        .await
        .unwrap();
    raw.execute(
        "UPDATE idem_records SET outcome = '{not json' WHERE key = $1",
        &[&key.as_str()],
    )
    .await
    .unwrap();
    let f = fingerprint();
    assert!(matches!(
        store.claim(&request(&key, &f)).await,
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(store.get(&key).await, Err(StoreError::Corrupt(_))));
    let outcome: String = raw
        .query_one(
            "SELECT outcome FROM idem_records WHERE key = $1",
            &[&key.as_str()],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(outcome, "{not json", "the corrupt record was overwritten");
}

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
    match PostgresStore::connect(&url).await {
        Err(StoreError::SchemaTooNew {
            found, supported, ..
        }) => assert_eq!(
            (found, supported),
            (7, idem_runtime::store::postgres::SCHEMA_VERSION)
        ),
        other => panic!("expected SchemaTooNew, got {other:?}"),
    }
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
    assert_eq!(version, 3);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_going_away_fails_writes_closed() {
    let Some(mut server) = tokio::task::spawn_blocking(PostgresServer::start)
        .await
        .unwrap()
    else {
        return skip("postgres server going away", "PostgreSQL");
    };
    let store = PostgresStore::connect(&server.url()).await.unwrap();
    fails_closed_when_the_server_goes_away(store, || server.stop()).await;
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

/// Two applications share one database, each in a schema of its own named
/// in the URL: idem creates the schemas, and neither sees the other's
/// records, sweeps them or draws fences from the other's sequence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_in_two_schemas_of_one_database_do_not_see_each_other() {
    let Some(url) = own_database("postgres schemas").await else {
        return;
    };
    let raw = connect_raw(&url).await;
    let (app1, app2) = (
        PostgresStore::connect(&format!("{url}?schema=app1"))
            .await
            .unwrap(),
        PostgresStore::connect(&format!("{url}?connect_timeout=5&schema=app2"))
            .await
            .unwrap(),
    );
    let (key, lapsing, f) = (random_key(), random_key(), fingerprint());
    let fence = acquire(&app1, &key).await;
    app1.complete(&key, fence, &sent("m-1"), Duration::from_secs(600))
        .await
        .unwrap();
    let fence = acquire(&app1, &lapsing).await;
    app1.complete(&lapsing, fence, &sent("m-2"), Duration::from_millis(1))
        .await
        .unwrap();
    // The same key is free in the other schema, with a fence from a
    // sequence of its own (app1 drew 1 and 2 from its own).
    assert_eq!(acquire(&app2, &key).await, idem_runtime::record::Fence(1));
    assert_eq!(app2.scan(None, 100).await.unwrap().records.len(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(app2.sweep().await.unwrap(), 0, "app2 swept app1's record");
    for (schema, records) in [("app1", 2), ("app2", 1)] {
        let rows: i64 = raw
            .query_one(&format!("SELECT count(*) FROM {schema}.idem_records"), &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(rows, records, "{schema}");
    }
    let public: Option<String> = raw
        .query_one("SELECT to_regclass('public.idem_records')::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(public, None, "idem wrote to public");
    assert!(matches!(
        app1.claim(&request(&key, &f)).await.unwrap(),
        ClaimOutcome::Completed(_)
    ));

    // Connecting again finds the schema and its tables as they are.
    let again = PostgresStore::connect(&format!("{url}?schema=app2"))
        .await
        .unwrap();
    assert!(matches!(
        again.claim(&request(&key, &f)).await.unwrap(),
        ClaimOutcome::InFlight { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_schema_name_is_a_configuration_error() {
    for (schema, says) in [
        ("App1", "not a usable schema name"),
        ("1app", "not a usable schema name"),
        ("pg_idem", "not a usable schema name"),
        ("app;drop", "not a usable schema name"),
        ("%61pp", "not a usable schema name"),
        ("", "not a usable schema name"),
        ("a&schema=b", "names the schema twice"),
    ] {
        // No server is contacted: the URL is refused first.
        let url = format!("postgres://idem:secret@127.0.0.1:1/db?schema={schema}");
        match PostgresStore::connect(&url).await {
            Err(StoreError::Config(message)) => {
                assert!(message.contains(says), "{schema:?}: {message}");
                assert!(!message.contains("secret"), "{message}");
            }
            other => panic!("{schema:?}: expected a configuration error, got {other:?}"),
        }
    }
    let long = "a".repeat(64);
    let url = format!("postgres://idem@127.0.0.1:1/db?schema={long}");
    assert!(matches!(
        PostgresStore::connect(&url).await,
        Err(StoreError::Config(_))
    ));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_without_idem_connected_read_only_is_refused_and_nothing_is_created() {
    let Some(url) = own_database("postgres read-only foreign").await else {
        return;
    };
    let raw = connect_raw(&url).await;
    raw.batch_execute("CREATE TABLE users (id int PRIMARY KEY); INSERT INTO users VALUES (1);")
        .await
        .unwrap();
    for url in [url.clone(), format!("{url}?schema=app1")] {
        match PostgresStore::connect_read_only(&url).await {
            Err(e @ StoreError::NotAnIdemStore { .. }) => {
                assert!(e.to_string().contains("is not an idem store"), "{e}")
            }
            other => panic!("{url}: expected NotAnIdemStore, got {other:?}"),
        }
    }
    let created: i64 = raw
        .query_one(
            "SELECT (SELECT count(*) FROM pg_class WHERE relname LIKE 'idem%')
                  + (SELECT count(*) FROM pg_namespace WHERE nspname = 'app1')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(created, 0, "no table, sequence or schema was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_connected_read_only_reads_and_refuses_every_write() {
    let Some(url) = own_database("postgres read-only").await else {
        return;
    };
    let live = PostgresStore::connect(&url).await.unwrap();
    assert_eq!(live.schema_found(), None);
    let (done, running) = (random_key(), random_key());
    let fence = acquire(&live, &done).await;
    live.complete(&done, fence, &sent("m-1"), Duration::from_secs(3600))
        .await
        .unwrap();
    let running_fence = acquire(&live, &running).await;

    let reader = PostgresStore::connect_read_only(&url).await.unwrap();
    assert_eq!(
        reader.schema_found(),
        Some(idem_runtime::store::postgres::SCHEMA_VERSION)
    );
    assert_eq!(reader.scan(None, 100).await.unwrap().records.len(), 2);
    assert_eq!(
        reader.get(&done).await.unwrap().unwrap().outcome(),
        Some(&sent("m-1"))
    );
    every_write_is_refused_read_only(&reader, &running, running_fence).await;
    reader.close().await;
    live.close().await;
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
        idem_runtime::store::url::migrate(&url),
        PostgresStore::connect(&url)
    );
    let migration = first.unwrap();
    let second = second.unwrap();
    assert_eq!(migration.to, idem_runtime::store::postgres::SCHEMA_VERSION);
    assert!(
        [Some(1), Some(idem_runtime::store::postgres::SCHEMA_VERSION)].contains(&migration.from)
            && [Some(1), Some(idem_runtime::store::postgres::SCHEMA_VERSION)]
                .contains(&second.schema_found())
            && migration.from != second.schema_found(),
        "one of them migrated from 1: {migration:?}, {:?}",
        second.schema_found()
    );
    assert_eq!(
        version(&raw).await,
        i64::from(idem_runtime::store::postgres::SCHEMA_VERSION)
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
    let migration = idem_runtime::store::url::migrate(&url).await.unwrap();
    assert_eq!(
        (migration.from, migration.to),
        (
            Some(idem_runtime::store::postgres::SCHEMA_VERSION),
            idem_runtime::store::postgres::SCHEMA_VERSION
        )
    );
    let (valid, predicate) = expiry_index(&raw).await.expect("rebuilt");
    assert!(valid && predicate.contains("ARRAY[1, 2]"), "{predicate}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_corrupt_row_does_not_fail_a_scan_it_is_reported_beside_the_rest() {
    let Some(url) = own_database("postgres corrupt scan").await else {
        return;
    };
    let store = PostgresStore::connect(&url).await.unwrap();
    let keys = [random_key(), random_key(), random_key()];
    for key in &keys {
        let fence = acquire(&store, key).await;
        store
            .complete(key, fence, &sent("m"), Duration::from_secs(3600))
            .await
            .unwrap();
    }
    let raw = connect_raw(&url).await;
    raw.execute(
        "UPDATE idem_records SET outcome = 'not json' WHERE key = $1",
        &[&keys[1].as_str()],
    )
    .await
    .unwrap();
    // A page boundary right after the corrupt row: the scan goes on past it.
    let mut sorted = keys.clone();
    sorted.sort();
    let (mut listed, mut corrupt, mut cursor) = (Vec::new(), Vec::new(), None);
    loop {
        let page = store.scan(cursor.as_deref(), 1).await.unwrap();
        listed.extend(page.records.into_iter().map(|r| r.key));
        corrupt.extend(page.corrupt.into_iter().map(|c| c.key));
        cursor = page.cursor;
        if cursor.is_none() {
            break;
        }
    }
    let good: Vec<_> = sorted.iter().filter(|k| **k != keys[1]).cloned().collect();
    assert_eq!(listed, good);
    assert_eq!(corrupt, vec![keys[1].as_str().to_owned()]);
    store.close().await;
}
