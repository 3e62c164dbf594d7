//! Power cuts for SQLite: what a machine that loses power leaves of a
//! database — what was fsynced, and nothing more.
//!
//! Killing a process (the kill tests, [`crate::process`]) loses nothing
//! SQLite wrote: the operating system's page cache holds it and writes it
//! out later. A power cut loses every write not yet fsynced. Copying the
//! files from outside at the moment of the "cut" would read that same page
//! cache and lose nothing, so only the layer under SQLite can tell what
//! was synced: [`PowerCut::install`] registers a SQLite VFS that delegates
//! everything to the default VFS and, for each database, WAL and rollback
//! journal file opened through it,
//!
//! * counts the `xSync` calls per kind of file ([`PowerCut::syncs`]);
//! * keeps the file's content as of its last successful `xSync` (read
//!   whole at sync time: test databases are small); a file it first sees
//!   already on disk keeps the content it had then, a file created through
//!   it and never synced has none.
//!
//! [`PowerCut::cut_power`] then does what a power cut does: from that
//! moment every write, truncation, sync, deletion and opening through this
//! VFS fails with an I/O error (the machine is off: the process's
//! connections can change nothing more), each file it tracks is put back
//! on disk as it was at its last sync (a file never synced is deleted),
//! and the `-shm` file of each database, which lives in memory on a real
//! machine, is deleted. Once the connections opened through it are closed,
//! the same files can be opened again "after the power came back" through
//! another VFS: SQLite's default one ([`SqliteOptions::default`]) or a
//! fresh [`PowerCut`].
//!
//! ```no_run
//! # async fn demo(path: &std::path::Path) {
//! use idem_runtime::store::StoreExt;
//! use idem_sqlite::{SqliteOptions, SqliteStore, Synchronous};
//! use idem_testkit::power_cut::PowerCut;
//!
//! let power = PowerCut::install("power-cut-demo");
//! let options = SqliteOptions::default()
//!     .synchronous(Synchronous::Full)
//!     .vfs(power.name());
//! let store = SqliteStore::open_with(path, options).await.unwrap();
//! // ... calls; `power.syncs()` counts their fsyncs ...
//! power.cut_power();
//! store.close().await;
//! // The power is back: what was synced, through the default VFS.
//! let store = SqliteStore::open(path).await.unwrap();
//! # drop(store);
//! # }
//! ```
//!
//! What it does not model: a write that reached the disk without a sync
//! (a real cut may keep some; this one keeps none, the harshest outcome a
//! disk may leave, and never a torn page), and directory entries (a file
//! deleted while the power is on stays deleted; a file created and never
//! synced disappears).
//!
//! A registration lives as long as the process: SQLite keeps a pointer to
//! the VFS in every connection opened through it, so it is never
//! unregistered or freed (a few hundred bytes, plus the synced images).
//!
//! [`SqliteOptions::default`]: idem_sqlite::SqliteOptions

mod vfs;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

/// A SQLite VFS whose power can be cut: see the [module docs](self).
/// Copies are handles on the same VFS.
#[derive(Clone, Copy)]
pub struct PowerCut {
    machine: &'static Machine,
}

impl std::fmt::Debug for PowerCut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.machine.lock();
        f.debug_struct("PowerCut")
            .field("name", &self.name())
            .field("on", &state.on)
            .field("syncs", &state.syncs)
            .finish()
    }
}

/// How many times SQLite synced each kind of file through a [`PowerCut`]
/// VFS (every `xSync` call while the power was on, whatever its flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Syncs {
    /// Syncs of main database files.
    pub database: u64,
    /// Syncs of write-ahead logs (`-wal`).
    pub wal: u64,
    /// Syncs of rollback journals (`-journal`).
    pub journal: u64,
}

impl Syncs {
    /// The syncs made since `earlier` (a count read before).
    pub fn since(self, earlier: Syncs) -> Syncs {
        Syncs {
            database: self.database - earlier.database,
            wal: self.wal - earlier.wal,
            journal: self.journal - earlier.journal,
        }
    }
}

