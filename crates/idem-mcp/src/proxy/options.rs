//! What `idem proxy` is told, and how it fails before it serves.

use std::path::PathBuf;
use std::time::Duration;

use idem_runtime::store::StoreError;

pub use super::http::UpstreamUrlError;

/// How to run the proxy: the `idem proxy` command's options.
///
/// It gains an option now and then, so outside this crate it is made with
/// [`ProxyOptions::new`] (or [`ProxyOptions::default`], for an upstream
/// reached by URL) and its fields set one by one:
///
/// ```
/// use idem_mcp::proxy::ProxyOptions;
///
/// let mut options = ProxyOptions::new(["npx", "-y", "@modelcontextprotocol/server-everything"]);
/// options.listen = Some("127.0.0.1:8080".into());
/// options.no_auth = true;
/// assert_eq!(options.command.len(), 3);
/// ```
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ProxyOptions {
    /// The configuration file (TOML): a class and key options for each
    /// upstream tool, by name or glob. Where it is silent, the upstream's
    /// annotations decide.
    pub config: Option<PathBuf>,
    /// Print the configuration the proxy infers for this server and stop.
    pub print_config: bool,
    /// Serve over streamable HTTP on this address (at `/mcp`) rather than
    /// over stdio.
    pub listen: Option<String>,
    /// With `listen`: the principals file ([`Principals`](super::Principals));
    /// every request then needs a listed bearer token, and each
    /// principal's calls are recorded in a namespace of their own.
    pub principals: Option<PathBuf>,
    /// With `listen`: accept OAuth 2.1 access tokens (JWTs) from this
    /// issuer (`https://…`), each token's subject a principal of its own
    /// (`oauth/SUB`). Needs `oauth_resource`.
    pub oauth_issuer: Option<String>,
    /// The resource the tokens must be for (`aud`, RFC 8707): the URL
    /// clients reach this server at, such as `https://mcp.example.com/mcp`.
    pub oauth_resource: Option<String>,
    /// The issuer's key set (JWKS) URL, when its metadata does not say.
    pub oauth_jwks: Option<String>,
    /// With `listen` on loopback: serve without authentication (one user,
    /// one record space). Refused on any other address.
    pub no_auth: bool,
    /// With `listen`: serve HTTPS with this PEM certificate chain (and
    /// `tls_key`).
    pub tls_cert: Option<PathBuf>,
    /// The private key of `tls_cert` (PEM).
    pub tls_key: Option<PathBuf>,
    /// With `listen` on a non-loopback address: serve plain HTTP anyway,
    /// because a TLS-terminating proxy is in front.
    pub allow_plain_http: bool,
    /// An upstream MCP server already running, over streamable HTTP at
    /// this URL (`https://HOST/mcp`, or `http://`), instead of starting one.
    pub upstream: Option<String>,
    /// A file holding the bearer token the upstream wants
    /// (`Authorization: Bearer …` on every request).
    pub upstream_token_file: Option<PathBuf>,
    /// An environment variable holding that token.
    pub upstream_token_env: Option<String>,
    /// A file of at least 32 bytes that seals approval questions and
    /// tasks: every instance behind one load balancer names the same, so
    /// that each reads what the others sealed. By default each process
    /// makes its own.
    pub state_secret_file: Option<PathBuf>,
    /// Once told to stop (SIGTERM, SIGINT), how long the calls under way
    /// may take to finish and be recorded before the proxy stops anyway
    /// and names them; `None`: [`DEFAULT_SHUTDOWN_GRACE`](super::DEFAULT_SHUTDOWN_GRACE).
    pub shutdown_grace: Option<Duration>,
    /// The upstream MCP server's command and its arguments.
    pub command: Vec<String>,
}

impl ProxyOptions {
    /// Start the upstream MCP server with `command` (the program, then its
    /// arguments) and serve it over stdio; every other option as
    /// [`ProxyOptions::default`] has it.
    pub fn new<I, S>(command: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ProxyOptions {
            command: command.into_iter().map(Into::into).collect(),
            ..ProxyOptions::default()
        }
    }
}

