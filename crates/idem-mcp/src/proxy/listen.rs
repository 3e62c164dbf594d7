//! The proxy's HTTP side (`idem proxy --listen`): the socket it listens
//! on, over TLS when asked, and who may call (bearer tokens of
//! `--principals`, OAuth access tokens of `--oauth-issuer`, each caller in
//! a namespace of their own).

use std::sync::Arc;

use super::oauth::{OAuth, OAuthOptions};
use super::options::{ProxyError, ProxyOptions};
use super::principals::Principals;

/// Who may call: the principals file's tokens, an OAuth issuer's access
/// tokens, or both.
pub(super) struct Auth {
    principals: Option<Principals>,
    pub(super) oauth: Option<OAuth>,
}

/// The proxy's HTTP side, settled before the upstream starts: the socket
/// it listens on, and who may call (`None`: anyone, on loopback with
/// `--no-auth`).
pub(super) struct Listening {
    pub(super) listener: tokio::net::TcpListener,
    pub(super) auth: Option<Arc<Auth>>,
    /// HTTPS, when `--tls-cert` and `--tls-key` were given.
    pub(super) tls: Option<Arc<rustls::ServerConfig>>,
}

/// The principal a request's bearer token named, in the request's
/// extensions for `McpServer::principal`.
#[derive(Clone)]
pub(super) struct Caller(pub(super) String);

impl Listening {
    /// Listen on `address` as `options` say: with `--principals` or
    /// `--oauth-issuer`, any address; without, loopback only and only with
    /// `--no-auth`.
    pub(super) async fn open(
        address: &str,
        options: &ProxyOptions,
    ) -> Result<Listening, ProxyError> {
        let principals = match &options.principals {
            Some(path) => Some(Principals::load(path).map_err(ProxyError::Config)?),
            None => None,
        };
        let oauth =
            match (&options.oauth_issuer, &options.oauth_resource) {
                (Some(issuer), Some(resource)) => Some(
                    OAuth::start(&OAuthOptions {
                        issuer: issuer.clone(),
                        resource: resource.clone(),
                        jwks: options.oauth_jwks.clone(),
                    })
                    .await?,
                ),
                (None, None) if options.oauth_jwks.is_none() => None,
                _ => return Err(ProxyError::OAuth(
                    "--oauth-issuer and --oauth-resource go together (and --oauth-jwks needs them)"
                        .to_owned(),
                )),
            };
        let auth = match (principals, oauth) {
            (None, None) => None,
            (principals, oauth) => Some(Arc::new(Auth { principals, oauth })),
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
        if auth.is_none() && !bound.ip().is_loopback() {
            return Err(ProxyError::Unauthenticated {
                address: address.to_owned(),
                loopback: false,
            });
        }
        if auth.is_none() && !options.no_auth {
            return Err(ProxyError::Unauthenticated {
                address: address.to_owned(),
                loopback: true,
            });
        }
        Ok(Listening {
            listener,
            auth,
            tls,
        })
    }
}

/// Refuse a request without a token that names a caller (`401` with
/// `WWW-Authenticate`), and hand the principal of one with a token to the
/// server.
pub(super) async fn authenticate(
    auth: Arc<Auth>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let token = request
        .headers()
        .get(::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer);
    let caller = match token {
        Some(token) => auth.caller(token).await,
        None => Err("no bearer token".to_owned()),
    };
    match caller {
        Ok(name) => {
            request.extensions_mut().insert(Caller(name));
            next.run(request).await
        }
        Err(why) => {
            tracing::warn!(reason = %why, "refused a request without a valid bearer token");
            auth.refusal(token.is_some(), &why)
        }
    }
}

/// The token of an `Authorization` value `Bearer TOKEN` (the scheme in
/// any case, RFC 7235).
fn bearer(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

impl Auth {
    /// The principal `token` names, or why it names none (never the
    /// token).
    async fn caller(&self, token: &str) -> Result<String, String> {
        if let Some(name) = self.principals.as_ref().and_then(|p| p.who_token(token)) {
            return Ok(name.to_owned());
        }
        match &self.oauth {
            Some(oauth) => oauth.principal(token).await.map_err(|e| e.to_string()),
            None => Err("a token the principals file does not list".to_owned()),
        }
    }

    /// A `401` saying how to authenticate: with OAuth, where the resource's
    /// metadata is (RFC 9728 §5.1) and, for a token that was sent, that it
    /// is invalid (RFC 6750 §3).
    fn refusal(&self, sent: bool, why: &str) -> axum::response::Response {
        let (message, challenge) = match &self.oauth {
            Some(oauth) => {
                let mut challenge = format!(
                    "Bearer resource_metadata=\"{}\"",
                    oauth.metadata_url()
                );
                if sent {
                    // The reason is the proxy's own words: no quote in it.
                    challenge.push_str(&format!(
                        ", error=\"invalid_token\", error_description=\"{}\"",
                        why.replace('"', "'")
                    ));
                }
                (
                    "unauthorized: send `Authorization: Bearer TOKEN` with an access token from the issuer this server's metadata names",
                    challenge,
                )
            }
            None => (
                "unauthorized: send `Authorization: Bearer TOKEN` with a token from the proxy's principals file",
                "Bearer realm=\"idem proxy\"".to_owned(),
            ),
        };
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "error": { "code": -32001, "message": message },
        });
        let mut response = axum::response::IntoResponse::into_response((
            ::http::StatusCode::UNAUTHORIZED,
            [(::http::header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        ));
        if let Ok(value) = ::http::HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(::http::header::WWW_AUTHENTICATE, value);
        }
        response
    }
}
