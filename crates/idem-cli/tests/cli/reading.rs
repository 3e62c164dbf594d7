//! What the `idem` program only reads: another application's SQLite
//! database, a store of an older idem, a PostgreSQL schema or Redis prefix
//! without idem, and a store with a corrupt record; none is changed by
//! reading it, and `idem migrate` creates or migrates a store.
//!
//! Each scenario is written once against a store URL and runs on a SQLite
//! file, and on the Redis and PostgreSQL servers of `idem_testkit::servers`
//! (skipped loudly when their binaries are missing; a failure under
//! `IDEM_REQUIRE_SERVERS=1`). The Redis and PostgreSQL stores are shared by
//! the scenarios, so each works in a namespace of its own.

use std::time::Duration;

use idem::key::IdempotencyKey;
use idem::prelude::*;
use idem_testkit::store_cases::{completed, sqlite_schema_version};
use serde_json::{json, Value};

use crate::support::{unique, Idem};

/// The bytes of a SQLite file and of its `-wal` and `-shm` files (`None`:
/// absent).
fn file_bytes(path: &std::path::Path) -> [Option<Vec<u8>>; 3] {
    let with = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        std::fs::read(name).ok()
    };
    [std::fs::read(path).ok(), with("-wal"), with("-shm")]
}

/// `idem ls`, `show` and `stats` pointed at another application's SQLite
/// database fail as not an idem store and leave it byte for byte as it was
/// (no idem tables, no -wal or -shm file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_another_applications_sqlite_database_fails_and_changes_no_byte() {
    let dir = idem_testkit::TempDir::new("idem-cli").unwrap();
    let path = dir.path().join("other-app.db");
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);
             INSERT INTO users (name) VALUES ('ana');",
        )
        .unwrap();
    let before = file_bytes(&path);
    let idem = Idem::new(&format!("sqlite://{}", path.display()));
    for args in [
        &["ls"][..],
        &["stats"],
        &["show", "abcd"],
        &["ls", "--json"],
    ] {
        let line = idem
            .run(args)
            .await
            .fails(5, "is not an idem store")
            .to_owned();
        assert!(line.contains("other-app.db"), "{line}");
        assert_eq!(
            file_bytes(&path),
            before,
            "`idem {args:?}` changed the file"
        );
    }
}

/// A store written by an older idem (SQLite schema version 1) is listed
/// as it is and stays at version 1; `idem migrate` migrates it and says
/// so, and says when there is nothing left to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_an_older_sqlite_store_does_not_migrate_it_and_idem_migrate_does() {
    let dir = idem_testkit::TempDir::new("idem-cli").unwrap();
    let path = dir.path().join("idem-0.1.db");
    let key = "ab".repeat(32);
    let far = 4_000_000_000_000u64;
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(&format!(
        r#"CREATE TABLE idem_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
           CREATE TABLE idem_records (key TEXT PRIMARY KEY NOT NULL, expires_at INTEGER, record BLOB NOT NULL);
           INSERT INTO idem_meta (name, value) VALUES ('next_fence', 2), ('schema_version', 1);
           INSERT INTO idem_records VALUES ('{key}', {far}, CAST('{{"key":"{key}","tool":"send_email","fingerprint":"{fp}","created_at":1700000000000,"state":"completed","fence":1,"outcome":{{"status":"success","output":"{{}}"}},"completed_at":1700000000100,"expires_at":{far}}}' AS BLOB));"#,
        fp = "f".repeat(64),
    ))
    .unwrap();
    let version = || sqlite_schema_version(&path);
    let before = file_bytes(&path);
    let idem = Idem::new(&format!("sqlite://{}", path.display()));
    let listed = idem.run(&["ls", "--json"]).await.json();
    assert_eq!(listed["records"][0]["key"], key.as_str());
    idem.run(&["stats"]).await.ok();
    // Version 1 had no audit log: an empty one, and nothing created.
    let log = idem.run(&["log", "--json"]).await.json();
    assert_eq!(log["total"], 0, "{log}");
    assert_eq!(file_bytes(&path), before, "reading wrote to the file");
    assert_eq!(version(), 1);

    let now = idem::store::sqlite::SCHEMA_VERSION;
    let said = idem.run(&["migrate"]).await.ok().to_owned();
    assert!(
        said.contains(&format!("from schema version 1 to {now}")),
        "{said}"
    );
    assert_eq!(version(), i64::from(now));
    let again = idem.run(&["migrate", "--json"]).await.json();
    assert_eq!(
        (again["from"].as_u64(), again["to"].as_u64()),
        (Some(u64::from(now)), Some(u64::from(now)))
    );
    let listed = idem.run(&["ls", "--json"]).await.json();
    assert_eq!(listed["records"][0]["key"], key.as_str());
}

