//! The checkpointer thread, which copies the WAL back into the database
//! file off the writer's commit path.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use rusqlite::wal::CheckpointMode;
use rusqlite::{Connection, OpenFlags};

use crate::options::SqliteOptions;
use crate::shared::Shared;

/// WAL pages (4 KiB each by default) after which the checkpointer copies
/// the WAL back into the database file: SQLite's own autocheckpoint
/// threshold.
pub const CHECKPOINT_PAGES: i32 = 1000;

/// WAL pages after which the writer checkpoints itself, after a commit,
/// when the checkpointer has not let the WAL start over: the bound on the
/// WAL's size (plus one transaction).
pub const WAL_LIMIT_PAGES: i32 = 8 * CHECKPOINT_PAGES;

/// The longest a sweep waits between two batches for the checkpointer to
/// finish the checkpoints asked of it (see [`StoreExt::sweep`] on
/// [`SqliteStore`]).
///
/// [`StoreExt::sweep`]: idem_runtime::store::StoreExt::sweep
/// [`SqliteStore`]: crate::SqliteStore
pub const SWEEP_CHECKPOINT_WAIT: Duration = Duration::from_secs(1);

impl Shared {
    /// Whether the checkpointer has finished every checkpoint asked of it.
    pub(super) fn checkpoints_caught_up(&self) -> bool {
        self.checkpoints_done.load(Ordering::SeqCst)
            >= self.checkpoints_asked.load(Ordering::SeqCst)
    }
}

/// Move checkpoints off the writer's commit path: a thread with its own
/// connection checkpoints when the writer's WAL hook says the WAL has grown
/// past [`CHECKPOINT_PAGES`]; past [`WAL_LIMIT_PAGES`] the hook checkpoints
/// itself. Registering the hook turns SQLite's autocheckpoint off; when
/// anything here fails the autocheckpoint stays, as before. The thread
/// ends once the writer's connection (which owns the hook, the only sender
/// to the thread) is closed.
pub(super) fn start_checkpointer(
    shared: &Arc<Shared>,
    options: &SqliteOptions,
    writer: &mut Connection,
) -> Option<std::thread::JoinHandle<()>> {
    let warn = |e: &dyn fmt::Display| {
        tracing::warn!(store = %shared.name, error = %e, "no checkpointer thread; the writer checkpoints");
    };
    let open = || -> rusqlite::Result<Connection> {
        let conn = shared.open_connection(
            &shared.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // What a checkpoint syncs follows the store's durability.
        conn.pragma_update(None, "synchronous", options.synchronous.pragma())?;
        Ok(conn)
    };
    let conn = open().map_err(|e| warn(&e)).ok()?;
    // One pending request is enough: a checkpoint copies whatever the WAL
    // holds when it starts.
    let (ask, asked) = mpsc::sync_channel::<()>(1);
    let thread_shared = shared.clone();
    let thread = std::thread::Builder::new()
        .name("idem-sqlite-checkpoint".into())
        .spawn(move || {
            while asked.recv().is_ok() {
                // PASSIVE waits for nobody and copies what no reader still
                // needs; a failure is retried at the next request.
                let done = conn.wal_checkpoint_v2(Some(rusqlite::MAIN_DB), CheckpointMode::PASSIVE);
                if let Err(e) = done {
                    tracing::debug!(error = %e, "checkpoint failed");
                }
                thread_shared
                    .checkpoints_done
                    .fetch_add(1, Ordering::SeqCst);
            }
        })
        .map_err(|e| warn(&e))
        .ok()?;
    // The WAL's size when the checkpointer was last asked: it is asked
    // once per CHECKPOINT_PAGES new pages, not after every commit while
    // the WAL is long (each checkpoint syncs both files).
    let mut asked_at = 0;
    let hook_shared = shared.clone();
    let hook = move |wal: &mut rusqlite::hooks::Wal, pages: i32| {
        if pages < asked_at {
            asked_at = 0; // the WAL started over
        }
        if pages >= WAL_LIMIT_PAGES {
            // The transaction is committed whatever this returns: an error
            // here would only make its COMMIT report one.
            let _ = wal.checkpoint_v2(CheckpointMode::PASSIVE);
        } else if pages - asked_at >= CHECKPOINT_PAGES {
            asked_at = pages;
            // Counted only when sent: a request still pending covers this
            // one.
            if ask.try_send(()).is_ok() {
                hook_shared.checkpoints_asked.fetch_add(1, Ordering::SeqCst);
            }
        }
        Ok(())
    };
    if let Err(e) = writer.wal_hook(Some(hook)) {
        warn(&e);
    }
    Some(thread)
}
