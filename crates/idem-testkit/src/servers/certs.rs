//! Certificates for TLS tests, made by the test itself (rcgen, on the
//! workspace's `ring`): a certificate authority, server certificates for
//! 127.0.0.1 and `localhost` (good, expired, issued for another name), a
//! client certificate for mutual TLS, and a second CA that signed none of
//! them. Each is a PEM file in a temporary directory, deleted when the
//! [`TestCertificates`] is dropped.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, PublicKeyData as _,
};

use base64::Engine as _;
use sha2::Digest as _;

use super::TempDir;

/// A certificate and its private key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertifiedKeyFiles {
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key (PKCS #8).
    pub key: PathBuf,
    /// The SHA-256 of its public key (the DER SubjectPublicKeyInfo), in
    /// base64: what Chromium's `--ignore-certificate-errors-spki-list`
    /// takes to trust this one key, as a browser trusting the test's CA
    /// would.
    pub spki_sha256: String,
}

/// The certificates of a TLS test: a CA, server certificates for 127.0.0.1
/// and `localhost` (good, expired, for another name), a client certificate,
/// and a second CA that signed none of them, as PEM files in a temporary
/// directory deleted on drop.
#[derive(Debug)]
pub struct TestCertificates {
    /// The CA that signed every certificate below.
    pub ca: PathBuf,
    /// A CA that signed none of them: trusting it alone, no server here
    /// verifies.
    pub other_ca: PathBuf,
    /// A server certificate for `127.0.0.1` and `localhost`, valid now
    /// (for client authentication too, as a cluster's nodes use it).
    pub server: CertifiedKeyFiles,
    /// The same names, expired in 2021.
    pub expired: CertifiedKeyFiles,
    /// Valid now, for `db.example.invalid` only.
    pub wrong_name: CertifiedKeyFiles,
    /// A client certificate (`idem-client`) for mutual TLS.
    pub client: CertifiedKeyFiles,
    dir: TempDir,
}

impl TestCertificates {
    /// Make a fresh set.
    ///
    /// # Panics
    ///
    /// When a certificate cannot be made or written (a full disk).
    pub fn new() -> TestCertificates {
        let dir = TempDir::new("idem-certs").expect("create a temporary directory");
        let ca = authority("idem test CA");
        let other = authority("another CA");
        let write = |name: &str, text: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write a certificate");
            path
        };
        let ca_path = write("ca.pem", ca.pem());
        let other_ca = write("other-ca.pem", other.pem());
        let issue = |name: &str, names: &[&str], expired: bool, client: bool| {
            let key = KeyPair::generate().expect("a key");
            let mut params =
                CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                    .expect("valid names");
            params.distinguished_name.push(DnType::CommonName, names[0]);
            // A server's certificate is also its client certificate where
            // servers connect to one another (a Redis Cluster's TLS bus).
            params.extended_key_usages = match client {
                true => vec![ExtendedKeyUsagePurpose::ClientAuth],
                false => vec![
                    ExtendedKeyUsagePurpose::ServerAuth,
                    ExtendedKeyUsagePurpose::ClientAuth,
                ],
            };
            if expired {
                params.not_before = rcgen::date_time_ymd(2020, 1, 1);
                params.not_after = rcgen::date_time_ymd(2021, 1, 1);
            }
            let cert = params.signed_by(&key, &ca).expect("a signed certificate");
            CertifiedKeyFiles {
                cert: write(&format!("{name}.pem"), cert.pem()),
                key: write(&format!("{name}.key"), key.serialize_pem()),
                spki_sha256: base64::engine::general_purpose::STANDARD
                    .encode(sha2::Sha256::digest(key.subject_public_key_info())),
            }
        };
        let loopback = ["127.0.0.1", "localhost"];
        let server = issue("server", &loopback, false, false);
        let expired = issue("expired", &loopback, true, false);
        let wrong_name = issue("wrong-name", &["db.example.invalid"], false, false);
        let client = issue("client", &["idem-client"], false, true);
        TestCertificates {
            ca: ca_path,
            other_ca,
            server,
            expired,
            wrong_name,
            client,
            dir,
        }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Default for TestCertificates {
    fn default() -> Self {
        TestCertificates::new()
    }
}

/// A self-signed certificate authority named `name`.
fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key")).expect("a CA")
}
