//! TLS to Redis (`rediss://`, `rediss+cluster://`): the certificate files a
//! URL names, and telling a person what went wrong when a connection could
//! not be made.
//!
//! redis-rs speaks TLS through rustls with the process's one crypto
//! provider (`ring`, see the workspace's `Cargo.toml`). It trusts the
//! platform's certificate authorities, or, when the URL names `?ca=PATH`
//! (or the environment `IDEM_TLS_CA_FILE`), only those of that file, as
//! libpq's `sslrootcert` does. Certificates are always verified: there is
//! no switch to skip it.
//!
//! When the first connection fails, [`diagnose`] looks for what a person
//! can act on: a certificate that did not verify (rustls's own reason), or
//! a URL that disagrees with the server about TLS, found by one probe of
//! the server on failure only: a plain `PING` for a `rediss://` URL (does
//! a plain Redis answer?), a TLS handshake that sends nothing for a
//! `redis://` URL (does a TLS server answer?).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redis::{
    Client, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, RedisResult, TlsCertificates,
};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::options::{Servers, Target, TlsFiles};
use idem_net::tls_error::{self, find_rustls};
use idem_runtime::store::url::TLS_CA_FILE_ENV;
use idem_runtime::store::{Cause, StoreError, TlsFailure, TlsProblem};

/// The certificates redis-rs connects with: the CA file (`?ca=`, else
/// [`TLS_CA_FILE_ENV`]) and the client certificate and key, read now, so
/// that a missing file is reported before anything connects.
pub(super) fn certificates(files: &TlsFiles, name: &str) -> Result<TlsCertificates, StoreError> {
    let env_ca = std::env::var_os(TLS_CA_FILE_ENV).filter(|v| !v.is_empty());
    let ca = match (&files.ca, &env_ca) {
        (Some(path), _) => Some(read(path, "?ca=", name)?),
        (None, Some(path)) => Some(read(Path::new(path), TLS_CA_FILE_ENV, name)?),
        (None, None) => None,
    };
    let client_tls = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read(cert, "?cert=", name)?,
            client_key: read(key, "&key=", name)?,
        }),
        _ => None,
    };
    Ok(TlsCertificates {
        client_tls,
        root_cert: ca,
    })
}

/// The content of the file `path`, named by `option`; a file that cannot
/// be read is an invalid URL naming the file and why (never its content).
fn read(path: &Path, option: &str, name: &str) -> Result<Vec<u8>, StoreError> {
    std::fs::read(path).map_err(|e| StoreError::InvalidUrl {
        store: name.to_owned(),
        reason: Cause::with_source(
            format!("cannot read the file {} ({option}): {e}", path.display()),
            e,
        ),
    })
}

/// `error`, from the first connection to `target`, told as a
/// [`StoreError::Tls`] when TLS is what went wrong; as it was otherwise.
/// Probes the server once (within `timeout`) when the failure says
/// nothing about TLS itself.
pub(super) async fn diagnose(error: StoreError, target: &Target, timeout: Duration) -> StoreError {
    let StoreError::Unavailable { store, cause } = &error else {
        return error;
    };
    let failure = |problem: TlsProblem| {
        StoreError::from(
            TlsFailure::new(
                store.clone(),
                target.host.clone(),
                problem.clone(),
                fix(&problem),
            )
            .with_cause(cause.clone()),
        )
    };
    if let Some(problem) = cause.source().and_then(find_rustls).and_then(problem_of) {
        return failure(problem);
    }
    let Some((host, port)) = address(&target.servers) else {
        return error;
    };
    let probe = async {
        match target.tls {
            Some(_) => answers_plain(&host, port)
                .await
                .then_some(TlsProblem::ServerNotTls),
            None => answers_tls(&host, port)
                .await
                .then_some(TlsProblem::ServerRequiresTls),
        }
    };
    match tokio::time::timeout(timeout, probe).await {
        Ok(Some(problem)) => failure(problem),
        _ => error,
    }
}

/// What to write or do about `problem`, in the Redis URL's terms.
fn fix(problem: &TlsProblem) -> &'static str {
    match problem {
        TlsProblem::UnknownIssuer => {
            "if a private CA signed the server's certificate, name the CA's certificate with ?ca=PATH (or IDEM_TLS_CA_FILE)"
        }
        TlsProblem::WrongName { .. } => {
            "connect with a host name the certificate is issued for"
        }
        TlsProblem::ClientCertificateRequired => {
            "name a client certificate and its key with ?cert=PATH&key=PATH"
        }
        TlsProblem::ClientCertificateRefused => {
            "name a client certificate the server trusts with ?cert=PATH&key=PATH"
        }
        TlsProblem::ServerNotTls => {
            "write redis:// for a server without TLS, or the port of its TLS listener"
        }
        TlsProblem::ServerRequiresTls => {
            "write rediss:// (with ?ca=PATH if a private CA signed its certificate)"
        }
        _ => "the server needs a valid certificate: renew it (idem always verifies certificates, and has no switch to skip it)",
    }
}

/// What a person can act on in the rustls error `e`: what every store
/// reads in it ([`tls_error::problem_of`]), and a first message that is not
/// TLS, which redis-rs reports when a `rediss://` URL meets a plain server.
fn problem_of(e: &rustls::Error) -> Option<TlsProblem> {
    match e {
        rustls::Error::InvalidMessage(_) => Some(TlsProblem::ServerNotTls),
        other => tls_error::problem_of(other),
    }
}

/// The host and port of the first server of `servers`.
fn address(servers: &Servers) -> Option<(String, u16)> {
    let url = match servers {
        Servers::Node(url) => url.as_str(),
        Servers::Cluster(nodes) => nodes.first()?.as_str(),
    };
    match url.into_connection_info().ok()?.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some((host.clone(), *port))
        }
        _ => None,
    }
}

/// Whether a plain Redis answers `PING` at `host:port` (with `+PONG`, or
/// an error such as `-NOAUTH`): it speaks the protocol without TLS.
async fn answers_plain(host: &str, port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect((host, port)).await else {
        return false;
    };
    let mut first = [0u8; 1];
    stream.write_all(b"PING\r\n").await.is_ok()
        && stream.read_exact(&mut first).await.is_ok()
        && matches!(first[0], b'+' | b'-')
}

/// Whether a TLS server answers a handshake at `host:port`. The probe
/// trusts no certificate authority at all, so it never completes a
/// handshake and never sends a byte of data: a server that presents a
/// certificate speaks TLS.
async fn answers_tls(host: &str, port: u16) -> bool {
    let Ok(name) = ServerName::try_from(host.to_owned()) else {
        return false;
    };
    let Ok(stream) = TcpStream::connect((host, port)).await else {
        return false;
    };
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    match connector.connect(name, stream).await {
        Ok(_) => true,
        Err(e) => e
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>())
            .is_some_and(|e| matches!(e, rustls::Error::InvalidCertificate(_))),
    }
}

/// A client of the server `url`, over TLS with `certificates` when given
/// (a `rediss://` URL).
pub(super) fn client(
    url: impl redis::IntoConnectionInfo,
    certificates: Option<&TlsCertificates>,
) -> RedisResult<Client> {
    match certificates {
        Some(certificates) => Client::build_with_tls(url, certificates.clone()),
        None => Client::open(url),
    }
}