impl PowerCut {
    /// Register a power-cut VFS under `name` over SQLite's default VFS, the
    /// power on. Open a store through it with
    /// [`SqliteOptions::vfs`](idem_sqlite::SqliteOptions::vfs)`(power.name())`.
    ///
    /// # Panics
    ///
    /// When `name` holds a NUL byte or a VFS of that name is already
    /// registered (each test picks its own name), or SQLite has no default
    /// VFS.
    pub fn install(name: &str) -> PowerCut {
        let c_name = CString::new(name).expect("a VFS name without NUL bytes");
        let default = vfs::DefaultVfs::find().expect("SQLite has a default VFS");
        assert!(
            !vfs::is_registered(&c_name),
            "a SQLite VFS named {name:?} is already registered; give each PowerCut its own name"
        );
        // Leaked: SQLite keeps pointers to the VFS, and so to the machine,
        // for as long as any connection opened through it lives.
        let machine: &'static Machine = Box::leak(Box::new(Machine {
            name: c_name,
            default,
            state: Mutex::new(State {
                on: true,
                syncs: Syncs::default(),
                files: BTreeMap::new(),
            }),
        }));
        if let Err(rc) = vfs::register(machine) {
            panic!("SQLite refused to register the VFS {name:?} (error {rc})");
        }
        PowerCut { machine }
    }

    /// The name the VFS is registered under.
    pub fn name(&self) -> &str {
        self.machine
            .name
            .to_str()
            .expect("made from a &str in install")
    }

    /// The syncs made through this VFS so far.
    pub fn syncs(&self) -> Syncs {
        self.machine.lock().syncs
    }

    /// Whether the power is still on.
    pub fn is_on(&self) -> bool {
        self.machine.lock().on
    }

    /// Cut the power: from now on every write, truncation, sync, deletion
    /// and opening through this VFS fails with an I/O error, and every
    /// file it tracks is put back on disk as it was at its last sync —
    /// truncated to that length, or deleted if it was never synced —
    /// and each database's `-shm` file is deleted. A second cut does
    /// nothing.
    ///
    /// It waits for a write or sync in progress through this VFS to end,
    /// so that each one either happened before the cut or fails.
    ///
    /// # Panics
    ///
    /// When a file cannot be rewritten or deleted.
    pub fn cut_power(&self) {
        let mut state = self.machine.lock();
        if !state.on {
            return;
        }
        state.on = false;
        for (path, file) in &state.files {
            match &file.synced {
                Some(image) => std::fs::write(path, image).unwrap_or_else(|e| {
                    panic!("cannot put {} back as last synced: {e}", path.display())
                }),
                None => remove_if_present(path),
            }
            if file.kind == FileKind::Database {
                let mut shm = path.clone().into_os_string();
                shm.push("-shm");
                remove_if_present(Path::new(&shm));
            }
        }
    }
}

fn remove_if_present(path: &Path) {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("cannot delete {}: {e}", path.display()),
    }
}

/// The kinds of file whose syncs are counted and whose synced content is
/// kept (temporary files, sub-journals and `-shm` are not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileKind {
    Database,
    Wal,
    Journal,
}

/// What a [`PowerCut`] VFS knows: shared by its handles and by SQLite's
/// calls into the VFS, from any thread.
struct Machine {
    name: CString,
    default: vfs::DefaultVfs,
    state: Mutex<State>,
}

impl Machine {
    /// The state; a panic elsewhere while it was held (a failed cut) does
    /// not make every later call from SQLite panic too.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct State {
    /// Whether the power is on.
    on: bool,
    syncs: Syncs,
    /// Every database, WAL and journal file opened through the VFS and not
    /// deleted since, by path.
    files: BTreeMap<PathBuf, Tracked>,
}

struct Tracked {
    kind: FileKind,
    /// The content at its last sync (or when first seen, if it existed
    /// then); `None`: created and never synced.
    synced: Option<Vec<u8>>,
}

impl State {
    fn tracks(&self, path: &Path) -> bool {
        self.files.contains_key(path)
    }

    /// `path` is opened for the first time, with the content it had on
    /// disk then (`None`: it did not exist).
    fn first_opened(&mut self, path: PathBuf, kind: FileKind, content: Option<Vec<u8>>) {
        self.files.insert(
            path,
            Tracked {
                kind,
                synced: content,
            },
        );
    }

    /// `path` was synced, and holds `content`.
    fn synced(&mut self, path: &Path, kind: FileKind, content: Vec<u8>) {
        self.files.insert(
            path.to_owned(),
            Tracked {
                kind,
                synced: Some(content),
            },
        );
    }

    fn count_sync(&mut self, kind: FileKind) {
        match kind {
            FileKind::Database => self.syncs.database += 1,
            FileKind::Wal => self.syncs.wal += 1,
            FileKind::Journal => self.syncs.journal += 1,
        }
    }

    /// `path` was deleted while the power was on: the deletion stands.
    fn deleted(&mut self, path: &Path) {
        self.files.remove(path);
    }
}

#[cfg(test)]
mod tests;
