//! The names a server answers to: a request whose `Host` is not one of
//! them is refused before anything else reads it. A page on another site
//! can make a browser send requests to a server on loopback by pointing
//! its own name at `127.0.0.1` (DNS rebinding); the browser then sends
//! that name as `Host`, and the page's origin is that name too, so
//! checking `Origin` against `Host` alone lets it through. Checking `Host`
//! against the names the operator serves under does not.
//!
//! The names: the listen address (unless it is a wildcard such as
//! `0.0.0.0`), the loopback names at its port (`localhost`, `127.0.0.1`,
//! `[::1]`), and the host of every origin the operator names (`--origin`),
//! at its port. A `Host` without a port matches a name at port 80 or 443.
//! The MCP proxy's listener does the same check through rmcp's
//! `allowed_hosts`.
//!
//! ```
//! use idem_net::hosts::AllowedHosts;
//!
//! let hosts = AllowedHosts::new("127.0.0.1:8080".parse().unwrap(), &["https://inbox.example.com"])?;
//! assert!(hosts.allows(Some("localhost:8080")));
//! assert!(hosts.allows(Some("inbox.example.com")));
//! assert!(!hosts.allows(Some("rebind.example:8080")));
//! assert!(!hosts.allows(None));
//! # Ok::<(), idem_net::hosts::HostsError>(())
//! ```

use std::fmt;
use std::net::SocketAddr;

use axum::http::uri::{Authority, Scheme, Uri};

/// An origin the operator named that gives no host to serve under.
#[derive(Debug, thiserror::Error)]
#[error("{origin:?} is not an origin (scheme://host[:port]): {reason}")]
pub struct HostsError {
    /// The origin as given.
    pub origin: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// One name at one port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Name {
    /// Lower case, IPv6 addresses without brackets.
    host: String,
    port: u16,
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host.contains(':') {
            true => write!(f, "[{}]:{}", self.host, self.port),
            false => write!(f, "{}:{}", self.host, self.port),
        }
    }
}

/// The `Host` values a server accepts.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    names: Vec<Name>,
}

impl AllowedHosts {
    /// The names of a server listening on `local` (the address bound, its
    /// port chosen) and reached at `origins` (`https://inbox.example.com`,
    /// `http://10.0.0.5:8080`).
    pub fn new(local: SocketAddr, origins: &[&str]) -> Result<Self, HostsError> {
        let port = local.port();
        let mut names: Vec<Name> = ["localhost", "127.0.0.1", "::1"]
            .into_iter()
            .map(|host| Name {
                host: host.to_owned(),
                port,
            })
            .collect();
        if !local.ip().is_unspecified() {
            names.push(Name {
                host: local.ip().to_string(),
                port,
            });
        }
        for origin in origins {
            names.push(origin_name(origin)?);
        }
        names.dedup();
        Ok(AllowedHosts { names })
    }

    /// Whether a request whose `Host` header is `host` may be answered.
    /// A missing or unreadable `Host` may not.
    pub fn allows(&self, host: Option<&str>) -> bool {
        let Some(authority) = host.and_then(|h| h.parse::<Authority>().ok()) else {
            return false;
        };
        if authority.as_str().contains('@') {
            return false;
        }
        let host = normalize(authority.host());
        self.names.iter().any(|name| {
            name.host == host
                && match authority.port_u16() {
                    Some(port) => port == name.port,
                    None => matches!(name.port, 80 | 443),
                }
        })
    }

    /// The names, as `host:port`, to say in a refusal or at start.
    pub fn names(&self) -> Vec<String> {
        self.names.iter().map(Name::to_string).collect()
    }
}

/// The name an origin is reached under.
fn origin_name(origin: &str) -> Result<Name, HostsError> {
    let refuse = |reason| HostsError {
        origin: origin.to_owned(),
        reason,
    };
    let uri: Uri = origin.parse().map_err(|_| refuse("it cannot be read"))?;
    let default = match uri.scheme() {
        Some(s) if *s == Scheme::HTTPS => 443,
        Some(s) if *s == Scheme::HTTP => 80,
        _ => return Err(refuse("its scheme must be http or https")),
    };
    let authority = uri.authority().ok_or_else(|| refuse("it has no host"))?;
    if authority.as_str().contains('@') {
        return Err(refuse("it names a user"));
    }
    Ok(Name {
        host: normalize(authority.host()),
        port: authority.port_u16().unwrap_or(default),
    })
}

/// A host as compared: lower case, without an IPv6 address's brackets.
fn normalize(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_the_listen_address_at_its_port_only() {
        let hosts = AllowedHosts::new("127.0.0.1:8080".parse().unwrap(), &[]).unwrap();
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "[::1]:8080",
        ] {
            assert!(hosts.allows(Some(host)), "{host}");
        }
        for host in [
            "127.0.0.1:8081",
            "evil.example:8080",
            "localhost",
            "localhost.:8080",
            "dana@localhost:8080",
            "",
            "localhost:8080/x",
        ] {
            assert!(!hosts.allows(Some(host)), "{host}");
        }
        assert!(!hosts.allows(None));
    }

    #[test]
    fn a_wildcard_listen_is_reached_by_loopback_and_the_named_origins() {
        let hosts = AllowedHosts::new(
            "0.0.0.0:8443".parse().unwrap(),
            &["https://Inbox.Example.com", "http://[2001:db8::1]:9000"],
        )
        .unwrap();
        assert!(!hosts.allows(Some("0.0.0.0:8443")));
        assert!(hosts.allows(Some("localhost:8443")));
        assert!(hosts.allows(Some("inbox.example.com")));
        assert!(hosts.allows(Some("inbox.example.com:443")));
        assert!(!hosts.allows(Some("inbox.example.com:8443")));
        assert!(hosts.allows(Some("[2001:db8::1]:9000")));
        assert_eq!(
            hosts.names().last().map(String::as_str),
            Some("[2001:db8::1]:9000")
        );
    }

    #[test]
    fn an_origin_without_a_host_or_with_another_scheme_is_refused() {
        let local = "127.0.0.1:0".parse().unwrap();
        for origin in [
            "inbox.example.com",
            "ftp://inbox.example.com",
            "https://u@h",
            "::",
        ] {
            let error = AllowedHosts::new(local, &[origin]).unwrap_err();
            assert!(error.to_string().contains(origin), "{error}");
        }
    }
}