/// The proxy could not start, or stopped serving. Nothing was called on
/// the upstream's behalf when it could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The configuration file cannot be read, or another setting cannot
    /// be used.
    #[error("{0}")]
    Config(String),
    /// The configuration file is not valid, or does not fit the
    /// upstream's tools: the error names the tool and the field.
    #[error(transparent)]
    ConfigFile(#[from] super::ConfigError),
    /// The `--upstream` URL cannot be used.
    #[error(transparent)]
    UpstreamUrl(#[from] UpstreamUrlError),
    /// The upstream server could not be started or reached, or did not
    /// answer as an MCP server does.
    #[error("{0}")]
    Upstream(String),
    /// The upstream's name cannot name a namespace of records.
    #[error("the server's name `{name}` cannot name a namespace ({reason}); set [server] name")]
    Name {
        /// The name, as the upstream gave it.
        name: String,
        /// Why it cannot.
        reason: String,
    },
    /// The proxy's own client did not initialize an MCP session.
    #[error("the client did not initialize: {0}")]
    Client(String),
    /// `--listen`'s address cannot be listened on.
    #[error("--listen: cannot listen on {address}: {source}")]
    Listen {
        /// The address given.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// `--listen` without `--principals`: on loopback it needs `--no-auth`
    /// said out loud; anywhere else it is refused.
    #[error("{}", unauthenticated(address, *loopback))]
    Unauthenticated {
        /// The address given.
        address: String,
        /// Whether it is a loopback address.
        loopback: bool,
    },
    /// `--listen` on a non-loopback address without TLS, and without
    /// `--allow-plain-http`: tokens would cross the network in the clear.
    #[error(
        "--listen {address}: not a loopback address, so serve HTTPS (--tls-cert FILE --tls-key \
         FILE), or say --allow-plain-http if a TLS-terminating proxy is in front"
    )]
    PlainHttp {
        /// The address given.
        address: String,
    },
    /// The proxy's TLS certificate or key cannot be used.
    #[error("{0}")]
    Tls(String),
    /// `--oauth-*` cannot be used: a URL, or the issuer's metadata or keys
    /// that cannot be read.
    #[error("{0}")]
    OAuth(String),
    /// The store that records the calls failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Serving failed.
    #[error("serving failed: {0}")]
    Io(#[from] std::io::Error),
    /// Told to stop, the proxy stopped before every call under way had
    /// finished: the grace ran out, or a second signal came. Each call
    /// left is in flight in the store until its lease runs out; a retry
    /// with its key then finds how it ended, or that its outcome is
    /// unknown (`idem ls` lists it).
    #[error(
        "stopped with {} call{} still under way ({why}): {}; each stays in flight until its \
         lease runs out (`idem ls` lists it)",
        calls.len(),
        if calls.len() == 1 { "" } else { "s" },
        named(calls)
    )]
    Stopped {
        /// Why it did not wait longer.
        why: String,
        /// The calls left.
        calls: Vec<crate::CallInFlight>,
    },
}

/// The words of [`ProxyError::Unauthenticated`].
fn unauthenticated(address: &str, loopback: bool) -> String {
    if loopback {
        format!(
            "--listen {address}: name who may call with --principals FILE or --oauth-issuer URL \
             (each caller's calls then keep to their own records), or say --no-auth to serve \
             everyone on this machine as one user"
        )
    } else {
        format!(
            "--listen {address}: not a loopback address, so every caller must be known: name \
             them with --principals FILE (`idem principal NAME` makes a token) or accept an \
             OAuth issuer's access tokens with --oauth-issuer URL --oauth-resource URL; --no-auth \
             is for loopback only"
        )
    }
}

/// The calls of [`ProxyError::Stopped`], one by one: `` `tool` (key KEY) ``.
fn named(calls: &[crate::CallInFlight]) -> String {
    let named: Vec<String> = calls
        .iter()
        .map(|call| {
            let tool = idem_runtime::text::visible(&call.tool);
            format!("`{tool}` (key {})", call.key)
        })
        .collect();
    named.join(", ")
}
