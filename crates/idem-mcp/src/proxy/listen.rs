//! The proxy's HTTP side (`idem proxy --listen`): the socket it listens
//! on, over TLS when asked, and who may call (bearer tokens of
//! `--principals`, OAuth access tokens of `--oauth-issuer`, each caller in
//! a namespace of their own), with the module `crate::auth`; and serving
//! there until stopped.

use std::sync::Arc;
use std::time::Duration;

use idem_net::health::Health;
use idem_net::stop::Requests;
use idem_runtime::store::{Store, StoreExt as _};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::options::{ProxyError, ProxyOptions};
use super::stop::Stopping;
use super::Proxy;
use crate::auth::{AuthError, Authenticator, OAuthOptions, Principals};

/// The proxy's HTTP side, settled before the upstream starts: the socket
/// it listens on, and who may call (`None`: anyone, on loopback with
/// `--no-auth`).
pub(super) struct Listening {
    pub(super) listener: tokio::net::TcpListener,
    pub(super) auth: Option<Authenticator>,
    /// HTTPS, when `--tls-cert` and `--tls-key` were given.
    pub(super) tls: Option<Arc<rustls::ServerConfig>>,
    /// The `--principals` file, read again on SIGHUP.
    pub(super) principals: Option<std::path::PathBuf>,
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
        // Checked before binding: a refused address is never listened on,
        // not even for a moment. A name is judged by every address it has.
        let listen_error = |source| ProxyError::Listen {
            address: address.to_owned(),
            source,
        };
        let addresses: Vec<std::net::SocketAddr> = tokio::net::lookup_host(address)
            .await
            .map_err(listen_error)?
            .collect();
        let loopback = !addresses.is_empty() && addresses.iter().all(|a| a.ip().is_loopback());
        if tls.is_none() && !options.allow_plain_http && !loopback {
            return Err(ProxyError::PlainHttp {
                address: address.to_owned(),
            });
        }
        if auth.is_none() && !loopback {
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
        let listener = tokio::net::TcpListener::bind(&addresses[..])
            .await
            .map_err(listen_error)?;
        Ok(Listening {
            listener,
            auth,
            tls,
            principals: options.principals.clone(),
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

impl Listening {
    /// Serve `proxy` over streamable HTTP at `http://ADDRESS/mcp` (with
    /// `/healthz`, `/readyz` and the `metrics` routes) until a
    /// signal stops it: then it refuses new calls, and waits (within the
    /// grace) for the calls under way and for their answers to be sent,
    /// before it stops accepting connections and ends the sessions' event
    /// streams.
    pub(super) async fn serve(
        self,
        proxy: Proxy,
        name: &str,
        mut stopping: Stopping,
        health: Health,
        metrics: axum::Router,
    ) -> Result<(), ProxyError> {
        let Listening {
            listener,
            auth,
            tls,
            principals,
        } = self;
        let scheme = if tls.is_some() { "https" } else { "http" };
        let address = listener.local_addr()?;
        let port = address.port();
        let config = if address.ip().is_loopback() {
            // Only requests that name this server's own host and port, and
            // pages of its own origin: a page on another site cannot reach
            // it through DNS rebinding, nor a page of another local port.
            StreamableHttpServerConfig::default()
                .with_allowed_hosts([address.to_string(), format!("localhost:{port}")])
                .with_allowed_origins([
                    format!("{scheme}://{address}"),
                    format!("{scheme}://localhost:{port}"),
                ])
        } else {
            // Reached by names the proxy cannot know (behind a balancer);
            // every request carries a token, which a rebinding page has not.
            StreamableHttpServerConfig::default()
                .disable_allowed_hosts()
                .enforce_origin_validation()
        };
        // Cancelled once the calls are done: the sessions' streams end.
        let sessions = tokio_util::sync::CancellationToken::new();
        let config = config.with_cancellation_token(sessions.clone());
        let body_limit = config.max_request_body_bytes;
        let manager = Arc::new(LocalSessionManager::default());
        let owners = super::sessions::Owners::new(manager.clone(), super::sessions::PER_PRINCIPAL);
        let service = StreamableHttpService::new(move || Ok(proxy.clone()), manager, config);
        // rmcp refuses a foreign Origin or Host, an unknown session, before
        // it reads the body: those answers close the connection, and say so.
        let mut router = axum::Router::new().nest_service("/mcp", service).layer(
            axum::middleware::map_response(|response: axum::response::Response| async move {
                if response.status().is_client_error() {
                    crate::auth::close_unread(response)
                } else {
                    response
                }
            }),
        );
        // rmcp answers a session's DELETE with 202; MCP's clients read
        // anything but 200 or 204 as a failure (the Python SDK logs
        // "Session termination failed: 202" on every exit).
        router = router.layer(axum::middleware::from_fn(
            |request: axum::extract::Request, next: axum::middleware::Next| async move {
                let delete = request.method() == http::Method::DELETE;
                let mut response = next.run(request).await;
                if delete && response.status() == http::StatusCode::ACCEPTED {
                    *response.status_mut() = http::StatusCode::NO_CONTENT;
                }
                response
            },
        ));
        router = router.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                super::jsonrpc::errors(body_limit, request, next)
            },
        ));
        // Behind the authentication layer, which names the caller: each
        // session is its opener's, and a principal holds a bounded number.
        router = router.layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                owners.clone().layer(request, next)
            },
        ));
        if let (Some(auth), Some(path)) = (&auth, principals) {
            let auth = auth.clone();
            tokio::spawn(idem_net::stop::on_each_sighup(move || reload(&auth, &path)));
        }
        if let Some(auth) = auth {
            // The metadata's routes after the layer: anyone may read where
            // to sign in (RFC 9728).
            router = router.layer(auth.layer()).merge(auth.metadata_router());
        }
        // Probes and scrapes carry no token: after the authentication
        // layer.
        let router = router.merge(health.router()).merge(metrics);
        // A call's answer is sent on its POST's response: waited for. A
        // session's GET stream lasts as long as the session: not.
        let requests = Requests::default();
        let router = requests.track(router, |request| request.method() != http::Method::GET);
        // The line a supervisor (and the tests) wait for, with the port
        // chosen. The name is the upstream's own text: shown escaped.
        let name = idem_runtime::text::visible(name);
        eprintln!("idem proxy: serving {name} on {scheme}://{address}/mcp");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let stopped = async move {
            let _ = stopped.await;
        };
        // On a task of its own: it goes on accepting until told to stop,
        // and then closing connections, while the drain is waited for.
        // Bounded connections (idem_net::serve): no cap per address, as
        // behind a balancer every connection comes from its address.
        // Connections are bounded by the descriptors it may open.
        idem_net::serve::raise_descriptor_limit();
        let limits = idem_net::serve::Limits {
            per_source: None,
            ..Default::default()
        };
        let mut serving = match tls {
            Some(config) => {
                let listener = idem_net::server::TlsListener::new(listener, config)?;
                tokio::spawn(idem_net::serve::serve(listener, router, limits, stopped))
            }
            None => tokio::spawn(idem_net::serve::serve(
                idem_net::server::nodelay(listener),
                router,
                limits,
                stopped,
            )),
        };
        let signal = tokio::select! {
            served = &mut serving => return Ok(served.map_err(std::io::Error::other)??),
            signal = stopping.signals.next() => signal,
        };
        // Load balancers are told not to send more.
        health.stopping();
        // Connections are still accepted while the calls under way end: a
        // client finishing one may need another request (the SDKs list
        // the tools to check a structured result). New calls are refused.
        let drained = stopping.drain(signal, requests.finished()).await;
        if drained.is_err() {
            serving.abort();
            return drained;
        }
        // No new connection from here on; the sessions' streams end, and
        // the connections close once their last bytes are out.
        let _ = stop.send(());
        sessions.cancel();
        let _ = tokio::time::timeout(CLOSING, serving).await;
        Ok(())
    }
}

