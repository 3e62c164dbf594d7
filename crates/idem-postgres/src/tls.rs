//! TLS to PostgreSQL, with libpq's parameters, so the URL a provider gives
//! works as pasted: `sslmode`, `sslrootcert`, `sslcert`, `sslkey`, and
//! `channel_binding` (read by tokio-postgres itself, which binds SCRAM to
//! the TLS channel through the [connector](crate::connector)'s
//! `tls-server-end-point`).
//!
//! | `sslmode` | TLS | the server's certificate |
//! |---|---|---|
//! | `disable` | never | — |
//! | `prefer` (the default) | when the server offers it (always asked first), else plain | not verified, unless a CA file is named, then as `verify-ca` |
//! | `require` | always | as `prefer` |
//! | `verify-ca` | always | signed by a trusted CA |
//! | `verify-full` | always | signed by a trusted CA and issued for the host |
//!
//! The trusted CAs are those of `sslrootcert=PATH`, else of the file
//! `IDEM_TLS_CA_FILE` names, else the platform's (`rustls-native-certs`;
//! `sslrootcert=system` asks for them by name, and as in libpq only with
//! `verify-full`). Unlike libpq, no `~/.postgresql/root.crt` is read: a
//! store's trust is in its URL or the environment, not a home directory.
//!
//! TLS is rustls on the workspace's one crypto provider, `ring`.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::connector::RustlsConnector;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{ring, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::Config;

use idem_net::roots::{self, RootsError};
use idem_net::tls_error::{find_rustls, problem_of};
use idem_runtime::store::url::{split_query, TLS_CA_FILE_ENV};
use idem_runtime::store::{BadOption, Cause, StoreError, TlsFailure, TlsProblem};

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Where the trusted CAs come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Roots {
    /// The platform's trust store.
    System,
    /// A PEM file of CAs, and what named it (`sslrootcert=` or
    /// `IDEM_TLS_CA_FILE`).
    File(PathBuf, &'static str),
}

/// What a URL says about TLS.
#[derive(Debug, Clone)]
pub(super) struct TlsSettings {
    pub(super) mode: Mode,
    roots: Option<Roots>,
    client: Option<(PathBuf, PathBuf)>,
}

/// `url` without libpq's TLS parameters (tokio-postgres knows `sslmode`'s
/// `disable`, `prefer` and `require` only, and no file parameters), and
/// what they say.
pub(super) fn take_tls(url: &str, name: &str) -> Result<(String, TlsSettings), StoreError> {
    let (base, query) = split_query(url).unwrap_or((url, ""));
    let mut mode = None;
    let mut root = None;
    let (mut cert, mut key) = (None, None);
    let mut rest = Vec::new();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (option, value) = param.split_once('=').unwrap_or((param, ""));
        match option {
            "sslmode" => {
                mode = Some(
                    match value.to_ascii_lowercase().replace('_', "-").as_str() {
                        "disable" => Mode::Disable,
                        // libpq's `allow` tries plain text first; asking for
                        // TLS first never protects less.
                        "allow" | "prefer" => Mode::Prefer,
                        "require" => Mode::Require,
                        "verify-ca" => Mode::VerifyCa,
                        "verify-full" => Mode::VerifyFull,
                        _ => {
                            return Err(BadOption {
                                store: name.to_owned(),
                                option: "sslmode",
                                value: value.to_owned(),
                                expected: "one of disable, prefer, require, verify-ca, verify-full",
                            }
                            .into())
                        }
                    },
                )
            }
            "sslrootcert" => root = Some(decode(value)),
            "sslcert" => cert = Some(PathBuf::from(decode(value))),
            "sslkey" => key = Some(PathBuf::from(decode(value))),
            _ => rest.push(param),
        }
    }
    let mode = mode.unwrap_or(Mode::Prefer);
    let roots = match root.as_deref() {
        Some("system") => {
            if mode != Mode::VerifyFull {
                return Err(BadOption {
                    store: name.to_owned(),
                    option: "sslmode",
                    value: format!("{mode:?}").to_ascii_lowercase(),
                    expected: "verify-full, the one mode sslrootcert=system may be used with (as in libpq)",
                }
                .into());
            }
            Some(Roots::System)
        }
        Some(path) => Some(Roots::File(path.into(), "sslrootcert=")),
        None => std::env::var_os(TLS_CA_FILE_ENV)
            .filter(|v| !v.is_empty())
            .map(|path| Roots::File(path.into(), TLS_CA_FILE_ENV)),
    };
    let client =
        match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err(StoreError::InvalidUrl {
                store: name.to_owned(),
                reason:
                    "a client certificate needs its key: write both sslcert=PATH and sslkey=PATH"
                        .into(),
            }),
        };
    let url = match rest.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", rest.join("&")),
    };
    let settings = TlsSettings {
        mode,
        roots,
        client,
    };
    Ok((url, settings))
}

