//! What a store reports when it fails.

use std::error::Error;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use super::TlsFailure;
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
    /// The URL's query holds options its backend does not know (a misspelt
    /// name, often): refused rather than ignored, before anything
    /// connects. Which options, and which the backend knows: the
    /// [`UnknownOption`], boxed (as a [`BadOption`] is) so that every
    /// `StoreError` stays small.
    UnknownOption(Box<UnknownOption>),
    /// An option the backend knows has a value it cannot take: SQLite's
    /// `busy_timeout_ms` not a number or `synchronous` neither `full` nor
    /// `normal`, Redis's `replicas` not a number, a Redis key prefix with a
    /// malformed `%`-escape, empty or with braces, a PostgreSQL `schema`
    /// idem cannot use. Refused before anything connects. Which option,
    /// its value and what it must be: the [`BadOption`], boxed.
    BadOption(Box<BadOption>),
    /// A scan or audit cursor this store did not give out (a cursor of
    /// another backend, or mangled on the way back).
    BadCursor {
        /// The store (password hidden).
        store: String,
        /// The cursor given.
        cursor: String,
        /// Which: `scan` ([`StoreExt::scan`](super::StoreExt::scan)) or `audit`
        /// ([`StoreExt::audit`](super::StoreExt::audit)).
        kind: &'static str,
    },
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
    /// The URL as a whole is not one its backend reads: not of the
    /// backend's form, naming no file, refused by the driver's URL parser,
    /// naming what the backend has no room for (a database of a Redis
    /// Cluster, several servers without `+cluster`, PostgreSQL's schema
    /// twice).
    InvalidUrl {
        /// The URL (password hidden).
        store: String,
        /// What is wrong with it, and what to write. When the driver's URL
        /// parser refused the URL, its message says so, and its error is
        /// the [`Error::source`] of this one.
        reason: Cause,
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
    /// The store was closed with [`StoreExt::close`](super::StoreExt::close):
    /// nothing was written and nothing ran.
    Closed {
        /// The store.
        store: String,
    },
    /// A TLS connection to the store could not be made: the server's
    /// certificate did not verify, the server refused the client
    /// certificate, or the URL and the server disagree about TLS (a TLS URL
    /// to a plain server, a plain URL to a TLS-only one). Nothing was sent
    /// but the handshake. Which host, what went wrong and what to write:
    /// the [`TlsFailure`], boxed.
    Tls(Box<TlsFailure>),
}