/// Read the principals file at `path` again (on SIGHUP), and put it in
/// place at once; a file that cannot be read or parsed keeps the set
/// loaded, and says why on stderr.
fn reload(auth: &Authenticator, path: &std::path::Path) {
    let file = path.display();
    match Principals::load(path) {
        Ok(principals) => {
            let count = principals.len();
            auth.reload_principals(principals);
            eprintln!("idem proxy: SIGHUP: --principals {file}: {count} principals now");
        }
        Err(e) => eprintln!(
            "idem proxy: SIGHUP: --principals {file} not reloaded, the principals loaded before \
             stay: {e}"
        ),
    }
}

/// `/readyz`'s checks: the store answers, and each upstream answers a
/// ping (started again, or connected to again, if it had gone): `upstream`,
/// or `upstream:NAME` for each of a gateway's.
pub(super) fn health(
    store: Arc<dyn Store>,
    mounts: &[super::gateway::Mount],
    gateway: bool,
) -> Health {
    let mut health = Health::default().check("store", move || {
        let store = store.clone();
        async move {
            store.now().await.map(|_| ()).map_err(|e| {
                tracing::warn!(error = %e, "readiness: the store does not answer");
                "not answering"
            })
        }
    });
    for mount in mounts {
        let upstream = mount.upstream.clone();
        let name = match gateway {
            true => format!("upstream:{}", mount.name),
            false => "upstream".to_owned(),
        };
        health = health.check(name, move || {
            let upstream = upstream.clone();
            async move {
                upstream.ping().await.map_err(|e| {
                    tracing::warn!(error = %e, "readiness: an upstream is not connected");
                    "not connected"
                })
            }
        });
    }
    health
}

/// How long the connections have to close once every answer was sent.
const CLOSING: Duration = Duration::from_secs(2);