/// `text` with its `%XX` escapes decoded (a malformed one kept as it is).
fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

impl TlsSettings {
    /// tokio-postgres's mode for these settings.
    pub(super) fn driver_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }

    /// The TLS connector of every connection of the store: its files are
    /// read now, so a missing one is reported before anything connects.
    pub(super) fn connector(&self, name: &str) -> Result<RustlsConnector, StoreError> {
        let provider = Arc::new(ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = match (self.mode, &self.roots) {
            (Mode::Disable | Mode::Prefer | Mode::Require, None) => Arc::new(Lenient {
                provider: provider.clone(),
                chain: None,
            }),
            (mode, roots) => {
                let roots = match roots {
                    Some(Roots::File(path, option)) => file_roots(path, option, name)?,
                    Some(Roots::System) | None => system_roots(name)?,
                };
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| invalid(name, format!("no usable CA certificate: {e}"), e))?;
                match mode {
                    Mode::VerifyFull => webpki,
                    _ => Arc::new(Lenient {
                        provider: provider.clone(),
                        chain: Some(webpki),
                    }),
                }
            }
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let config = match &self.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| bad_file(cert, "sslcert=", name, e))?;
                let key_der = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| bad_file(key, "sslkey=", name, e))?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| invalid(name, format!("the client certificate and key (sslcert=, sslkey=) do not go together: {e}"), e))?
            }
        };
        Ok(RustlsConnector::new(config))
    }
}

/// The CAs of the PEM file `path`, named by `option`.
fn file_roots(path: &Path, option: &str, name: &str) -> Result<RootCertStore, StoreError> {
    roots::file_roots(path).map_err(|e| match e {
        RootsError::Unreadable(e) => bad_file(path, option, name, e),
        RootsError::NoneUsable { refused } => StoreError::InvalidUrl {
            store: name.to_owned(),
            reason: format!(
                "the file {} ({option}) holds no usable CA certificate ({refused} refused)",
                path.display()
            )
            .into(),
        },
        other => invalid(
            name,
            format!("the file {} ({option}): {other}", path.display()),
            other,
        ),
    })
}

/// The platform's trusted CAs.
fn system_roots(name: &str) -> Result<RootCertStore, StoreError> {
    let roots = roots::platform_roots();
    if roots.is_empty() {
        return Err(StoreError::InvalidUrl {
            store: name.to_owned(),
            reason: "the platform's trust store holds no CA certificate (install ca-certificates), and the URL names none: write sslrootcert=PATH".into(),
        });
    }
    Ok(roots)
}

/// A file named by `option` that could not be read as PEM.
fn bad_file(path: &Path, option: &str, name: &str, e: rustls::pki_types::pem::Error) -> StoreError {
    invalid(
        name,
        format!("cannot read the file {} ({option}): {e}", path.display()),
        e,
    )
}

fn invalid(name: &str, message: String, e: impl Error + Send + Sync + 'static) -> StoreError {
    StoreError::InvalidUrl {
        store: name.to_owned(),
        reason: Cause::with_source(message, e),
    }
}

