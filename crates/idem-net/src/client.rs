//! The HTTP client of idem's own requests: the upstream of `idem proxy
//! --upstream` (which adds streamable HTTP on top), an OAuth issuer's
//! metadata and keys, the inbox's webhooks (`idem serve --notify`). hyper
//! 1's client (already in the tree through axum), HTTP/1, over `http://`
//! or `https://`: rustls on ring with the platform's roots and the CAs of
//! `IDEM_TLS_CA_FILE` ([`client_config`]), every certificate verified.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use idem_runtime::store::url::TLS_CA_FILE_ENV;

use crate::roots::{file_roots, platform_roots};

/// rustls's client configuration: the platform's roots, and the CAs of
/// the file [`TLS_CA_FILE_ENV`] names when it is set; an error says what
/// is wrong with that file.
pub fn client_config() -> Result<rustls::ClientConfig, String> {
    let mut roots = platform_roots();
    if let Some(path) = std::env::var_os(TLS_CA_FILE_ENV) {
        let shown = std::path::Path::new(&path).display().to_string();
        let file =
            file_roots(path.as_ref()).map_err(|e| format!("{TLS_CA_FILE_ENV}={shown}: {e}"))?;
        roots.roots.extend(file.roots);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())
        .map(|builder| builder.with_root_certificates(roots).with_no_client_auth())
}

/// An HTTP/1 client with pooled connections.
#[derive(Clone)]
pub struct HttpClient {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpClient")
    }
}

impl HttpClient {
    /// A client with no connection yet, for `http://` and `https://`
    /// (with `tls`).
    pub fn new(tls: rustls::ClientConfig) -> Self {
        // Small requests go out at once: with Nagle's algorithm on, a
        // request written in two parts waits for the peer's delayed ACK,
        // some 40 ms a call.
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        HttpClient {
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    /// `GET uri` with `accept`: the status and at most `limit` bytes of
    /// the body (more is an error), or why it failed, on one line.
    pub async fn get(
        &self,
        uri: &str,
        accept: &str,
        limit: usize,
    ) -> Result<(StatusCode, Bytes), String> {
        let request = Request::get(uri)
            .header(header::ACCEPT, accept)
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        self.answer(request, limit).await
    }

    /// `POST uri` with `headers` and `body`: the status and at most
    /// `limit` bytes of the answer's body (more is an error), or why it
    /// failed, on one line.
    pub async fn post(
        &self,
        uri: &str,
        headers: &[(header::HeaderName, String)],
        body: Bytes,
        limit: usize,
    ) -> Result<(StatusCode, Bytes), String> {
        let mut request = Request::post(uri);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let request = request.body(Full::new(body)).map_err(|e| e.to_string())?;
        self.answer(request, limit).await
    }

    /// Send `request`: the status and at most `limit` bytes of the body.
    async fn answer(
        &self,
        request: Request<Full<Bytes>>,
        limit: usize,
    ) -> Result<(StatusCode, Bytes), String> {
        let response = self.request(request).await.map_err(|e| chain(&e))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), limit)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?
            .to_bytes();
        Ok((status, body))
    }

    /// Send `request`: the response's head, its body still to read.
    pub async fn request(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, hyper_util::client::legacy::Error> {
        self.client.request(request).await
    }
}

/// An error and its causes, on one line.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
