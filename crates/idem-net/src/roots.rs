//! The certificate authorities a TLS client trusts: the platform's
//! ([`platform_roots`]: on Debian, `/etc/ssl/certs` from ca-certificates,
//! the CAs the operator keeps up to date, their own private CAs included)
//! and those of a PEM file ([`file_roots`]: `IDEM_TLS_CA_FILE`, a store
//! URL's `?ca=` or `sslrootcert=`). Each caller names the file as its
//! user wrote it when it reports a [`RootsError`].

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

/// The platform's trusted CAs; a certificate rustls cannot use is
/// skipped, as browsers do. Possibly empty (no ca-certificates): the
/// caller says what that means for it.
pub fn platform_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    roots
}

/// The CAs of the PEM file `path`: those rustls can use; none is an
/// error.
pub fn file_roots(path: &Path) -> Result<RootCertStore, RootsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(RootsError::Unreadable)?;
    let mut roots = RootCertStore::empty();
    let (_, refused) = roots.add_parsable_certificates(certs);
    if roots.is_empty() {
        return Err(RootsError::NoneUsable { refused });
    }
    Ok(roots)
}

/// Why a CA file gave no roots. Its messages do not name the file: the
/// caller does, as its user named it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RootsError {
    /// The file cannot be read, or is not PEM.
    #[error("cannot read certificates ({0})")]
    Unreadable(rustls::pki_types::pem::Error),
    /// The file holds no certificate rustls can use as a CA.
    #[error("no usable CA certificate in it ({refused} refused)")]
    NoneUsable {
        /// How many certificates it holds that rustls refused.
        refused: usize,
    },
}
