//! The command line of the commands that serve people: `idem serve` and
//! `idem approver` (the approvers file's entries, and revoking sessions).

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Subcommand};
use http::HeaderName;
use idem_inbox::{InboxOptions, NotifyFormat, Role, TlsFiles};
use url::Url;

use crate::time::duration;

/// `idem serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The address to listen on. Loopback by default: put a reverse proxy
    /// with TLS in front of it to serve other machines.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:8080",
        value_parser = socket_addr
    )]
    pub listen: SocketAddr,
    /// The approvers file (TOML): who may sign in, with which role
    /// (approver or viewer), and their hashed passwords and API tokens
    /// (`idem approver` writes entries).
    #[arg(long, value_name = "FILE", env = "IDEM_APPROVERS")]
    pub approvers: std::path::PathBuf,
    /// The application's tool catalog (JSON, `Registry::catalog`), for
    /// each tool's description and class.
    #[arg(long, value_name = "FILE")]
    pub tools: Option<std::path::PathBuf>,
    /// An item waiting longer than this is marked overdue (90s, 15m, 2h,
    /// 7d).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = duration)]
    pub overdue: Duration,
    /// Take the signed-in approver's name from this request header, set by
    /// a reverse proxy that authenticates people (e.g. X-Forwarded-User).
    /// Only when the proxy is the only way to reach idem serve: anyone who
    /// can reach it directly could send the header. The name must still
    /// be in the approvers file, which gives its role.
    #[arg(long, value_name = "HEADER", value_parser = header_name)]
    pub trust_proxy_header: Option<HeaderName>,
    /// Record the client's address from this request header, set by a
    /// reverse proxy (e.g. X-Forwarded-For), beside the proxy's own, in
    /// the audit log of sign-ins. Only when the proxy is the only way to
    /// reach idem serve.
    #[arg(long, value_name = "HEADER", value_parser = header_name)]
    pub client_address_header: Option<HeaderName>,
    /// Mark session cookies `Secure`: set it when people reach the inbox
    /// over HTTPS through a TLS-terminating proxy (with --tls-cert they
    /// are always `Secure`).
    #[arg(long)]
    pub secure_cookies: bool,
    /// Serve HTTPS with this PEM certificate chain (and --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// On a non-loopback --listen address, serve plain HTTP anyway: a
    /// TLS-terminating proxy is in front of it (set --secure-cookies too).
    #[arg(long, conflicts_with = "tls_cert")]
    pub allow_plain_http: bool,
    /// How long a sign-in lasts at most, used or not (90s, 15m, 2h, 7d;
    /// at most ten years). Sessions are kept in the store: every idem
    /// serve on it shares them, and a restart signs nobody out.
    #[arg(long, value_name = "DURATION", default_value = "12h", value_parser = duration)]
    pub session: Duration,
    /// A sign-in not used for this long ends (90s, 15m, 2h, 7d).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = duration)]
    pub session_idle: Duration,
    /// The inbox's origin as browsers reach it (`https://inbox.example.com`),
    /// when a reverse proxy in front of it changes the Host header: every
    /// form must be posted from exactly this origin. By default, from the
    /// request's own Host.
    #[arg(long, value_name = "ORIGIN", value_parser = origin)]
    pub origin: Option<String>,
    /// Post a webhook to this URL when a call begins to wait for approval,
    /// becomes overdue (--overdue) or is decided: signed JSON (a secret is
    /// needed: --notify-secret-file or --notify-secret-env) or, with
    /// --notify-format slack, a Slack incoming webhook's message. More
    /// endpoints, each for some namespaces, go in the approvers file's
    /// `[[notify]]` tables (docs/inbox.md).
    #[arg(long, value_name = "URL")]
    pub notify: Option<String>,
    /// The body --notify is sent: json (signed) or slack.
    #[arg(long, value_name = "FORMAT", default_value = "json", value_parser = notify_format, requires = "notify")]
    pub notify_format: NotifyFormat,
    /// A file holding the secret --notify's bodies are signed with
    /// (HMAC-SHA256, header Idem-Signature). Never shown.
    #[arg(long, value_name = "FILE", requires = "notify")]
    pub notify_secret_file: Option<std::path::PathBuf>,
    /// An environment variable holding that secret, instead of a file.
    #[arg(
        long,
        value_name = "VAR",
        requires = "notify",
        conflicts_with = "notify_secret_file"
    )]
    pub notify_secret_env: Option<String>,
    /// Attempts of a webhook delivery before it is given up on (and shown
    /// as failed in the delivery log, /deliveries).
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=30))]
    pub notify_attempts: u32,
    /// The wait after a delivery's first failed attempt; it doubles after
    /// each (up to 5m).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1s",
        hide = true,
        value_parser = duration
    )]
    pub notify_backoff: Duration,
    /// A file holding the Slack app's signing secret (Basic Information,
    /// Signing Secret): Slack messages then carry Approve and Deny
    /// buttons, and a click, which Slack posts to /slack/actions (the
    /// app's Interactivity Request URL), decides as the approver whose
    /// `slack = "U…"` user id clicked, under the approval rules. Never
    /// shown.
    #[arg(long, value_name = "FILE")]
    pub slack_signing_secret_file: Option<std::path::PathBuf>,
    /// An environment variable holding that secret, instead of a file.
    #[arg(long, value_name = "VAR", conflicts_with = "slack_signing_secret_file")]
    pub slack_signing_secret_env: Option<String>,
    /// For tests only: post a click's outcome to this loopback
    /// `http://127.0.0.1:PORT` receiver instead of Slack's
    /// `https://hooks.slack.com/actions/…` (nothing else is let through).
    #[arg(long, value_name = "URL", hide = true)]
    pub slack_test_response_base: Option<String>,
    /// How often the inbox looks for new items, for pages that stay open.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1s",
        hide = true,
        value_parser = duration
    )]
    pub refresh: Duration,
    /// On SIGTERM or SIGINT, stop accepting connections, end the pages'
    /// live streams, and give the requests under way this long to finish
    /// (90s, 2m); then, or on a second signal, stop anyway, naming on
    /// stderr the requests left.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub shutdown_grace: Duration,
    /// What to log on stderr, and how.
    #[command(flatten)]
    pub logs: crate::logs::LogArgs,
}