/// A verifier that lets some certificates through, as libpq does: for
/// `prefer` and `require` without a CA file (`chain` `None`) the channel
/// is encrypted and the handshake's signatures checked, but the
/// certificate is not verified; for `verify-ca` (`chain` the CA's
/// verifier) the certificate chain is verified, the host name is not.
#[derive(Debug)]
struct Lenient {
    provider: Arc<CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        // webpki checks the name last, after the chain and the dates.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                NotValidForName | NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    // The chain's verifier checks signatures with the same provider's
    // algorithms, so both cases check them here.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `error`, from the first connection, told as a [`StoreError::Tls`] when
/// TLS is what went wrong; as it was otherwise. When a URL demanding TLS
/// failed for no reason of TLS's own, the server is asked once (within
/// `timeout`) whether it speaks TLS at all.
pub(super) async fn diagnose(
    error: StoreError,
    settings: &TlsSettings,
    config: &Config,
    timeout: Duration,
) -> StoreError {
    let StoreError::Unavailable { store, cause } = &error else {
        return error;
    };
    let (host, port) = address(config);
    let failure = |problem: TlsProblem| {
        StoreError::from(
            TlsFailure::new(store.clone(), host.clone(), problem.clone(), fix(&problem))
                .with_cause(cause.clone()),
        )
    };
    if let Some(problem) = cause.source().and_then(find_rustls).and_then(problem_of) {
        return failure(problem);
    }
    let driver = cause
        .source()
        .and_then(|e| e.downcast_ref::<tokio_postgres::Error>());
    if let Some(db) = driver.and_then(tokio_postgres::Error::as_db_error) {
        // pg_hba.conf has `hostssl` lines only: "no pg_hba.conf entry for
        // host …, no encryption" (PostgreSQL 14 on; "SSL off" before).
        let message = db.message();
        let unencrypted = message.ends_with("no encryption") || message.ends_with("SSL off");
        if db.code().code() == "28000" && unencrypted && settings.mode == Mode::Disable {
            return failure(TlsProblem::ServerRequiresTls);
        }
        // An account that signs in by certificate (`cert`), without one.
        if db.code().code() == "28000" && message.contains("requires a valid client certificate") {
            return failure(TlsProblem::ClientCertificateRequired);
        }
        return error;
    }
    if settings.driver_mode() != SslMode::Require {
        return error;
    }
    match tokio::time::timeout(timeout, offers_tls(&host, port)).await {
        Ok(Some(false)) => failure(TlsProblem::ServerNotTls),
        _ => error,
    }
}

/// The first host and port of `config`, for messages and the probe.
fn address(config: &Config) -> (String, u16) {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    (host, config.get_ports().first().copied().unwrap_or(5432))
}

/// Whether the PostgreSQL server at `host:port` offers TLS: its answer to
/// an `SSLRequest` (`S` or `N`), `None` when it gives neither.
async fn offers_tls(host: &str, port: u16) -> Option<bool> {
    // The SSLRequest message: its length (8) and the code 80877103.
    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
    stream.write_all(&SSL_REQUEST).await.ok()?;
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).await.ok()?;
    match answer[0] {
        b'S' => Some(true),
        b'N' => Some(false),
        _ => None,
    }
}

/// What to write or do about `problem`, in libpq's terms.
fn fix(problem: &TlsProblem) -> &'static str {
    match problem {
        TlsProblem::UnknownIssuer => {
            "if a private CA signed the server's certificate, name the CA's certificate with sslrootcert=PATH (or IDEM_TLS_CA_FILE)"
        }
        TlsProblem::WrongName { .. } => {
            "connect with a host name the certificate is issued for, or write sslmode=verify-ca to verify the CA only"
        }
        TlsProblem::ClientCertificateRequired => {
            "name a client certificate and its key with sslcert=PATH&sslkey=PATH"
        }
        TlsProblem::ClientCertificateRefused => {
            "name a client certificate the server trusts with sslcert=PATH&sslkey=PATH"
        }
        TlsProblem::ServerNotTls => {
            "turn ssl on in the server's configuration, or write sslmode=prefer to connect in plain text to a server without TLS"
        }
        TlsProblem::ServerRequiresTls => {
            "write sslmode=require, or sslmode=verify-full with sslrootcert=PATH to verify the server"
        }
        _ => "the server needs a valid certificate: renew it (verify-ca and verify-full always verify it)",
    }
}