impl StoreError {
    /// Whether the error says the store cannot be used as it was
    /// configured — a scheme, URL, option, schema version or TLS problem,
    /// met when the store is opened (or reconnects) — rather than that one
    /// operation failed on a store that works (unavailable, stale fence,
    /// corrupt record, full, read-only, a bad cursor, closed).
    ///
    /// An open-time error does not go away by retrying: a person changes
    /// the configuration (the URL, the certificate, the idem version).
    ///
    /// ```
    /// use idem_runtime::store::StoreError;
    ///
    /// let typo = StoreError::UnknownScheme {
    ///     store: "sqlit://x".into(),
    ///     expected: "memory: or sqlite://PATH".into(),
    /// };
    /// assert!(typo.at_open());
    /// let down = StoreError::Unavailable {
    ///     store: "redis://h".into(),
    ///     cause: "connection refused".into(),
    /// };
    /// assert!(!down.at_open());
    /// ```
    pub fn at_open(&self) -> bool {
        match self {
            StoreError::SchemaTooNew { .. }
            | StoreError::NoStore { .. }
            | StoreError::NotAnIdemStore { .. }
            | StoreError::SchemaTooOld { .. }
            | StoreError::UnknownOption(_)
            | StoreError::BadOption(_)
            | StoreError::UnknownScheme { .. }
            | StoreError::NotBuilt { .. }
            | StoreError::InvalidUrl { .. }
            | StoreError::NothingToMigrate { .. }
            | StoreError::EnvNotUnicode { .. }
            | StoreError::Tls(_) => true,
            StoreError::Unavailable { .. }
            | StoreError::StaleFence { .. }
            | StoreError::Corrupt(_)
            | StoreError::Full { .. }
            | StoreError::ReadOnly { .. }
            | StoreError::BadCursor { .. }
            | StoreError::Closed { .. } => false,
        }
    }
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
            StoreError::UnknownOption(e) => {
                let UnknownOption {
                    store,
                    backend,
                    options,
                    known,
                } = &**e;
                let plural = if options.len() == 1 { "" } else { "s" };
                write!(f, "store configuration error: unknown {backend} option{plural} ")?;
                for (i, option) in options.iter().enumerate() {
                    let comma = if i == 0 { "" } else { ", " };
                    write!(f, "{comma}{option:?}")?;
                }
                write!(f, " in {store:?}; known: {known}")
            }
            StoreError::BadOption(e) => {
                let BadOption {
                    store,
                    option,
                    value,
                    expected,
                } = &**e;
                write!(
                    f,
                    "store configuration error: {store:?}: {option} {value:?} is not {expected}"
                )
            }
            StoreError::BadCursor {
                store,
                cursor,
                kind,
            } => {
                let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                };
                write!(
                    f,
                    "store configuration error: {cursor:?} is not {article} {kind} cursor of {store}"
                )
            }
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
            StoreError::Tls(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl Error for StoreError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            StoreError::Unavailable { cause, .. }
            | StoreError::NotAnIdemStore { cause, .. }
            | StoreError::Full { cause, .. }
            | StoreError::ReadOnly { cause, .. }
            | StoreError::InvalidUrl { reason: cause, .. } => {
                cause.source().map(|e| e as &(dyn Error + 'static))
            }
            // Transparent: the corrupt record's message is this error's.
            StoreError::Corrupt(e) => e.source(),
            StoreError::Tls(e) => e
                .cause
                .as_ref()
                .and_then(Cause::source)
                .map(|e| e as &(dyn Error + 'static)),
            _ => None,
        }
    }
}

impl From<CorruptRecord> for StoreError {
    fn from(e: CorruptRecord) -> StoreError {
        StoreError::Corrupt(e)
    }
}

impl From<UnknownOption> for StoreError {
    fn from(e: UnknownOption) -> StoreError {
        StoreError::UnknownOption(Box::new(e))
    }
}

impl From<BadOption> for StoreError {
    fn from(e: BadOption) -> StoreError {
        StoreError::BadOption(Box::new(e))
    }
}

/// Options in a store URL's query that its backend does not know:
/// [`StoreError::UnknownOption`].
///
/// ```
/// use idem_runtime::store::{StoreError, UnknownOption};
///
/// let e = StoreError::from(UnknownOption {
///     store: "redis://:***@cache/?prefx=app1".into(),
///     backend: "Redis",
///     options: vec!["prefx".into()],
///     known: "prefix=NAME, replicas=N, protocol=resp2|resp3",
/// });
/// assert_eq!(
///     e.to_string(),
///     r#"store configuration error: unknown Redis option "prefx" in "redis://:***@cache/?prefx=app1"; known: prefix=NAME, replicas=N, protocol=resp2|resp3"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownOption {
    /// The URL (password hidden).
    pub store: String,
    /// The backend: `SQLite` or `Redis`.
    pub backend: &'static str,
    /// The names of the options not known, as the URL writes them, in its
    /// order.
    pub options: Vec<String>,
    /// The options the backend knows, for people: `synchronous=full|normal,
    /// busy_timeout_ms=N`.
    pub known: &'static str,
}

/// An option of a store URL with a value it cannot take:
/// [`StoreError::BadOption`].
///
/// ```
/// use idem_runtime::store::{BadOption, StoreError};
///
/// let e = StoreError::from(BadOption {
///     store: "sqlite://idem.db?busy_timeout_ms=soon".into(),
///     option: "busy_timeout_ms",
///     value: "soon".into(),
///     expected: "a number of milliseconds",
/// });
/// assert_eq!(
///     e.to_string(),
///     r#"store configuration error: "sqlite://idem.db?busy_timeout_ms=soon": busy_timeout_ms "soon" is not a number of milliseconds"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadOption {
    /// The URL (password hidden).
    pub store: String,
    /// The option, as the URL names it: `busy_timeout_ms`, `synchronous`,
    /// `replicas`, `prefix`, `schema`. (A Redis key prefix given in
    /// `RedisOptions` rather than in the URL is `prefix` too.)
    pub option: &'static str,
    /// The value given, as the URL writes it (a Redis prefix refused for
    /// being empty or holding braces: as decoded).
    pub value: String,
    /// What the value must be, read after "is not": `a number of
    /// milliseconds`.
    pub expected: &'static str,
}