impl ServeArgs {
    /// The inbox's options, as the flags say them.
    pub(crate) fn options(&self) -> InboxOptions {
        let mut options = InboxOptions::new(&self.approvers);
        copy_fields!(options <- self;
            listen, tools, overdue, trust_proxy_header, client_address_header, secure_cookies,
            allow_plain_http, session, session_idle, origin, notify, notify_format,
            notify_secret_file, notify_secret_env, notify_attempts, notify_backoff,
            slack_signing_secret_file, slack_signing_secret_env, slack_test_response_base,
            refresh, shutdown_grace);
        options.tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        options
    }
}

/// `idem approver`.
#[derive(Debug, Args)]
pub(crate) struct ApproverArgs {
    /// What to write.
    #[command(subcommand)]
    pub command: ApproverCommand,
}

/// `idem approver password`, `token` and `revoke`.
#[derive(Debug, Subcommand)]
pub(crate) enum ApproverCommand {
    /// Hash a password read from stdin (one line) and print the
    /// approvers-file entry for NAME.
    Password(ApproverEntryArgs),
    /// Make a new API token for NAME: print the token once on stderr (it
    /// is not kept anywhere) and the entry, which holds only its hash.
    Token(ApproverEntryArgs),
    /// End every session of NAME now, on every idem serve of the store
    /// (recorded in the audit log). NAME may sign in again: to keep them
    /// out, remove them from the approvers file and reload idem serve
    /// (SIGHUP) or restart it.
    Revoke(RevokeArgs),
}

/// `idem approver revoke`.
#[derive(Debug, Args)]
pub(crate) struct RevokeArgs {
    /// The approver whose sessions end.
    pub name: String,
    /// Who revokes (recorded in the audit log).
    #[arg(long, value_name = "NAME")]
    pub by: String,
    /// Why (recorded in the audit log).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

/// The approver an entry is for.
#[derive(Debug, Args)]
pub(crate) struct ApproverEntryArgs {
    /// The approver's name, as the audit log records their decisions.
    pub name: String,
    /// `approver` (may decide) or `viewer` (may only look).
    #[arg(long, value_name = "ROLE", default_value = "approver", value_parser = Role::parse)]
    pub role: Role,
}

/// clap's parser of `idem serve --listen`: an IP address and a port.
fn socket_addr(given: &str) -> Result<SocketAddr, String> {
    given
        .trim()
        .parse()
        .map_err(|_| "expected an IP address and port such as 127.0.0.1:8080 or [::1]:8080".into())
}

/// clap's parser of `--trust-proxy-header`: an HTTP header name.
fn header_name(given: &str) -> Result<HeaderName, String> {
    HeaderName::try_from(given.trim())
        .map_err(|_| "expected a header name such as X-Forwarded-User".into())
}

/// clap's parser of `--origin`: `http://` or `https://`, a host and an
/// optional port, nothing after, written as a browser's `Origin` header
/// says it (`url`'s serialization of an origin: the host in lower case and
/// punycode, no default port), since the inbox compares the two as text.
pub(super) fn origin(given: &str) -> Result<String, String> {
    let nothing_after =
        || "expected scheme://host[:port] and nothing after, such as https://inbox.example.com";
    let url = match Url::parse(given.trim().trim_end_matches('/')) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => url,
        Ok(_) | Err(url::ParseError::RelativeUrlWithoutBase) => {
            return Err("expected an origin such as https://inbox.example.com".into())
        }
        Err(_) => return Err(nothing_after().into()),
    };
    let origin_only = url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    match origin_only {
        true => Ok(url.origin().ascii_serialization()),
        false => Err(nothing_after().into()),
    }
}

/// clap's parser of `idem serve --notify-format`.
fn notify_format(given: &str) -> Result<NotifyFormat, String> {
    NotifyFormat::parse(given)
}
