//! The tower layer of [`Authenticator::layer`]: a known caller goes
//! through, with its [`Caller`] in the request's extensions; anyone else is
//! answered `401` here, with a `WWW-Authenticate` that says how to
//! authenticate.

use std::task::{Context, Poll};

use axum::response::{IntoResponse, Response};
use futures_util::future::BoxFuture;
use http::Request;

use super::{Authenticator, Caller};

/// A tower [`Layer`](tower_layer::Layer) that lets only the callers of an
/// [`Authenticator`] through ([`Authenticator::layer`] makes one; the
/// [module's example](super) puts it on an axum `Router`).
///
/// ```no_run
/// use idem::mcp::auth::{Authenticator, Principals};
///
/// # fn f(app: axum::Router) -> Result<axum::Router, idem::mcp::auth::AuthError> {
/// let auth = Authenticator::from_principals(Principals::load("principals.toml".as_ref())?);
/// // Every route of `app` so far needs a token; the handlers read who
/// // called as `axum::Extension<idem::mcp::auth::Caller>`.
/// let app = app.layer(auth.layer());
/// # Ok(app) }
/// ```
#[derive(Debug, Clone)]
pub struct AuthLayer {
    auth: Authenticator,
}

impl AuthLayer {
    pub(super) fn new(auth: Authenticator) -> Self {
        AuthLayer { auth }
    }
}

impl<S> tower_layer::Layer<S> for AuthLayer {
    type Service = AuthService<S>;

    fn layer(&self, inner: S) -> AuthService<S> {
        AuthService {
            inner,
            auth: self.auth.clone(),
        }
    }
}

/// The service of an [`AuthLayer`] around `S`: a request with a bearer
/// token that names a caller goes to `S` with its [`Caller`]; any other is
/// answered `401` without reaching `S`.
///
/// ```no_run
/// use idem::mcp::auth::{AuthService, Authenticator};
/// use tower_layer::Layer;
///
/// # fn f<S>(auth: Authenticator, service: S) {
/// // Any tower service, not only an axum router.
/// let guarded: AuthService<S> = auth.layer().layer(service);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct AuthService<S> {
    inner: S,
    auth: Authenticator,
}

impl<S, B> tower_service::Service<Request<B>> for AuthService<S>
where
    S: tower_service::Service<Request<B>> + Clone + Send + 'static,
    S::Response: IntoResponse,
    S::Error: Send,
    S::Future: Send,
    B: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        // The service that was polled ready serves this request; its clone
        // waits for the next one (tower's rule for cloning into a future).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let auth = self.auth.clone();
        Box::pin(async move {
            let authorization = request
                .headers()
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok());
            let sent = authorization.is_some();
            match auth.caller(authorization).await {
                Ok(caller) => {
                    request.extensions_mut().insert::<Caller>(caller);
                    inner.call(request).await.map(IntoResponse::into_response)
                }
                Err(why) => {
                    tracing::warn!(reason = %why, "refused a request without a valid bearer token");
                    Ok(refusal(&auth, sent, &why))
                }
            }
        })
    }
}

/// A `401` saying how to authenticate: with OAuth, where the resource's
/// metadata is (RFC 9728 §5.1) and, for a token that was sent, that it is
/// invalid (RFC 6750 §3).
fn refusal(auth: &Authenticator, sent: bool, why: &str) -> Response {
    let (message, challenge) = match &auth.inner.oauth {
        Some(oauth) => {
            let mut challenge = format!("Bearer resource_metadata=\"{}\"", oauth.metadata_url());
            if sent {
                // The reason is idem's own words: no quote in it.
                challenge.push_str(&format!(
                    ", error=\"invalid_token\", error_description=\"{}\"",
                    why.replace('"', "'")
                ));
            }
            (
                "unauthorized: send `Authorization: Bearer TOKEN` with an access token from \
                 the issuer this server's metadata names",
                challenge,
            )
        }
        None => (
            "unauthorized: send `Authorization: Bearer TOKEN` with a token from the server's \
             principals file",
            "Bearer realm=\"idem\"".to_owned(),
        ),
    };
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "error": { "code": -32001, "message": message },
    });
    let mut response = (
        http::StatusCode::UNAUTHORIZED,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    if let Ok(value) = http::HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(http::header::WWW_AUTHENTICATE, value);
    }
    response
}
