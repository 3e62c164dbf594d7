//! The index of open records (schema version 4): a file of version 3 is
//! read as it is when opened read-only, and migrated — its open records
//! indexed — when opened to write.

use std::collections::BTreeMap;
use std::path::Path;

use crate::sqlite_support::{snapshot, sqlite};
use idem_conformance::random_key;
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{
    CallInfo, FailureCode, Fence, Outcome, OutputJson, Record, RecordState, StoredFailure,
};
use idem_runtime::store::ScanPage;
use idem_runtime::store::StoreExt;
use idem_sqlite::SqliteStore;
use idem_testkit::store_cases::{fingerprint, sqlite_schema_version};
use idem_testkit::TempDir;

/// Far in the future, in milliseconds.
const FAR: u64 = 4_000_000_000_000;

fn record(key: &IdempotencyKey, created_at: u64, state: RecordState) -> Record {
    Record {
        key: key.clone(),
        tool: "send_email".into(),
        fingerprint: fingerprint(),
        created_at: Timestamp(created_at),
        state,
        steps: BTreeMap::new(),
        info: CallInfo::default(),
        worker: None,
        audit: Vec::new(),
    }
}

fn completed(outcome: Outcome) -> RecordState {
    RecordState::Completed {
        fence: Fence(1),
        outcome,
        completed_at: Timestamp(1_700_000_000_500),
        expires_at: Timestamp(FAR),
    }
}

/// A file as idem wrote schema version 3: its tables and indexes, and
/// `records` as they were stored then (an unknown outcome with no expiry
/// column), plus one row that is not JSON.
fn version_3_file(path: &Path, records: &[Record]) {
    let mut sql = String::from(
        "CREATE TABLE idem_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);
         CREATE TABLE idem_records (key TEXT PRIMARY KEY NOT NULL, expires_at INTEGER, record BLOB NOT NULL);
         CREATE INDEX idem_records_expiry ON idem_records (expires_at) WHERE expires_at IS NOT NULL;
         CREATE TABLE idem_audit (seq INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL,
                                  key TEXT NOT NULL, event TEXT NOT NULL);
         CREATE INDEX idem_audit_key ON idem_audit (key, seq);
         CREATE INDEX idem_audit_at ON idem_audit (at);
         INSERT INTO idem_meta (name, value) VALUES ('next_fence', 10), ('schema_version', 3);",
    );
    for r in records {
        let text = String::from_utf8(r.to_bytes()).unwrap().replace('\'', "''");
        let expires = r
            .expires_at()
            .map_or("NULL".to_owned(), |t| t.as_millis().to_string());
        sql.push_str(&format!(
            "INSERT INTO idem_records VALUES ('{}', {expires}, CAST('{text}' AS BLOB));",
            r.key
        ));
    }
    sql.push_str(&format!(
        "INSERT INTO idem_records VALUES ('{}', NULL, x'00ff13');",
        random_key()
    ));
    sqlite(path, &sql);
}

/// Every page of an open scan with pages of `size`: the keys in order,
/// and the corrupt rows reported.
async fn open_keys(store: &SqliteStore, size: usize) -> (Vec<IdempotencyKey>, usize) {
    let (mut keys, mut corrupt, mut cursor) = (Vec::new(), 0, None);
    loop {
        let ScanPage {
            records,
            corrupt: bad,
            cursor: next,
        } = store.scan_open(cursor.as_deref(), size).await.unwrap();
        keys.extend(records.into_iter().map(|r| r.key));
        corrupt += bad.len();
        match next {
            Some(next) => cursor = Some(next),
            None => return (keys, corrupt),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_file_lists_its_open_records_read_only_and_once_migrated() {
    let dir = TempDir::new("idem-sqlite").unwrap();
    let path = dir.path().join("idem-0.3.db");
    let keys: Vec<IdempotencyKey> = (0..6).map(|_| random_key()).collect();
    let t = 1_700_000_000_000;
    let failure = Outcome::Failure {
        failure: StoredFailure {
            code: FailureCode::Permanent,
            message: "no".into(),
            details: None,
        },
    };
    let records = [
        record(
            &keys[0],
            t,
            RecordState::InFlight {
                fence: Fence(1),
                lease_until: Timestamp(FAR),
            },
        ),
        record(
            &keys[1],
            t + 1,
            completed(Outcome::Success {
                output: OutputJson::new("sent").unwrap(),
            }),
        ),
        record(
            &keys[2],
            t + 2,
            RecordState::AwaitingApproval {
                fence: Fence(3),
                requested_at: Timestamp(t + 2),
                expires_at: Timestamp(FAR),
                message: "may I?".into(),
            },
        ),
        record(&keys[3], t + 3, completed(failure)),
        record(
            &keys[4],
            t + 3,
            completed(Outcome::Unknown {
                reason: "owner vanished".into(),
            }),
        ),
        // A lapsed approval request, not yet swept: not open any more.
        record(
            &keys[5],
            t + 4,
            RecordState::AwaitingApproval {
                fence: Fence(6),
                requested_at: Timestamp(t + 4),
                expires_at: Timestamp(t + 5),
                message: "too late".into(),
            },
        ),
    ];
    version_3_file(&path, &records);
    let expected = vec![keys[4].clone(), keys[2].clone(), keys[0].clone()];

    // Read-only: the file has no index of open records, and is read as it
    // is (the whole of it per page), never written.
    let before = snapshot(&path);
    let reader = SqliteStore::open_read_only(&path).await.unwrap();
    assert_eq!(reader.schema_found(), Some(3));
    for size in [1, 2, 50] {
        let (listed, _) = open_keys(&reader, size).await;
        assert_eq!(listed, expected, "read-only, pages of {size}");
    }
    reader.close().await;
    assert_eq!(snapshot(&path), before, "the file was written");
    assert_eq!(sqlite_schema_version(&path), 3);

    // Opened to write: migrated, its open records indexed.
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.schema_found(), Some(3));
    for size in [1, 2, 50] {
        let (listed, corrupt) = open_keys(&store, size).await;
        assert_eq!(listed, expected, "migrated, pages of {size}");
        // The row that is not JSON has no creation time to be indexed by.
        assert_eq!(corrupt, 0);
    }
    store.close().await;
    assert_eq!(
        sqlite_schema_version(&path),
        i64::from(idem_sqlite::SCHEMA_VERSION)
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    let indexed: Vec<(String, i64)> = conn
        .prepare("SELECT key, open_at FROM idem_records WHERE open_at IS NOT NULL ORDER BY open_at")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut want: Vec<(String, i64)> = [0, 2, 4, 5]
        .iter()
        .map(|&i| {
            (
                keys[i].to_string(),
                records[i].created_at.as_millis() as i64,
            )
        })
        .collect();
    want.sort_by_key(|(_, at)| *at);
    assert_eq!(
        indexed, want,
        "the open records (the lapsed request too: it is left out when read)"
    );
    let index: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'idem_records_open'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(index, 1);
}
