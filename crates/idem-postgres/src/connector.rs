//! tokio-postgres's TLS connector over tokio-rustls: the handshake, with
//! the [`ClientConfig`] that [`tls`](crate::tls) builds from the URL, and
//! the `tls-server-end-point` channel binding that SCRAM's `-PLUS`
//! mechanisms bind the password exchange to (`channel_binding=require`).
//!
//! Written here rather than taken from `tokio-postgres-rustls`: that crate
//! parses the certificate with `x509-cert`, which brings `der`, `spki` and
//! a second `const-oid` for the one field read here, the certificate's
//! signature algorithm.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ring::digest;
use rustls::pki_types::{InvalidDnsNameError, ServerName};
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_rustls::TlsConnector;

/// Makes the TLS connection of each of a store's connections.
#[derive(Clone)]
pub(super) struct RustlsConnector(Arc<ClientConfig>);

impl RustlsConnector {
    pub(super) fn new(config: ClientConfig) -> RustlsConnector {
        RustlsConnector(Arc::new(config))
    }
}

impl<S> MakeTlsConnect<S> for RustlsConnector
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = Connect;
    type Error = InvalidDnsNameError;

    fn make_tls_connect(&mut self, host: &str) -> Result<Connect, InvalidDnsNameError> {
        Ok(Connect {
            name: ServerName::try_from(host)?.to_owned(),
            config: self.0.clone(),
        })
    }
}

/// The TLS handshake with one host.
pub(super) struct Connect {
    name: ServerName<'static>,
    config: Arc<ClientConfig>,
}

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let connector = TlsConnector::from(self.config);
            connector.connect(self.name, stream).await.map(RustlsStream)
        })
    }
}

/// A connection over TLS.
pub(super) struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S> tokio_postgres::tls::TlsStream for RustlsStream<S>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    fn channel_binding(&self) -> ChannelBinding {
        let (_, session) = self.0.get_ref();
        let Some(cert) = session.peer_certificates().and_then(|c| c.first()) else {
            return ChannelBinding::none();
        };
        match end_point_digest(cert) {
            Some(algorithm) => ChannelBinding::tls_server_end_point(
                digest::digest(algorithm, cert).as_ref().to_vec(),
            ),
            None => ChannelBinding::none(),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The hash of `tls-server-end-point` (RFC 5929, section 4.1) for the
/// certificate `der`: its signature's hash, SHA-256 in place of MD5 and
/// SHA-1. `None` for a signature with no single hash (RSASSA-PSS, whose
/// hash is in its parameters; Ed25519), for which the server binds nothing
/// either.
fn end_point_digest(der: &[u8]) -> Option<&'static digest::Algorithm> {
    // Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm
    // AlgorithmIdentifier ::= SEQUENCE { algorithm OID, … }, signature }
    let (certificate, _) = element(der, SEQUENCE)?;
    let (_, rest) = element(certificate, SEQUENCE)?;
    let (algorithm, _) = element(rest, SEQUENCE)?;
    let (oid, _) = element(algorithm, OID)?;
    // 1.2.840.113549.1.1.x (RSA) and 1.2.840.10045.4.x (ECDSA).
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04];
    match oid {
        // md5, sha1, sha256 with RSA; ecdsa with SHA-1, SHA-256.
        [rsa @ .., 0x04 | 0x05 | 0x0b] if rsa == RSA => Some(&digest::SHA256),
        [ecdsa @ .., 0x01] if ecdsa == ECDSA => Some(&digest::SHA256),
        [ecdsa @ .., 0x03, 0x02] if ecdsa == ECDSA => Some(&digest::SHA256),
        [rsa @ .., 0x0c] if rsa == RSA => Some(&digest::SHA384),
        [ecdsa @ .., 0x03, 0x03] if ecdsa == ECDSA => Some(&digest::SHA384),
        [rsa @ .., 0x0d] if rsa == RSA => Some(&digest::SHA512),
        [ecdsa @ .., 0x03, 0x04] if ecdsa == ECDSA => Some(&digest::SHA512),
        _ => None,
    }
}

const SEQUENCE: u8 = 0x30;
const OID: u8 = 0x06;

/// The content of the DER element of tag `tag` at the start of `der`, and
/// what follows it; `None` when `der` does not start with one.
fn element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = der.split_first()?;
    if first != tag {
        return None;
    }
    let (&len, rest) = rest.split_first()?;
    let (len, rest) = match len {
        short @ 0..=0x7f => (usize::from(short), rest),
        long @ 0x81..=0x84 => {
            let bytes = usize::from(long - 0x80);
            let (be, rest) = (rest.get(..bytes)?, rest.get(bytes..)?);
            let len = be.iter().fold(0usize, |n, &b| (n << 8) | usize::from(b));
            (len, rest)
        }
        _ => return None,
    };
    Some((rest.get(..len)?, rest.get(len..)?))
}
