//! The providers' ledger: every request a simulated provider receives, as
//! it receives it. It is the ground truth the checks read ([`oracle`]):
//! written by the providers, never by idem, so an effect applied twice
//! shows there whatever idem's records say.
//!
//! One ledger type, two places to keep it:
//!
//! * **In memory** ([`Ledger::in_memory`]), for schedules run in one
//!   process (the fault simulation).
//! * **In an append-only file** ([`Ledger::file`]) that several processes
//!   share, for workers killed with SIGKILL ([`process`]): each request is
//!   one line (the entry as JSON) written with a single `write` to a file
//!   opened with `O_APPEND`, then fsynced before the provider answers, so
//!   a killed worker left the whole line or none of it. An exclusive lock
//!   on the file (released by the kernel when a holder dies) makes "has
//!   this key been seen?" and the append one step, as a provider that
//!   honours keys does it.
//!
//! [`oracle`]: crate::oracle
//! [`process`]: crate::process

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Which provider received a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// Payments: honours `Idempotency-Key`, a repeat applies nothing.
    Payments,
    /// The mailer: no keys, every request is an email.
    Mailer,
    /// The account service: no keys, every request deletes.
    Accounts,
}

/// One request a provider received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The provider.
    pub provider: Provider,
    /// The idempotency key the tool ran under.
    pub key: String,
    /// What the request is about: the account charged or deleted, the
    /// recipient mailed.
    pub subject: String,
    /// The provider's id of the effect: charge id, Message-ID, request id
    /// (for a repeat, the first request's).
    pub id: String,
    /// The effect, as the trace and the checks show it.
    pub effect: String,
    /// Whether the request applied an effect (`false`: a repeat that the
    /// provider answered from its first response).
    pub applied: bool,
    /// The process that sent it.
    pub pid: u32,
}

/// Where a ledger's entries are.
#[derive(Debug)]
enum Keep {
    Memory(Mutex<Vec<Entry>>),
    File { path: PathBuf, file: File },
}

/// The providers' ledger, in memory or in an append-only file shared
/// between processes (see the [module docs](self)).
#[derive(Debug)]
pub struct Ledger {
    keep: Keep,
}

impl Ledger {
    /// An empty ledger in this process's memory.
    pub fn in_memory() -> Ledger {
        Ledger {
            keep: Keep::Memory(Mutex::new(Vec::new())),
        }
    }

    /// The ledger in the append-only file at `path`, created if missing,
    /// shared with every process that opens it.
    ///
    /// # Panics
    ///
    /// When the file cannot be opened.
    pub fn file(path: &Path) -> Ledger {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        Ledger {
            keep: Keep::File {
                path: path.to_owned(),
                file,
            },
        }
    }

    /// Receive a request: `entry` is given the entries so far and returns
    /// the new one, which is appended, all in one step that no other
    /// request (of this process or another) comes between.
    pub(crate) fn receive(&self, entry: impl FnOnce(&[Entry]) -> Entry) -> Entry {
        match &self.keep {
            Keep::Memory(entries) => {
                let mut entries = lock(entries);
                let new = entry(&entries);
                entries.push(new.clone());
                new
            }
            Keep::File { path, file } => {
                file.lock().expect("lock the ledger");
                let new = entry(&read(path));
                let mut line = serde_json::to_string(&new).expect("an entry serializes");
                line.push('\n');
                append_line(file, &line);
                file.sync_data().expect("fsync the ledger");
                file.unlock().expect("unlock the ledger");
                new
            }
        }
    }

    /// Every entry, in the order received.
    pub fn entries(&self) -> Vec<Entry> {
        match &self.keep {
            Keep::Memory(entries) => lock(entries).clone(),
            Keep::File { path, .. } => read(path),
        }
    }
}

/// The entries of the ledger file at `path` (none if it does not exist).
///
/// # Panics
///
/// On a line that is not an entry.
pub fn read(path: &Path) -> Vec<Entry> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: a malformed entry {line:?}: {e}", path.display()))
        })
        .collect()
}

/// One line in one `write`: with `O_APPEND`, a kill leaves the whole line
/// or none of it, and lines of several processes never interleave.
pub(crate) fn append_line(mut file: &File, line: &str) {
    let written = file.write(line.as_bytes()).expect("append a line");
    assert_eq!(written, line.len(), "a short append");
}

/// A poisoned mutex only means another task panicked mid-statement; the
/// simulation's data is still what it was, and the panic is reported
/// anyway.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