/// A SQLite file that does not exist yet: reading commands refuse it and
/// create nothing; `idem migrate` creates it (a new team's first store),
/// which then lists as empty; in a directory that does not exist it is
/// refused, and no directory is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_migrate_creates_a_sqlite_store_whose_file_does_not_exist_yet() {
    let dir = idem_testkit::TempDir::new("idem-cli").unwrap();
    let path = dir.path().join("new.db");
    let idem = Idem::new(&format!("sqlite://{}", path.display()));
    idem.run(&["ls"]).await.fails(5, "does not exist");
    assert!(!path.exists(), "a read creates nothing");
    let said = idem.run(&["migrate"]).await.ok().to_owned();
    assert!(said.contains("created the schema"), "{said}");
    assert!(path.is_file(), "the file was created");
    let listed = idem.run(&["ls", "--json"]).await.json();
    assert_eq!(listed["total"], 0);

    let nowhere = dir.path().join("no-such-dir").join("idem.db");
    let idem = Idem::new(&format!("sqlite://{}", nowhere.display()));
    let said = idem
        .run(&["migrate"])
        .await
        .fails(5, "does not exist")
        .to_owned();
    assert!(said.contains("the directory"), "{said}");
    assert!(!nowhere.parent().unwrap().exists(), "no directory is made");
}

/// A PostgreSQL schema or Redis prefix no idem store ever used reads as
/// not an idem store, every time (the read created nothing); `idem
/// migrate` creates the store, which then lists as empty.
async fn reading_where_no_idem_store_is_fails_until_idem_migrate_creates_one(url: &str) {
    let idem = Idem::new(url);
    for _ in 0..2 {
        idem.run(&["ls"]).await.fails(5, "is not an idem store");
        idem.run(&["stats", "--json"])
            .await
            .fails(5, "is not an idem store");
    }
    let said = idem.run(&["migrate"]).await.ok().to_owned();
    let version = match url.starts_with("postgres") {
        true => idem::store::postgres::SCHEMA_VERSION,
        false => idem::store::redis::SCHEMA_VERSION,
    };
    assert!(
        said.contains("created the schema") && said.contains(&format!("version {version}")),
        "{said}"
    );
    let listed = idem.run(&["ls", "--json"]).await.json();
    assert_eq!(listed["total"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_postgres_schema_without_idem_fails_and_creates_nothing() {
    let test = "postgres::reading_a_postgres_schema_without_idem";
    if let Some(store) = idem_testkit::stores::postgres(test).await {
        let schema = unique("fresh").replace('-', "_");
        let url = format!("{}?schema={schema}", store.url());
        reading_where_no_idem_store_is_fails_until_idem_migrate_creates_one(&url).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_redis_prefix_without_idem_fails_and_writes_nothing() {
    let test = "redis::reading_a_redis_prefix_without_idem";
    if let Some(store) = idem_testkit::stores::redis(test).await {
        let url = format!("{}?prefix={}", store.url(), unique("fresh"));
        reading_where_no_idem_store_is_fails_until_idem_migrate_creates_one(&url).await;
    }
}

/// One corrupt row: `idem ls` and `idem stats` print the rest, then name
/// the corrupt key on stderr and exit 6.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_record_is_named_loudly_and_the_rest_are_listed() {
    let dir = idem_testkit::TempDir::new("idem-cli").unwrap();
    let path = dir.path().join("idem.db");
    let store = idem::store::SqliteStore::open(&path).await.unwrap();
    let (good, bad) = ("ab".repeat(32), "cd".repeat(32));
    for key in [&good, &bad] {
        let key = IdempotencyKey::parse(key).unwrap();
        let done = idem_runtime::record::Outcome::Success {
            output: idem_runtime::record::OutputJson::from_value(&json!({ "id": 1 })),
        };
        completed(&store, &key, &done, Duration::from_secs(3600)).await;
    }
    store.close().await;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE idem_records SET record = x'00ff13' WHERE key = ?1",
            [&bad],
        )
        .unwrap();
    let idem = Idem::new(&format!("sqlite://{}", path.display()));
    for args in [&["ls", "--json"][..], &["stats", "--json"]] {
        let run = idem.run(args).await;
        assert_eq!(run.code, 6, "{args:?}: {}{}", run.stdout, run.stderr);
        assert!(run.stderr.contains(&format!("{bad:?}")), "{}", run.stderr);
        assert!(run.stderr.contains("could not be read"), "{}", run.stderr);
        let printed: Value = serde_json::from_str(&run.stdout).unwrap();
        assert!(printed.to_string().contains('1'), "{printed}");
    }
    let listed: Value = serde_json::from_str(&idem.run(&["ls", "--json"]).await.stdout).unwrap();
    assert_eq!(listed["records"][0]["key"], good.as_str());
    assert_eq!(listed["total"], 1);
}
