//! The proxy's HTTP side (`idem proxy --listen`): the socket it listens
//! on, over TLS when asked, and who may call (bearer tokens of
//! `--principals`, OAuth access tokens of `--oauth-issuer`, each caller in
//! a namespace of their own), with the module `crate::auth`.

use std::sync::Arc;

use super::options::{ProxyError, ProxyOptions};
use crate::auth::{AuthError, Authenticator, OAuthOptions, Principals};

/// The proxy's HTTP side, settled before the upstream starts: the socket
/// it listens on, and who may call (`None`: anyone, on loopback with
/// `--no-auth`).
pub(super) struct Listening {
    pub(super) listener: tokio::net::TcpListener,
    pub(super) auth: Option<Authenticator>,
    /// HTTPS, when `--tls-cert` and `--tls-key` were given.
    pub(super) tls: Option<Arc<rustls::ServerConfig>>,
}

impl Listening {
    /// Listen on `address` as `options` say: with `--principals` or
    /// `--oauth-issuer`, any address; without, loopback only and only with
    /// `--no-auth`.
    pub(super) async fn open(
        address: &str,
        options: &ProxyOptions,
    ) -> Result<Listening, ProxyError> {
        let principals = match &options.principals {
            Some(path) => Some(Principals::load(path).map_err(config)?),
            None => None,
        };
        let oauth = OAuthOptions::from_flags(
            options.oauth_issuer.as_deref(),
            options.oauth_resource.as_deref(),
            options.oauth_jwks.as_deref(),
        )
        .map_err(config)?;
        let auth = match (principals, oauth) {
            (None, None) => None,
            (principals, oauth) => Some(
                Authenticator::new(principals, oauth)
                    .await
                    .map_err(config)?,
            ),
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
                Some(idem_net::server::server_config(cert, key).map_err(ProxyError::Tls)?)
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

/// An [`AuthError`] in the proxy's words: `--principals FILE: …`, or the
/// OAuth options' own.
fn config(error: AuthError) -> ProxyError {
    match error {
        AuthError::Principals {
            path: Some(path),
            reason,
        } => ProxyError::Config(format!("--principals {}: {reason}", path.display())),
        AuthError::OAuth(message) => ProxyError::OAuth(message),
        other => ProxyError::Config(other.to_string()),
    }
}
