//! HTTPS for idem's own servers (`idem proxy --listen`, `idem serve`):
//! rustls on ring, the certificate chain and key from PEM files
//! (`--tls-cert FILE --tls-key FILE`), and a listener for axum that does
//! each TLS handshake on a task of its own, bounded in number and time, so
//! a client that never finishes its handshake holds up nobody else.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// How long a client may take over its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many handshakes may be under way at once: enough that clients
/// which open connections and never start their handshake (each holds a
/// place for at most [`HANDSHAKE_TIMEOUT`]) must open a thousand every ten
/// seconds to delay anyone, few enough that their state stays small.
const HANDSHAKES: usize = 1024;

/// The server's TLS configuration from a PEM certificate chain and its
/// private key; an error names the file and what is wrong with it, never
/// the key's content.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, String> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            format!(
                "--tls-cert {}: cannot read certificates ({e})",
                cert.display()
            )
        })?;
    if chain.is_empty() {
        return Err(format!(
            "--tls-cert {}: no certificate in it",
            cert.display()
        ));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        format!(
            "--tls-key {}: cannot read a private key ({e})",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| {
            format!(
                "--tls-cert {} and --tls-key {}: they do not go together ({e})",
                cert.display(),
                key.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// `listener`, with `TCP_NODELAY` on each connection it accepts, for
/// [`serve`](crate::serve::serve): an answer goes out as it is written.
/// With Nagle's algorithm on (the socket's default), an answer written in parts — the
/// headers, then an event stream's event — waits for the client's delayed
/// ACK: some 40 ms a call.
pub fn nodelay(listener: TcpListener) -> axum::serve::TapIo<TcpListener, fn(&mut TcpStream)> {
    use axum::serve::ListenerExt as _;
    fn set(tcp: &mut TcpStream) {
        let _ = tcp.set_nodelay(true);
    }
    listener.tap_io(set as fn(&mut TcpStream))
}

/// A TCP listener whose connections are TLS, for `axum::serve`.
pub struct TlsListener {
    incoming: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Accept on `listener`, each connection through a TLS handshake with
    /// `config`. A handshake that fails or takes longer than ten seconds
    /// drops its connection.
    pub fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (sender, incoming) = mpsc::channel(HANDSHAKES);
        let permits = Arc::new(Semaphore::new(HANDSHAKES));
        let accepting = tokio::spawn(async move {
            loop {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Answers go out as they are written (see [`nodelay`]).
                let _ = stream.set_nodelay(true);
                let acceptor = acceptor.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    let _permit = permit;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = sender.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener {
            incoming,
            local,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(connection) => connection,
            // The accepting task is gone (the runtime is stopping): no
            // connection will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
