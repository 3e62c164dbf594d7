//! What a store reports when it fails.

use std::error::Error;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crate::key::IdempotencyKey;
use crate::record::{CorruptRecord, Fence, Record, RecordState};

/// A store failed. Writes fail closed on any of these: nothing runs.
///
/// When a driver (rusqlite, redis, tokio-postgres) reported the failure,
/// its error is the [`Error::source`] of this one, so error reporters show
/// the whole chain and callers can downcast to the driver's type; the
/// message still names the store (password hidden) and the cause.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StoreError {
    /// The store cannot be reached or refused the operation.
    Unavailable {
        /// The store (`"sqlite:/var/lib/app/idem.db"`, `"redis://…"`).
        store: String,
        /// The cause.
        cause: Cause,
    },
    /// The writer's fence is not the current owner's.
    StaleFence {
        /// The key.
        key: IdempotencyKey,
        /// The fence offered.
        given: Fence,
        /// The current owner, if any.
        current: FenceHolder,
    },
    /// A stored record could not be decoded.
    Corrupt(CorruptRecord),
    /// The store holds data written by a newer version of idem.
    SchemaTooNew {
        /// The store.
        store: String,
        /// The version found.
        found: u32,
        /// The newest version understood.
        supported: u32,
    },
    /// There is no store where the URL points (a SQLite file that does
    /// not exist), and a store opened read-only creates none.
    NoStore {
        /// The store.
        store: String,
    },
    /// What the URL names holds no idem store: a database of another
    /// application, or a server or schema idem never wrote to. Nothing in
    /// it was changed.
    NotAnIdemStore {
        /// The store.
        store: String,
        /// What was found instead.
        cause: Cause,
    },
    /// The store holds data of an older schema version than a store opened
    /// read-only can read; opening it read-write (`idem migrate`) migrates
    /// it. Nothing was changed.
    SchemaTooOld {
        /// The store.
        store: String,
        /// The version found.
        found: u32,
        /// The oldest version read without migrating.
        oldest_readable: u32,
    },
    /// The store is full or out of space.
    Full {
        /// The store.
        store: String,
        /// The cause.
        cause: Cause,
    },
    /// The store only allows reading (a read-only database file or
    /// directory, a read-only replica): no claim can be recorded, so nothing
    /// may run.
    ReadOnly {
        /// The store.
        store: String,
        /// The cause.
        cause: Cause,
    },
    /// The store is misconfigured (a bad option or value in its URL).
    Config(String),
    /// No backend opens the URL's scheme.
    UnknownScheme {
        /// The URL (password hidden).
        store: String,
        /// A URL of each backend this build has, as `memory:, sqlite://PATH
        /// or redis://HOST`.
        expected: String,
    },
    /// The URL's backend exists, but this build was made without it.
    NotBuilt {
        /// The URL (password hidden).
        store: String,
        /// The Cargo feature that builds the backend: `redis`.
        feature: &'static str,
    },
    /// The URL is not one its backend reads.
    InvalidUrl {
        /// The URL (password hidden).
        store: String,
        /// What is wrong with it, and what to write.
        reason: String,
    },
    /// The store keeps nothing between processes (`memory:`): there is no
    /// schema to migrate.
    NothingToMigrate {
        /// The store.
        store: String,
    },
    /// An environment variable naming the store is not valid UTF-8.
    EnvNotUnicode {
        /// The variable: `IDEM_STORE`.
        var: &'static str,
    },
    /// The store was closed with [`Store::close`](super::Store::close):
    /// nothing was written and nothing ran.
    Closed {
        /// The store.
        store: String,
    },
    /// The URL asks for TLS (`rediss://`, PostgreSQL's `sslmode=require`,
    /// `verify-ca` or `verify-full`), and this build of idem connects to
    /// Redis and PostgreSQL in plain text only: refused before connecting,
    /// rather than connecting without the protection the URL asked for.
    TlsUnsupported {
        /// The store (password hidden).
        store: String,
        /// `Redis` or `PostgreSQL`.
        backend: &'static str,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Unavailable { store, cause } => {
                write!(f, "store {store} is unavailable: {cause}")
            }
            StoreError::StaleFence {
                key,
                given,
                current,
            } => write!(
                f,
                "stale fence for key {key}: {given} is no longer the owner (current owner: {current}); the write was rejected"
            ),
            StoreError::Corrupt(e) => fmt::Display::fmt(e, f),
            StoreError::SchemaTooNew {
                store,
                found,
                supported,
            } => write!(
                f,
                "store {store} has schema version {found}, newer than this idem understands ({supported}); upgrade idem"
            ),
            StoreError::NoStore { store } => write!(
                f,
                "no idem store at {store}; nothing was created (a store is created when it is first opened read-write)"
            ),
            StoreError::NotAnIdemStore { store, cause } => write!(
                f,
                "{store} is not an idem store ({cause}); it was left untouched"
            ),
            StoreError::SchemaTooOld {
                store,
                found,
                oldest_readable,
            } => write!(
                f,
                "store {store} has schema version {found}, older than this idem reads without migrating ({oldest_readable}); run `idem migrate` to migrate it, then read it again"
            ),
            StoreError::Full { store, cause } => write!(f, "store {store} is full: {cause}"),
            StoreError::ReadOnly { store, cause } => write!(
                f,
                "store {store} is read-only: {cause}; nothing was written and nothing ran"
            ),
            StoreError::Config(message) => write!(f, "store configuration error: {message}"),
            StoreError::UnknownScheme { store, expected } => write!(
                f,
                "store configuration error: unknown store URL scheme in {store:?}; expected {expected}"
            ),
            StoreError::NotBuilt { store, feature } => write!(
                f,
                "store configuration error: {store} needs idem built with the `{feature}` feature"
            ),
            StoreError::InvalidUrl { store, reason } => {
                write!(f, "store configuration error: {store:?}: {reason}")
            }
            StoreError::NothingToMigrate { store } => write!(
                f,
                "store configuration error: {store} keeps nothing between processes, so there is nothing to migrate"
            ),
            StoreError::EnvNotUnicode { var } => {
                write!(f, "store configuration error: {var} is not valid UTF-8")
            }
            StoreError::Closed { store } => write!(
                f,
                "store {store} is closed; nothing was written and nothing ran"
            ),
            StoreError::TlsUnsupported { store, backend } => write!(
                f,
                "store {store} asks for TLS, and this build of idem has no TLS support for {backend}; connect over a trusted network, or through a local TLS proxy (stunnel, a sidecar) with a plain URL to it"
            ),
        }
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            StoreError::Unavailable { cause, .. }
            | StoreError::NotAnIdemStore { cause, .. }
            | StoreError::Full { cause, .. }
            | StoreError::ReadOnly { cause, .. } => {
                cause.source().map(|e| e as &(dyn Error + 'static))
            }
            // Transparent: the corrupt record's message is this error's.
            StoreError::Corrupt(e) => e.source(),
            _ => None,
        }
    }
}

