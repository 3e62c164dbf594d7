//! What a person can act on in a TLS failure: the rustls error somewhere in
//! a driver's error ([`find_rustls`]), read as a [`TlsProblem`]
//! ([`problem_of`]). The stores tell it as a
//! [`TlsFailure`](idem_runtime::store::TlsFailure) with the fix in their
//! own URL's terms.

use std::error::Error;
use std::sync::Arc;

use idem_runtime::store::TlsProblem;

/// The rustls error somewhere in `error`'s chain of sources, as the
/// drivers wrap it: in an `io::Error` (tokio-postgres, redis-rs), behind an
/// `Arc` (redis-rs).
pub fn find_rustls<'a>(
    error: &'a (dyn Error + Send + Sync + 'static),
) -> Option<&'a rustls::Error> {
    let mut next: Option<&'a (dyn Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(found) = inner_rustls(e) {
            return Some(found);
        }
        next = e.source();
    }
    None
}

/// `e` itself as a rustls error, through an `Arc` or an `io::Error`.
fn inner_rustls<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(found) = e.downcast_ref::<rustls::Error>() {
        return Some(found);
    }
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        return io.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>());
    }
    if let Some(shared) = e.downcast_ref::<Arc<dyn Error + Send + Sync>>() {
        return inner_rustls(&**shared);
    }
    None
}

/// What a person can act on in the rustls error `e`, if anything: a
/// certificate that did not verify, or a server that asked for a client
/// certificate or refused the one given.
///
/// ```
/// use idem_runtime::store::TlsProblem;
/// use rustls::CertificateError;
///
/// let e = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
/// assert_eq!(idem_net::tls_error::problem_of(&e), Some(TlsProblem::UnknownIssuer));
/// ```
pub fn problem_of(e: &rustls::Error) -> Option<TlsProblem> {
    use rustls::{AlertDescription as Alert, CertificateError as Cert};
    Some(match e {
        rustls::Error::InvalidCertificate(cert) => match cert {
            Cert::UnknownIssuer => TlsProblem::UnknownIssuer,
            Cert::Expired | Cert::ExpiredContext { .. } => TlsProblem::Expired,
            Cert::NotValidYet | Cert::NotValidYetContext { .. } => TlsProblem::NotYetValid,
            Cert::NotValidForName => TlsProblem::WrongName { names: Vec::new() },
            Cert::NotValidForNameContext { presented, .. } => TlsProblem::WrongName {
                names: presented.iter().map(|name| bare_name(name)).collect(),
            },
            Cert::Revoked => TlsProblem::Revoked,
            other => TlsProblem::BadCertificate {
                reason: format!("{other:?}"),
            },
        },
        rustls::Error::AlertReceived(Alert::CertificateRequired) => {
            TlsProblem::ClientCertificateRequired
        }
        rustls::Error::AlertReceived(
            Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::CertificateExpired
            | Alert::CertificateRevoked
            | Alert::UnsupportedCertificate
            | Alert::AccessDenied,
        ) => TlsProblem::ClientCertificateRefused,
        _ => return None,
    })
}

/// A name as rustls presents it (`DnsName("db.example.com")`,
/// `IpAddress(…)`), as a person writes it: what the quotes hold.
fn bare_name(presented: &str) -> String {
    match presented.split_once('"') {
        Some((_, rest)) => rest.split('"').next().unwrap_or(rest).to_owned(),
        None => presented.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rustls_error_is_found_behind_io_and_arc() {
        let rustls = rustls::Error::InvalidCertificate(rustls::CertificateError::Expired);
        let io = std::io::Error::other(rustls);
        // As redis-rs reports it: the `Arc` is an error of its own.
        let shared: Arc<dyn Error + Send + Sync> = Arc::new(io);
        let outer: Box<dyn Error + Send + Sync> = Box::new(shared);
        let found = find_rustls(&*outer).and_then(problem_of);
        assert_eq!(found, Some(TlsProblem::Expired));
    }

    #[test]
    fn presented_names_are_shown_as_written() {
        assert_eq!(bare_name("DnsName(\"db.example.com\")"), "db.example.com");
        assert_eq!(bare_name("plain"), "plain");
    }
}
