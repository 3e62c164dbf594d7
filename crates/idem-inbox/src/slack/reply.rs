//! Where a decision's outcome is posted: the `response_url` of the
//! interactivity payload, which replaces the message clicked.
//!
//! The URL comes in the (signed) request, and idem posts to it, so it is
//! checked as a destination an attacker could choose (SSRF): only
//! `https://hooks.slack.com/actions/…` (no user part, no port but 443).
//! Tests name a loopback receiver instead with
//! [`Replies::for_tests`] (`idem serve --slack-test-response-base`,
//! hidden): the operator sets it at start, it must be `http://` to a
//! loopback address, and then exactly that scheme, host and port are let
//! through — never any other host, and never Slack's. The client follows
//! no redirect.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, Uri};
use idem_net::client::HttpClient;
use idem_net::destination;

/// Where replies may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Replies {
    /// Slack's `https://hooks.slack.com/actions/…` only.
    Slack,
    /// A test's loopback receiver only: its `http://` host and port.
    Loopback {
        /// The host, as the URL writes it (`127.0.0.1`, `[::1]`).
        host: String,
        /// The port.
        port: u16,
    },
}

/// How long a reply may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The most of Slack's answer read.
const ANSWER_LIMIT: usize = 16 * 1024;

impl Replies {
    /// Replies to `base` (`http://127.0.0.1:PORT`) instead of Slack: for a
    /// test's receiver, refused unless `http://` to a loopback address
    /// with a port.
    pub(crate) fn for_tests(base: &str) -> Result<Replies, String> {
        let refused = || {
            format!("--slack-test-response-base {base}: only http:// to a loopback address and port (a test's receiver)")
        };
        let uri = destination::check(base).map_err(|_| refused())?;
        let host = uri.host().unwrap_or_default();
        match (uri.scheme_str(), uri.port_u16()) {
            (Some("http"), Some(port)) if destination::is_loopback(host) && host != "localhost" => {
                Ok(Replies::Loopback {
                    host: host.to_owned(),
                    port,
                })
            }
            _ => Err(refused()),
        }
    }

    /// `url` read, if replies may go there.
    pub(crate) fn allows(&self, url: &str) -> Option<Uri> {
        let uri: Uri = url.parse().ok()?;
        let authority = uri.authority()?;
        if authority.as_str().contains('@') {
            return None;
        }
        let ok = match self {
            Replies::Slack => {
                uri.scheme_str() == Some("https")
                    && authority.host() == "hooks.slack.com"
                    && matches!(uri.port_u16(), None | Some(443))
                    && uri.path().starts_with("/actions/")
            }
            Replies::Loopback { host, port } => {
                uri.scheme_str() == Some("http")
                    && authority.host() == host
                    && uri.port_u16() == Some(*port)
            }
        };
        ok.then_some(uri)
    }
}

/// Post `message` (JSON) to `uri`; a failure is logged, never retried
/// (Slack keeps a response URL for 30 minutes and five uses).
pub(crate) async fn post(client: HttpClient, uri: Uri, message: serde_json::Value) {
    let body = Bytes::from(serde_json::to_vec(&message).expect("JSON serializes"));
    let headers = [(header::CONTENT_TYPE, "application/json".to_owned())];
    let sent = tokio::time::timeout(
        TIMEOUT,
        client.post(&uri.to_string(), &headers, body, ANSWER_LIMIT),
    )
    .await;
    match sent {
        Ok(Ok((status, _))) if status.is_success() => {}
        Ok(Ok((status, _))) => {
            tracing::warn!("slack: the message could not be updated: answered {status}")
        }
        Ok(Err(e)) => tracing::warn!("slack: the message could not be updated: {e}"),
        Err(_) => tracing::warn!("slack: the message could not be updated: no answer in 10 s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_go_to_slack_s_hooks_only_or_to_the_test_s_receiver_only() {
        let slack = Replies::Slack;
        assert!(slack
            .allows("https://hooks.slack.com/actions/T1/123/abcDEF")
            .is_some());
        assert!(slack
            .allows("https://hooks.slack.com:443/actions/T1/1/x")
            .is_some());
        for refused in [
            "http://hooks.slack.com/actions/T1/1/x",
            "https://hooks.slack.com:8443/actions/T1/1/x",
            "https://hooks.slack.com.evil.example/actions/x",
            "https://hooks.slack.com@evil.example/actions/x",
            "https://evil.example/actions/x?hooks.slack.com",
            "https://evil.example#https://hooks.slack.com/actions/",
            "https://hooks.slack.com/services/T/B/X",
            "http://127.0.0.1:9/actions/x",
            "http://169.254.169.254/latest/meta-data/",
            "https://HOOKS.slack.com.attacker.example/actions/x",
            "/actions/x",
            "",
        ] {
            assert!(slack.allows(refused).is_none(), "{refused}");
        }
        let test = Replies::for_tests("http://127.0.0.1:4567").unwrap();
        assert!(test.allows("http://127.0.0.1:4567/reply/1").is_some());
        for refused in [
            "http://127.0.0.1:4568/reply/1",
            "http://127.0.0.2:4567/reply/1",
            "https://hooks.slack.com/actions/T1/1/x",
            "http://x@127.0.0.1:4567/",
            "https://127.0.0.1:4567/",
        ] {
            assert!(test.allows(refused).is_none(), "{refused}");
        }
        for base in [
            "http://10.0.0.1:80",
            "https://hooks.example.com:443",
            "http://127.0.0.1",
            "http://localhost:80",
        ] {
            assert!(Replies::for_tests(base).is_err(), "{base}");
        }
    }
}
