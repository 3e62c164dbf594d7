//! How an inbox is served ([`InboxOptions`]): where it listens, who may
//! sign in, how sessions last, where webhooks go. `idem serve`'s flags
//! fill it in one to one; a program of its own starts from
//! [`InboxOptions::new`] and sets what differs from the defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::http::HeaderName;

pub use crate::notify::endpoint::Format as NotifyFormat;

/// How an inbox is served: [`InboxOptions::new`] with the approvers file,
/// then the fields that differ from its defaults (those of `idem serve`).
///
/// ```
/// use std::time::Duration;
///
/// let mut options = idem_inbox::InboxOptions::new("approvers.toml");
/// options.listen = "127.0.0.1:9090".parse().unwrap();
/// options.overdue = Duration::from_secs(15 * 60);
/// assert!(options.tls.is_none());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InboxOptions {
    /// The address to listen on (`127.0.0.1:8080`). A non-loopback address
    /// needs [`tls`](Self::tls) or [`allow_plain_http`](Self::allow_plain_http).
    pub listen: SocketAddr,
    /// The approvers file (TOML): who may sign in, with which role, their
    /// hashed passwords and API tokens, the approval rules and webhooks.
    pub approvers: PathBuf,
    /// The application's tool catalog (JSON, `Registry::catalog`), for
    /// each tool's description and class.
    pub tools: Option<PathBuf>,
    /// An item waiting longer than this is marked overdue (1 hour).
    pub overdue: Duration,
    /// Take the signed-in approver's name from this request header, set by
    /// a reverse proxy that authenticates people. Only when the proxy is
    /// the only way to reach the inbox.
    pub trust_proxy_header: Option<HeaderName>,
    /// Record the client's address from this request header, set by a
    /// reverse proxy, beside the proxy's own, in the audit log of sign-ins.
    pub client_address_header: Option<HeaderName>,
    /// Mark session cookies `Secure` (always so with [`tls`](Self::tls)).
    pub secure_cookies: bool,
    /// Serve HTTPS with this certificate chain and key.
    pub tls: Option<TlsFiles>,
    /// On a non-loopback address, serve plain HTTP anyway: a
    /// TLS-terminating proxy is in front.
    pub allow_plain_http: bool,
    /// How long a sign-in lasts at most, used or not (12 hours).
    pub session: Duration,
    /// A sign-in not used for this long ends (1 hour).
    pub session_idle: Duration,
    /// The inbox's origin as browsers reach it (`https://inbox.example.com`,
    /// lower case, no trailing `/`); `None`: the request's own Host.
    pub origin: Option<String>,
    /// A webhook to tell when a call begins to wait, becomes overdue or is
    /// decided (more go in the approvers file's `[[notify]]` tables).
    pub notify: Option<String>,
    /// The body [`notify`](Self::notify) is sent (signed JSON by default).
    pub notify_format: NotifyFormat,
    /// A file holding the secret [`notify`](Self::notify)'s bodies are
    /// signed with.
    pub notify_secret_file: Option<PathBuf>,
    /// An environment variable holding that secret, instead of a file.
    pub notify_secret_env: Option<String>,
    /// Attempts of a webhook delivery before it is given up on (8).
    pub notify_attempts: u32,
    /// The wait after a delivery's first failed attempt; it doubles after
    /// each, up to 5 minutes (1 second).
    pub notify_backoff: Duration,
    /// A file holding the Slack app's signing secret: Slack messages then
    /// carry Approve and Deny buttons, whose clicks Slack posts to
    /// `/slack/actions` (docs/inbox.md).
    pub slack_signing_secret_file: Option<PathBuf>,
    /// An environment variable holding that secret, instead of a file.
    pub slack_signing_secret_env: Option<String>,
    /// For tests only: post the outcome of a click to this loopback
    /// `http://127.0.0.1:PORT` receiver instead of Slack's
    /// `https://hooks.slack.com/actions/…` (nothing else is let through
    /// either way).
    pub slack_test_response_base: Option<String>,
    /// How often the inbox looks for new items, for pages that stay open
    /// (1 second).
    pub refresh: Duration,
    /// Once told to stop (SIGTERM, SIGINT), how long the requests under way
    /// may take to finish before the inbox stops anyway and names them
    /// (30 seconds).
    pub shutdown_grace: Duration,
}

/// The PEM files of an HTTPS inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

impl InboxOptions {
    /// The options of `idem serve --approvers FILE` given nothing else:
    /// plain HTTP on `127.0.0.1:8080`, sessions of at most 12 hours (1
    /// idle), items overdue after an hour, no webhook.
    pub fn new(approvers: impl Into<PathBuf>) -> InboxOptions {
        const HOUR: Duration = Duration::from_secs(3600);
        InboxOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            approvers: approvers.into(),
            tools: None,
            overdue: HOUR,
            trust_proxy_header: None,
            client_address_header: None,
            secure_cookies: false,
            tls: None,
            allow_plain_http: false,
            session: 12 * HOUR,
            session_idle: HOUR,
            origin: None,
            notify: None,
            notify_format: NotifyFormat::Json,
            notify_secret_file: None,
            notify_secret_env: None,
            notify_attempts: 8,
            notify_backoff: Duration::from_secs(1),
            slack_signing_secret_file: None,
            slack_signing_secret_env: None,
            slack_test_response_base: None,
            refresh: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(30),
        }
    }
}
