//! The TLS failures of a store's connection ([`StoreError::Tls`]): what
//! went wrong with a certificate or a handshake, named with the host and
//! what to write instead.

use std::fmt;

use super::{Cause, StoreError};

impl From<TlsFailure> for StoreError {
    fn from(e: TlsFailure) -> StoreError {
        StoreError::Tls(Box::new(e))
    }
}

/// A TLS connection to a store that could not be made:
/// [`StoreError::Tls`]. Its message names the store, the host, what went
/// wrong and what to write instead; never a password, a key or a
/// certificate's content.
///
/// ```
/// use idem_runtime::store::{StoreError, TlsFailure, TlsProblem};
///
/// let e = StoreError::from(TlsFailure::new(
///     "rediss://:***@cache:6380/",
///     "cache",
///     TlsProblem::UnknownIssuer,
///     "if a private CA signed the server's certificate, name the CA's certificate with ?ca=PATH",
/// ));
/// assert_eq!(
///     e.to_string(),
///     "store rediss://:***@cache:6380/: the certificate of cache is signed by a certificate authority that is not trusted; if a private CA signed the server's certificate, name the CA's certificate with ?ca=PATH"
/// );
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TlsFailure {
    /// The URL (password hidden).
    pub store: String,
    /// The host connected to, as the URL names it: the name the
    /// certificate must carry.
    pub host: String,
    /// What went wrong.
    pub problem: TlsProblem,
    /// What to do about it, as the backend names its options: `name the
    /// CA's certificate with sslrootcert=PATH`.
    pub fix: &'static str,
    /// The driver's or TLS library's report, when one made it: the
    /// [`Error::source`](std::error::Error::source) of the [`StoreError`].
    pub cause: Option<Cause>,
}

impl TlsFailure {
    /// A failure of `problem` on `host` of the store `store`, to be fixed
    /// as `fix` says.
    pub fn new(
        store: impl Into<String>,
        host: impl Into<String>,
        problem: TlsProblem,
        fix: &'static str,
    ) -> TlsFailure {
        TlsFailure {
            store: store.into(),
            host: host.into(),
            problem,
            fix,
            cause: None,
        }
    }

    /// The same failure, reported by the driver as `cause`.
    pub fn with_cause(mut self, cause: Cause) -> TlsFailure {
        self.cause = Some(cause);
        self
    }
}

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let TlsFailure {
            store,
            host,
            problem,
            fix,
            ..
        } = self;
        let cert = format!("the certificate of {host}");
        match problem {
            TlsProblem::UnknownIssuer => write!(
                f,
                "store {store}: {cert} is signed by a certificate authority that is not trusted"
            ),
            TlsProblem::Expired => write!(f, "store {store}: {cert} has expired"),
            TlsProblem::NotYetValid => write!(f, "store {store}: {cert} is not valid yet"),
            TlsProblem::WrongName { names } if names.is_empty() => {
                write!(f, "store {store}: {cert} is not issued for the name {host}")
            }
            TlsProblem::WrongName { names } => write!(
                f,
                "store {store}: {cert} is not issued for the name {host} (it names {})",
                names.join(", ")
            ),
            TlsProblem::Revoked => write!(f, "store {store}: {cert} has been revoked"),
            TlsProblem::BadCertificate { reason } => {
                write!(f, "store {store}: {cert} was refused: {reason}")
            }
            TlsProblem::ClientCertificateRequired => write!(
                f,
                "store {store}: {host} asks for a client certificate, and none was given"
            ),
            TlsProblem::ClientCertificateRefused => {
                write!(f, "store {store}: {host} refused the client certificate")
            }
            TlsProblem::ServerNotTls => write!(
                f,
                "store {store}: the URL asks for TLS, and {host} does not speak TLS on that port"
            ),
            TlsProblem::ServerRequiresTls => write!(
                f,
                "store {store}: the URL asks for a plain connection, and {host} accepts TLS connections only"
            ),
        }?;
        write!(f, "; {fix}")
    }
}

/// What went wrong in a [`TlsFailure`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsProblem {
    /// The server's certificate is not signed by a certificate authority
    /// the connection trusts (the platform's, or the CA file named).
    UnknownIssuer,
    /// The server's certificate has expired.
    Expired,
    /// The server's certificate is not valid yet.
    NotYetValid,
    /// The server's certificate is not issued for the host connected to.
    WrongName {
        /// The names it is issued for, when the TLS library reported them.
        names: Vec<String>,
    },
    /// The server's certificate has been revoked.
    Revoked,
    /// The server's certificate was refused for another reason.
    BadCertificate {
        /// The TLS library's reason.
        reason: String,
    },
    /// The server asks for a client certificate (mutual TLS), and none was
    /// given.
    ClientCertificateRequired,
    /// The server refused the client certificate given.
    ClientCertificateRefused,
    /// The URL asks for TLS, and the server does not speak it.
    ServerNotTls,
    /// The URL asks for a plain connection, and the server accepts TLS
    /// only.
    ServerRequiresTls,
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn every_tls_problem_names_the_host_and_the_fix_in_one_line() {
        let problems = [
            (TlsProblem::UnknownIssuer, "the certificate of db is signed by a certificate authority that is not trusted"),
            (TlsProblem::Expired, "the certificate of db has expired"),
            (TlsProblem::NotYetValid, "the certificate of db is not valid yet"),
            (TlsProblem::WrongName { names: vec![] }, "the certificate of db is not issued for the name db"),
            (
                TlsProblem::WrongName { names: vec!["a.example".into(), "b.example".into()] },
                "the certificate of db is not issued for the name db (it names a.example, b.example)",
            ),
            (TlsProblem::Revoked, "the certificate of db has been revoked"),
            (TlsProblem::BadCertificate { reason: "BadSignature".into() }, "the certificate of db was refused: BadSignature"),
            (TlsProblem::ClientCertificateRequired, "db asks for a client certificate, and none was given"),
            (TlsProblem::ClientCertificateRefused, "db refused the client certificate"),
            (TlsProblem::ServerNotTls, "the URL asks for TLS, and db does not speak TLS on that port"),
            (TlsProblem::ServerRequiresTls, "the URL asks for a plain connection, and db accepts TLS connections only"),
        ];
        for (problem, says) in problems {
            let io = std::io::Error::other("handshake");
            let error = StoreError::from(
                TlsFailure::new("postgres://app:***@db/idem", "db", problem, "do this")
                    .with_cause(Cause::from_error(io)),
            );
            assert_eq!(
                error.to_string(),
                format!("store postgres://app:***@db/idem: {says}; do this")
            );
            assert!(error.source().is_some_and(|e| e.is::<std::io::Error>()));
        }
    }
}