impl From<CorruptRecord> for StoreError {
    fn from(e: CorruptRecord) -> StoreError {
        StoreError::Corrupt(e)
    }
}

/// Why a store is unavailable, full or read-only: a message for people
/// and, when a driver reported it, the driver's error, which becomes the
/// [`Error::source`] of the [`StoreError`]. Shared, so that the error stays
/// `Clone`.
///
/// It reads as its message (`Deref<Target = str>`, `Display`), and converts
/// from a `String` or `&str` for a cause without a driver error:
///
/// ```
/// use idem_runtime::store::{Cause, StoreError};
/// use std::error::Error;
///
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
/// let e = StoreError::Unavailable {
///     store: "redis://cache:6379".into(),
///     cause: Cause::from_error(io),
/// };
/// assert_eq!(e.to_string(), "store redis://cache:6379 is unavailable: connection refused");
/// assert!(e.source().unwrap().downcast_ref::<std::io::Error>().is_some());
///
/// let plain = StoreError::Full { store: "memory".into(), cause: "no room".into() };
/// assert!(plain.source().is_none());
/// ```
#[derive(Clone)]
pub struct Cause {
    message: String,
    source: Option<Arc<dyn Error + Send + Sync + 'static>>,
}

impl Cause {
    /// A cause with no driver error behind it.
    pub fn new(message: impl Into<String>) -> Cause {
        Cause {
            message: message.into(),
            source: None,
        }
    }

    /// A cause told by `message`, reported by the driver as `source`.
    pub fn with_source(
        message: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Cause {
        Cause {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// The driver's error `source`, told by its own message.
    pub fn from_error(source: impl Error + Send + Sync + 'static) -> Cause {
        Cause::with_source(source.to_string(), source)
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The driver's error, if one reported the cause.
    pub fn source(&self) -> Option<&(dyn Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Cause");
        d.field("message", &self.message);
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Deref for Cause {
    type Target = str;
    fn deref(&self) -> &str {
        &self.message
    }
}

impl From<String> for Cause {
    fn from(message: String) -> Cause {
        Cause::new(message)
    }
}

impl From<&str> for Cause {
    fn from(message: &str) -> Cause {
        Cause::new(message)
    }
}

/// Who holds a key, as reported by a stale-fence rejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceHolder {
    /// Another owner holds it in flight.
    InFlight(Fence),
    /// It awaits approval, last written with this fence.
    AwaitingApproval(Fence),
    /// It was completed by this fence.
    Completed(Fence),
    /// No record exists (released, swept).
    Nobody,
}

impl fmt::Display for FenceHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceHolder::InFlight(fence) => write!(f, "{fence}, in flight"),
            FenceHolder::AwaitingApproval(fence) => write!(f, "{fence}, awaiting approval"),
            FenceHolder::Completed(fence) => write!(f, "{fence}, completed"),
            FenceHolder::Nobody => f.write_str("nobody"),
        }
    }
}

impl FenceHolder {
    /// The holder of `record`, or nobody.
    pub fn of(record: Option<&Record>) -> FenceHolder {
        match record.map(|r| &r.state) {
            None => FenceHolder::Nobody,
            Some(RecordState::InFlight { fence, .. }) => FenceHolder::InFlight(*fence),
            Some(RecordState::AwaitingApproval { fence, .. }) => {
                FenceHolder::AwaitingApproval(*fence)
            }
            Some(RecordState::Completed { fence, .. }) => FenceHolder::Completed(*fence),
        }
    }
}