/// Why a store is unavailable, full or read-only, or its URL invalid: a
/// message for people and, when a driver reported it, the driver's error,
/// which becomes the
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_refusals_read_as_configuration_errors_naming_what_is_wrong() {
        let cases = [
            (
                StoreError::from(UnknownOption {
                    store: "redis://:***@cache/".into(),
                    backend: "Redis",
                    options: vec!["prefx".into(), "db".into()],
                    known: "prefix=NAME",
                }),
                r#"store configuration error: unknown Redis options "prefx", "db" in "redis://:***@cache/"; known: prefix=NAME"#,
            ),
            (
                StoreError::from(UnknownOption {
                    store: "sqlite://idem.db?journal=off".into(),
                    backend: "SQLite",
                    options: vec!["journal".into()],
                    known: "synchronous=full|normal",
                }),
                r#"store configuration error: unknown SQLite option "journal" in "sqlite://idem.db?journal=off"; known: synchronous=full|normal"#,
            ),
            (
                StoreError::from(BadOption {
                    store: "sqlite://idem.db?busy_timeout_ms=soon".into(),
                    option: "busy_timeout_ms",
                    value: "soon".into(),
                    expected: "a number of milliseconds",
                }),
                r#"store configuration error: "sqlite://idem.db?busy_timeout_ms=soon": busy_timeout_ms "soon" is not a number of milliseconds"#,
            ),
            (
                StoreError::BadCursor {
                    store: "memory".into(),
                    cursor: "xyz".into(),
                    kind: "audit",
                },
                r#"store configuration error: "xyz" is not an audit cursor of memory"#,
            ),
            (
                StoreError::BadCursor {
                    store: "redis://cache/".into(),
                    cursor: "xyz".into(),
                    kind: "scan",
                },
                r#"store configuration error: "xyz" is not a scan cursor of redis://cache/"#,
            ),
        ];
        for (error, says) in cases {
            assert_eq!(error.to_string(), says);
            assert!(error.source().is_none(), "{error:?}");
        }
    }

    /// Every `StoreError` is kept small: in every `Result` of a store
    /// operation, and in `IdemError` (clippy's `result_large_err`).
    #[test]
    fn a_store_error_stays_small() {
        assert!(std::mem::size_of::<StoreError>() <= 72);
    }

    #[test]
    fn an_invalid_url_keeps_the_parsers_error_as_its_source() {
        let parser = std::io::Error::new(std::io::ErrorKind::InvalidInput, "no host");
        let error = StoreError::InvalidUrl {
            store: "redis://".into(),
            reason: Cause::with_source("bad Redis URL: no host", parser),
        };
        assert_eq!(
            error.to_string(),
            r#"store configuration error: "redis://": bad Redis URL: no host"#
        );
        let source = error.source().expect("the parser's error");
        assert!(source.downcast_ref::<std::io::Error>().is_some());
    }
}
