//! Who is calling over streamable HTTP (feature `http-auth`): for a server
//! of your own behind axum, what `idem proxy --listen` does.
//!
//! * [`Principals`]: a file of principals, each with the SHA-256 digests of
//!   its bearer tokens ([`new_token`] makes one; so does `idem principal
//!   NAME`).
//! * [`OAuthOptions`]: an OAuth 2.1 issuer whose access tokens (JWTs,
//!   verified against its published keys) are accepted for this resource;
//!   each token's subject is the principal `oauth/SUB`.
//! * [`Authenticator`]: either or both, and what a server does with them:
//!   [`layer`](Authenticator::layer), a tower layer ([`AuthLayer`]) that
//!   refuses a request without a valid bearer token (`401` with
//!   `WWW-Authenticate`) and puts the [`Caller`] in the request's
//!   extensions; [`metadata_router`](Authenticator::metadata_router), the
//!   RFC 9728 routes that tell an MCP client where to sign in.
//! * [`McpServer::principal_from_auth`](crate::McpServer::principal_from_auth):
//!   each caller's calls keyed in a namespace of their own, so one user's
//!   key, or identical unkeyed call, never answers another's.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use idem::mcp::auth::{Authenticator, OAuthOptions, Principals};
//! use idem::mcp::McpServer;
//! use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
//! use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
//!
//! async fn serve(server: McpServer) -> Result<(), Box<dyn std::error::Error>> {
//!     // Before serving: a wrong issuer stops the server at once.
//!     let auth = Authenticator::new(
//!         Some(Principals::load("principals.toml".as_ref())?),
//!         Some(OAuthOptions::new("https://login.example.com", "https://mcp.example.com/mcp")),
//!     )
//!     .await?;
//!     let server = server.principal_from_auth();
//!     let service = StreamableHttpService::new(
//!         move || Ok(server.clone()),
//!         Arc::new(LocalSessionManager::default()),
//!         // Every request carries a token, which a DNS-rebinding page has not.
//!         StreamableHttpServerConfig::default().disable_allowed_hosts(),
//!     );
//!     let app = axum::Router::new()
//!         .nest_service("/mcp", service)
//!         .layer(auth.layer())
//!         // After the layer: anyone may read where to sign in.
//!         .merge(auth.metadata_router());
//!     let listener = tokio::net::TcpListener::bind("0.0.0.0:8931").await?;
//!     axum::serve(listener, app).await?;
//!     Ok(())
//! }
//! ```
//!
//! The layer answers a refusal itself and never calls the service behind
//! it; a refusal's reason goes to the log (`tracing`, at `warn`) and, for
//! an OAuth token, briefly into `WWW-Authenticate` (RFC 6750's
//! `error_description`), never the token.

mod layer;
mod oauth;
mod principals;

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::service::RequestContext;
use rmcp::RoleServer;

#[cfg(feature = "proxy")]
pub(crate) use layer::close_unread;
pub use layer::{AuthLayer, AuthService};
pub use oauth::OAuthOptions;
pub use principals::{new_token, Principals};

use oauth::OAuth;

/// Who may call: a principals file's bearer tokens, an OAuth issuer's
/// access tokens, or both. Cheap to clone (one shared state); see the
/// [module's example](self).
#[derive(Clone)]
pub struct Authenticator {
    inner: Arc<Inner>,
}

struct Inner {
    /// Swapped whole by [`Authenticator::reload_principals`]: a request
    /// reads the old set or the new one, never a mix.
    principals: Option<std::sync::RwLock<Arc<Principals>>>,
    oauth: Option<OAuth>,
}

/// An [`Authenticator`] could not be made: nothing was served.
///
/// ```
/// use idem::mcp::auth::{AuthError, Principals};
///
/// let error = Principals::parse("").unwrap_err();
/// assert!(matches!(error, AuthError::Principals { path: None, .. }));
/// assert!(error.to_string().contains("nobody could call"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The principals file cannot be read, or is not valid (the reason
    /// never shows a token).
    #[error("{}", principals_error(path.as_deref(), reason))]
    Principals {
        /// The file, when it was read from one.
        path: Option<PathBuf>,
        /// What is wrong with it.
        reason: String,
    },
    /// The OAuth options cannot be used: a URL that is not `https://`, an
    /// issuer whose metadata or keys cannot be read.
    #[error("{0}")]
    OAuth(String),
    /// Neither principals nor an OAuth issuer: nobody could call.
    #[error(
        "nobody could call: name the callers with a principals file or accept an OAuth \
         issuer's access tokens"
    )]
    Nobody,
}

fn principals_error(path: Option<&std::path::Path>, reason: &str) -> String {
    match path {
        Some(path) => format!("the principals file {}: {reason}", path.display()),
        None => format!("the principals file: {reason}"),
    }
}

impl Authenticator {
    /// Callers with a token of `principals`, and nobody else.
    ///
    /// ```no_run
    /// use idem::mcp::auth::{Authenticator, Principals};
    ///
    /// let auth = Authenticator::from_principals(Principals::load("principals.toml".as_ref())?);
    /// # Ok::<(), idem::mcp::auth::AuthError>(())
    /// ```
    pub fn from_principals(principals: Principals) -> Self {
        Authenticator {
            inner: Arc::new(Inner {
                principals: Some(std::sync::RwLock::new(Arc::new(principals))),
                oauth: None,
            }),
        }
    }

