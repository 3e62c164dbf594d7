//! The VFS against plain SQLite connections: what a cut keeps is what
//! was synced, and nothing is written once the power is off.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use super::{PowerCut, Syncs};
use crate::TempDir;

/// A connection to `path` through `power`'s VFS, in WAL mode, committing
/// with `synchronous` (FULL, NORMAL, OFF).
fn open(path: &Path, power: PowerCut, synchronous: &str) -> Connection {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
    let conn = Connection::open_with_flags_and_vfs(path, flags, power.name()).unwrap();
    conn.pragma_update(None, "synchronous", synchronous)
        .unwrap();
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    conn
}

fn rows(path: &Path) -> Vec<i64> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn.prepare("SELECT n FROM t ORDER BY n").unwrap();
    let rows = stmt.query_map([], |row| row.get(0)).unwrap();
    rows.map(Result::unwrap).collect()
}

#[test]
fn a_cut_keeps_the_commits_that_were_synced_and_loses_the_others() {
    let dir = TempDir::new("idem-power-cut-vfs").unwrap();
    let path = dir.path().join("t.db");
    let power = PowerCut::install("idem-power-cut-vfs-keeps");
    let conn = open(&path, power, "FULL");
    conn.execute_batch("CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (1);")
        .unwrap();
    let before = power.syncs();
    conn.execute("INSERT INTO t VALUES (2)", []).unwrap();
    assert_eq!(
        power.syncs().since(before),
        Syncs {
            wal: 1,
            ..Syncs::default()
        },
        "a FULL commit in WAL mode syncs the WAL once"
    );
    conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
    let before = power.syncs();
    conn.execute("INSERT INTO t VALUES (3)", []).unwrap();
    assert_eq!(power.syncs().since(before), Syncs::default());
    // Read from outside, the page cache holds the unsynced commit.
    assert_eq!(rows(&path), [1, 2, 3]);

    power.cut_power();
    assert!(!power.is_on());
    let err = conn.execute("INSERT INTO t VALUES (4)", []).unwrap_err();
    assert_eq!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::SystemIoFailure),
        "{err}"
    );
    drop(conn);

    assert_eq!(rows(&path), [1, 2], "what was synced, nothing more");
}

#[test]
fn a_cut_deletes_the_files_never_synced() {
    let dir = TempDir::new("idem-power-cut-vfs").unwrap();
    let path = dir.path().join("t.db");
    let power = PowerCut::install("idem-power-cut-vfs-never-synced");
    let conn = open(&path, power, "OFF");
    conn.execute_batch("CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (1);")
        .unwrap();
    assert_eq!(power.syncs(), Syncs::default());
    assert!(path.exists());

    power.cut_power();
    drop(conn);
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.clone().into_os_string();
        file.push(suffix);
        assert!(!Path::new(&file).exists(), "t.db{suffix} is still there");
    }
}

#[test]
fn a_file_already_on_disk_is_kept_as_it_was_first_seen() {
    let dir = TempDir::new("idem-power-cut-vfs").unwrap();
    let path = dir.path().join("t.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER); INSERT INTO t VALUES (1);")
            .unwrap();
    }
    let power = PowerCut::install("idem-power-cut-vfs-first-seen");
    let conn = open(&path, power, "OFF");
    conn.execute("INSERT INTO t VALUES (2)", []).unwrap();

    power.cut_power();
    drop(conn);
    assert_eq!(rows(&path), [1]);
}
