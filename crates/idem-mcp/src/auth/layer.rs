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
    close_unread(response)
}

/// `response` with `Connection: close`, for an answer given before the
/// request's body was read. Without it hyper may drop the connection after
/// the answer (it cannot find where the next request starts), and a client
/// that sends its next request on it — the retry with a token — is answered
/// by a closed socket instead.
pub(crate) fn close_unread(mut response: Response) -> Response {
    response.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    response
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use http_body_util::BodyExt;
    use tower_service::Service;

    use super::super::{new_token, Principals};
    use super::*;

    /// An app that answers who called, behind a layer for alice's token.
    fn app() -> (axum::Router, String) {
        let (token, digest) = new_token();
        let principals = Principals::parse(&format!(
            "[[principal]]\nname = \"alice\"\ntokens = [\"{digest}\"]\n"
        ))
        .unwrap();
        let auth = Authenticator::from_principals(principals);
        let whoami = |axum::Extension(caller): axum::Extension<Caller>| async move {
            caller.name().to_owned()
        };
        let app = axum::Router::new()
            .route("/whoami", axum::routing::get(whoami))
            .layer(auth.layer())
            .merge(auth.metadata_router());
        (app, token)
    }

    async fn get(app: &axum::Router, authorization: Option<&str>) -> (u16, String, String) {
        let mut request = Request::get("/whoami");
        if let Some(value) = authorization {
            request = request.header(http::header::AUTHORIZATION, value);
        }
        let mut app = app.clone();
        std::future::poll_fn(|cx| Service::<Request<Body>>::poll_ready(&mut app, cx))
            .await
            .unwrap();
        let response = app
            .call(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status().as_u16();
        let challenge = response
            .headers()
            .get(http::header::WWW_AUTHENTICATE)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, challenge, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn a_listed_token_reaches_the_service_as_its_caller() {
        let (app, token) = app();
        let (status, _, body) = get(&app, Some(&format!("Bearer {token}"))).await;
        assert_eq!((status, body.as_str()), (200, "alice"));
    }

    #[tokio::test]
    async fn anyone_else_is_answered_401_with_a_challenge_and_never_reaches_the_service() {
        let (app, token) = app();
        for authorization in [
            None,
            Some("Bearer idem_not_listed".to_owned()),
            Some(format!("Basic {token}")),
        ] {
            let (status, challenge, body) = get(&app, authorization.as_deref()).await;
            assert_eq!(status, 401, "{authorization:?}");
            assert_eq!(challenge, "Bearer realm=\"idem\"");
            assert!(body.contains("Authorization: Bearer TOKEN"), "{body}");
            assert!(!body.contains(&token), "no token in the answer");
        }
    }

    /// A refusal is sent before the body is read, so it must say the
    /// connection ends: a client that sends its retry (with the token) on
    /// the same connection would otherwise meet a closed socket.
    #[tokio::test]
    async fn a_refusal_before_the_body_arrived_says_the_connection_closes() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (app, _) = app();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let mut socket = tokio::net::TcpStream::connect(address).await.unwrap();
        // The head now, the body never: as a client whose body is still on
        // its way when the answer is decided.
        socket
            .write_all(b"POST /whoami HTTP/1.1\r\nHost: x\r\nContent-Length: 64\r\n\r\n")
            .await
            .unwrap();
        let mut answer = vec![0; 4096];
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(10), socket.read(&mut answer))
                .await
                .expect("answered without the body")
                .unwrap();
        let head = String::from_utf8_lossy(&answer[..read]).to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 401"), "{head}");
        assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    }
}
