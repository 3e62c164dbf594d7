//! The proxy's HTTP side (`idem proxy --listen`): the socket it listens
//! on, over TLS when asked, and who may call (bearer tokens of
//! `--principals`, each in a namespace of their own).

use std::sync::Arc;

use super::options::{ProxyError, ProxyOptions};
use super::principals::Principals;

/// The proxy's HTTP side, settled before the upstream starts: the socket
/// it listens on, and who may call (`None`: anyone, on loopback with
/// `--no-auth`).
pub(super) struct Listening {
    pub(super) listener: tokio::net::TcpListener,
    pub(super) principals: Option<Arc<Principals>>,
    /// HTTPS, when `--tls-cert` and `--tls-key` were given.
    pub(super) tls: Option<Arc<rustls::ServerConfig>>,
}

/// The principal a request's bearer token named, in the request's
/// extensions for `McpServer::principal`.
#[derive(Clone)]
pub(super) struct Caller(pub(super) String);

impl Listening {
    /// Listen on `address` as `options` say: with `--principals`, any
    /// address; without, loopback only and only with `--no-auth`.
    pub(super) async fn open(
        address: &str,
        options: &ProxyOptions,
    ) -> Result<Listening, ProxyError> {
        let principals = match &options.principals {
            Some(path) => Some(Arc::new(
                Principals::load(path).map_err(ProxyError::Config)?,
            )),
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|source| ProxyError::Listen {
                address: address.to_owned(),
                source,
            })?;
        let bound = listener.local_addr()?;
        let tls = match (&options.tls_cert, &options.tls_key) {
            (Some(cert), Some(key)) => {
                Some(crate::tls::server_config(cert, key).map_err(ProxyError::Tls)?)
            }
            (None, None) => None,
            _ => {
                return Err(ProxyError::Tls(
                    "--tls-cert and --tls-key go together".to_owned(),
                ))
            }
        };
        if tls.is_none() && !options.allow_plain_http && !bound.ip().is_loopback() {
            return Err(ProxyError::PlainHttp {
                address: address.to_owned(),
            });
        }
        if principals.is_none() && !bound.ip().is_loopback() {
            return Err(ProxyError::Unauthenticated {
                address: address.to_owned(),
                loopback: false,
            });
        }
        if principals.is_none() && !options.no_auth {
            return Err(ProxyError::Unauthenticated {
                address: address.to_owned(),
                loopback: true,
            });
        }
        Ok(Listening {
            listener,
            principals,
            tls,
        })
    }
}

/// Refuse a request without a listed bearer token (`401` with
/// `WWW-Authenticate`), and hand the principal of one with a token to the
/// server.
pub(super) async fn authenticate(
    principals: Arc<Principals>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let caller = request
        .headers()
        .get(::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| principals.who(v))
        .map(str::to_owned);
    match caller {
        Some(name) => {
            request.extensions_mut().insert(Caller(name));
            next.run(request).await
        }
        None => {
            tracing::warn!("refused a request without a valid bearer token");
            let body = serde_json::json!({
                "jsonrpc": "2.0",
                "error": {
                    "code": -32001,
                    "message": "unauthorized: send `Authorization: Bearer TOKEN` with a token from the proxy's principals file",
                },
            });
            let mut response = axum::response::IntoResponse::into_response((
                ::http::StatusCode::UNAUTHORIZED,
                [(::http::header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            ));
            response.headers_mut().insert(
                ::http::header::WWW_AUTHENTICATE,
                ::http::HeaderValue::from_static("Bearer realm=\"idem proxy\""),
            );
            response
        }
    }
}