    /// Callers with a token of `principals`, with an access token of the
    /// issuer of `oauth`, or either. With OAuth, the issuer's keys are
    /// found (its metadata, unless [`OAuthOptions::jwks`] names them) and
    /// fetched now, so that a wrong issuer fails here rather than at the
    /// first call; they are fetched again when a token names a key not
    /// seen yet (at most every 30 s) or once they are an hour old. The
    /// [module's example](self) serves both; with OAuth only:
    ///
    /// ```no_run
    /// use idem::mcp::auth::{Authenticator, OAuthOptions};
    ///
    /// # async fn f() -> Result<(), idem::mcp::auth::AuthError> {
    /// let oauth = OAuthOptions::new("https://login.example.com", "https://mcp.example.com/mcp");
    /// let auth = Authenticator::new(None, Some(oauth)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn new(
        principals: Option<Principals>,
        oauth: Option<OAuthOptions>,
    ) -> Result<Self, AuthError> {
        let oauth = match oauth {
            Some(options) => Some(OAuth::start(&options).await?),
            None => None,
        };
        if principals.is_none() && oauth.is_none() {
            return Err(AuthError::Nobody);
        }
        let principals = principals.map(|p| std::sync::RwLock::new(Arc::new(p)));
        Ok(Authenticator {
            inner: Arc::new(Inner { principals, oauth }),
        })
    }

    /// Put `principals` in place of the principals file's callers, at once
    /// for every request from now on (a request under way keeps the set it
    /// was checked against): a file edited while the server runs, such as
    /// on SIGHUP. `false`, and nothing changed, when this authenticator
    /// takes no principals file (OAuth only).
    pub fn reload_principals(&self, principals: Principals) -> bool {
        let Some(current) = &self.inner.principals else {
            return false;
        };
        *current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(principals);
        true
    }

    /// The tower layer that lets only known callers through to the service
    /// it wraps, each request with its [`Caller`] in its extensions (the
    /// [module's example](self) serves MCP behind it):
    ///
    /// ```
    /// # fn f(auth: idem::mcp::auth::Authenticator) {
    /// let app: axum::Router = axum::Router::new()
    ///     .route("/whoami", axum::routing::get(
    ///         |axum::Extension(caller): axum::Extension<idem::mcp::auth::Caller>| async move {
    ///             caller.name().to_owned()
    ///         },
    ///     ))
    ///     .layer(auth.layer());
    /// # }
    /// ```
    pub fn layer(&self) -> AuthLayer {
        AuthLayer::new(self.clone())
    }

    /// The routes of the protected-resource metadata (RFC 9728), which
    /// tell an MCP client which issuer to get a token from: at
    /// `/.well-known/oauth-protected-resource` and under the resource's
    /// path (`…/mcp` for `https://mcp.example.com/mcp`), for anyone to read,
    /// so merge them after [`layer`](Authenticator::layer). Without OAuth,
    /// no route.
    ///
    /// ```
    /// # fn f(auth: idem::mcp::auth::Authenticator, mcp: axum::Router) {
    /// let app: axum::Router = mcp.layer(auth.layer()).merge(auth.metadata_router());
    /// # }
    /// ```
    pub fn metadata_router<S>(&self) -> axum::Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        let mut router = axum::Router::new();
        if let Some(oauth) = &self.inner.oauth {
            let document = oauth.metadata().to_string();
            for path in oauth.metadata_paths() {
                let document = document.clone();
                router = router.route(
                    &path,
                    axum::routing::get(move || async move {
                        ([(http::header::CONTENT_TYPE, "application/json")], document)
                    }),
                );
            }
        }
        router
    }

    /// The caller a request's `Authorization` value names, or why it
    /// names none (never the token).
    async fn caller(&self, authorization: Option<&str>) -> Result<Caller, String> {
        let Some(token) = authorization.and_then(bearer) else {
            return Err("no bearer token".to_owned());
        };
        let principals = self.inner.principals.as_ref().map(|p| {
            let principals = p.read().unwrap_or_else(|p| p.into_inner());
            Arc::clone(&principals)
        });
        if let Some(name) = principals.as_ref().and_then(|p| p.who_token(token)) {
            return Ok(Caller(name.to_owned()));
        }
        match &self.inner.oauth {
            Some(oauth) => oauth
                .principal(token)
                .await
                .map(Caller)
                .map_err(|e| e.to_string()),
            None => Err("a token the principals file does not list".to_owned()),
        }
    }
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("principals", &self.inner.principals)
            .field("oauth", &self.inner.oauth.is_some())
            .finish()
    }
}

/// Who is calling: the principal a request's bearer token names (`alice`
/// of the principals file, `oauth/SUB` of an access token). The
/// [`AuthLayer`] puts it in the extensions of each request it lets
/// through, for [`McpServer::principal_from_auth`](crate::McpServer::principal_from_auth),
/// or an axum handler's `Extension<Caller>`.
///
/// ```
/// use idem::mcp::auth::Caller;
/// use idem::mcp::McpServer;
///
/// // What `principal_from_auth` does, with a fallback of your own.
/// fn keyed_by_caller(server: McpServer) -> McpServer {
///     server.principal(|context| match Caller::of(context) {
///         Some(caller) => Some(caller.name().to_owned()),
///         None => Some("anonymous".to_owned()),
///     })
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller(String);

impl Caller {
    /// The principal's name (the [example of `Caller`](Caller)).
    pub fn name(&self) -> &str {
        &self.0
    }

    /// The caller of an MCP request served by rmcp's streamable HTTP
    /// server behind an [`AuthLayer`]: rmcp puts the HTTP request's
    /// `http::request::Parts` in `context.extensions`, the layer put the
    /// caller in theirs. `None` on any other transport (the [example of
    /// `Caller`](Caller)).
    pub fn of(context: &RequestContext<RoleServer>) -> Option<&Caller> {
        context
            .extensions
            .get::<http::request::Parts>()?
            .extensions
            .get::<Caller>()
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
