//! Where idem's own requests may go: an `https://` URL, or plain
//! `http://` to this machine only (a test's server, an issuer on the same
//! host). An OAuth issuer's keys and the inbox's webhooks carry what must
//! not be read or changed on the way, so they travel over TLS.
//!
//! Read with `http`'s [`Uri`], the parser of the [client](crate::client)
//! that makes the requests, so a URL accepted here is one it can reach.
//!
//! ```
//! use idem_net::destination::{check, Refused};
//!
//! assert!(check("https://hooks.example.com/x").is_ok());
//! assert!(check("http://127.0.0.1:9000/hook").is_ok());
//! assert_eq!(check("http://hooks.example.com/x"), Err(Refused::PlainHttp));
//! ```

use http::Uri;

/// Why a URL is not somewhere idem sends requests.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// Not a URL at all (spaces, no host after `https://`, …): what
    /// `http` said.
    #[error("not a URL ({0})")]
    NotUrl(String),
    /// `https://` with an empty host (`https://:443/`).
    #[error("the URL names no host")]
    NoHost,
    /// `http://` to another machine.
    #[error("plain http:// only to this machine (loopback)")]
    PlainHttp,
    /// Neither `https://` nor `http://`, or no scheme.
    #[error("the URL is neither https:// nor http://")]
    OtherScheme,
}

/// `url` read, if it is `https://` with a host, or `http://` to a
/// [loopback](is_loopback) host.
pub fn check(url: &str) -> Result<Uri, Refused> {
    let uri: Uri = url.parse().map_err(|e| Refused::NotUrl(format!("{e}")))?;
    let host = uri.host().unwrap_or_default();
    match uri.scheme_str() {
        Some("https") if host.is_empty() => Err(Refused::NoHost),
        Some("https") => Ok(uri),
        Some("http") if is_loopback(host) => Ok(uri),
        Some("http") => Err(Refused::PlainHttp),
        _ => Err(Refused::OtherScheme),
    }
}

/// Whether `host` (a URL's, IPv6 in brackets or not) is this machine:
/// `localhost` or a loopback address.
///
/// ```
/// use idem_net::destination::is_loopback;
/// assert!(is_loopback("localhost") && is_loopback("127.0.0.1") && is_loopback("[::1]"));
/// assert!(!is_loopback("example.com") && !is_loopback("10.0.0.1"));
/// ```
pub fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_anywhere_and_plain_http_to_this_machine_only() {
        for ok in [
            "https://hooks.slack.com/services/T/B/X",
            "https://user:pw@hooks.example.com/x",
            "http://127.0.0.1:9000/hook",
            "http://[::1]:9000/hook",
            "http://localhost/hook",
        ] {
            assert!(check(ok).is_ok(), "{ok}");
        }
        assert_eq!(check("http://hooks.example.com/x"), Err(Refused::PlainHttp));
        assert_eq!(check("http://10.0.0.1/x"), Err(Refused::PlainHttp));
        assert_eq!(check("ftp://x"), Err(Refused::OtherScheme));
        assert_eq!(check("login.example.com"), Err(Refused::OtherScheme));
        assert_eq!(check("https://:443/x"), Err(Refused::NoHost));
        for not_url in ["https://", "https:///x", "https://h/a b", ""] {
            assert!(
                matches!(check(not_url), Err(Refused::NotUrl(_))),
                "{not_url}"
            );
        }
    }
}
