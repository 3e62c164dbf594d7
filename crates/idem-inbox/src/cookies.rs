//! Cookies and forms: the names and attributes of the inbox's cookies,
//! CSRF tokens, and whether a post comes from the inbox's own pages.
//!
//! Two cookies: the session's ([`SESSION`]) and the sign-in form's
//! ([`LOGIN`]), which carries the form's CSRF token before anyone is
//! signed in (double submit: the form's field must equal it). Both are
//! `HttpOnly` (no script reads them), `SameSite=Strict` (no other site's
//! page sends them) and `Path=/`. Served securely (`--tls-cert`, or
//! `--secure-cookies` behind a TLS terminator), they are also `Secure`
//! and named with the `__Host-` prefix, which browsers accept only from a
//! secure origin, for the whole host and no domain: a page on a sibling
//! subdomain, or a plain-HTTP page of the same host, cannot plant them.
//! Over plain HTTP on loopback the prefix is not possible (browsers drop
//! such cookies), and cookies do not keep ports apart: that is why every
//! post is also checked for coming from the inbox's own origin
//! ([`same_origin`]), sign-in included, and why a request carrying an
//! inbox cookie twice (one planted by a page on another port, with a
//! longer `Path`) is refused whole ([`Cookies::planted`]) rather than read
//! as whoever's id was planted. A page on another port can still replace
//! the browser's cookie outright (same name, `Path=/`), and no cookie
//! attribute stops that over plain HTTP. `__Host-` does not keep ports
//! apart either: only a secure origin can set it, but browsers count
//! loopback names as secure even over plain HTTP ([`on_loopback`]). What
//! stops the replaced cookie from deciding is a key the cookie is not: the
//! inbox's script makes a browser key at sign-in and keeps it in
//! `localStorage`, which is per origin, port included; the session keeps
//! its digest (`session.rs`), and every post that changes something must
//! carry the key (`App::same_browser`). A planted session meets the
//! browser's own key, or none, and decides nothing; its cookie is
//! cleared. Where another port could have set the cookie, a session
//! without a key (no script) decides nothing either; with `__Host-`
//! cookies under a name of the inbox's own, it may.

use axum::http::{header, HeaderMap, Method};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;

/// The session cookie's name, without the `__Host-` prefix.
pub(super) const SESSION: &str = "idem_session";

/// The sign-in form's cookie's name, without the `__Host-` prefix.
pub(super) const LOGIN: &str = "idem_login";

/// How this server writes its cookies.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cookies {
    /// `Secure` and `__Host-`.
    pub secure: bool,
}

impl Cookies {
    /// The name cookie `base` (`SESSION`, `LOGIN`) has on this server.
    pub(super) fn name(&self, base: &str) -> String {
        match self.secure {
            true => format!("__Host-{base}"),
            false => base.to_owned(),
        }
    }

    /// A `Set-Cookie` value for cookie `base` = `value`, with this
    /// server's attributes; `max_age` in seconds.
    // Written here rather than by the `cookie` crate (0.18, in the tree
    // only through the browser tests' fantoccini): it would bring `time`
    // and six more crates into the inbox's build for these few lines, and
    // it writes the attributes in an order of its own
    // (`HttpOnly; SameSite=Strict; Secure; Path=/; Max-Age=60`).
    pub(super) fn set(&self, base: &str, value: &str, max_age: u64) -> String {
        let mut cookie = format!(
            "{}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}",
            self.name(base)
        );
        if self.secure {
            cookie.push_str("; Secure");
        }
        cookie
    }

    /// A `Set-Cookie` value that deletes cookie `base`.
    pub(super) fn clear(&self, base: &str) -> String {
        self.set(base, "", 0)
    }

    /// The value of cookie `base` in the request's `Cookie` headers; the
    /// first when there are several ([`Cookies::planted`] refuses those
    /// requests before any handler reads one).
    pub(super) fn get<'a>(&self, headers: &'a HeaderMap, base: &str) -> Option<&'a str> {
        let name = self.name(base);
        cookie_pairs(headers)
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    /// The name of an inbox cookie the request carries more than once,
    /// if any. A browser holds two cookies of one name when a page of
    /// another origin that shares the host (another port, over plain
    /// HTTP) set one with a longer `Path`: it sends that one first, and a
    /// server that read it would act as whoever's id was planted. Such a
    /// request is refused whole: which of the two is this browser's own
    /// cannot be told.
    pub(super) fn planted(&self, headers: &HeaderMap) -> Option<String> {
        [SESSION, LOGIN]
            .into_iter()
            .map(|base| self.name(base))
            .find(|name| {
                cookie_pairs(headers)
                    .filter(|(n, _)| n == name)
                    .nth(1)
                    .is_some()
            })
    }

    /// `Set-Cookie` values that delete cookie `name` (as
    /// [`Cookies::planted`] found it) at `path` and every path above it: a
    /// planted cookie is deleted only at the path it was set for.
    pub(super) fn clear_along(&self, name: &str, path: &str) -> Vec<String> {
        let secure = if self.secure { "; Secure" } else { "" };
        let mut paths = vec!["/".to_owned()];
        let mut prefix = String::new();
        // At most a few segments: the inbox's paths are short.
        for segment in path.split('/').filter(|s| !s.is_empty()).take(4) {
            prefix.push('/');
            prefix.push_str(segment);
            paths.push(prefix.clone());
        }
        paths
            .into_iter()
            .map(|p| format!("{name}=; Path={p}; HttpOnly; SameSite=Strict; Max-Age=0{secure}"))
            .collect()
    }
}

/// Every `name=value` pair of the request's `Cookie` headers (one with
/// HTTP/1.1 browsers, possibly several with HTTP/2).
fn cookie_pairs(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|header| header.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}

/// Whether a request that changes something comes from the inbox's own
/// pages, as far as the browser says: its `Origin` (sent by browsers with
/// every post) must be `origin` exactly, scheme, host and port, else the
/// request's own `Host` under either scheme; and `Sec-Fetch-Site`, when
/// sent, must be `same-origin` (a page on another port of the same host is
/// `same-site`) or `none` (typed by the person). A request with neither
/// header comes from a program, not from a page someone was lured to, and
/// passes; GET and HEAD always pass.
pub(super) fn same_origin(method: &Method, headers: &HeaderMap, origin: Option<&str>) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return true;
    }
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        if !matches!(site, "same-origin" | "none") {
            return false;
        }
    }
    let Some(sent) = text(header::ORIGIN) else {
        return true;
    };
    match origin {
        Some(expected) => sent == expected,
        None => {
            let Some(host) = text(header::HOST) else {
                return false;
            };
            sent == format!("http://{host}") || sent == format!("https://{host}")
        }
    }
}

/// Whether the inbox is reached under a loopback name (`localhost`,
/// `*.localhost`, `127.0.0.0/8`, `[::1]`): `origin`'s host (`--origin`,
/// the name browsers use) when given, else the request's `Host`; one that
/// cannot be read counts as loopback. Browsers treat loopback as a secure
/// origin even over plain HTTP, so there a page on another port can set
/// even a `__Host-` cookie for the inbox (Chromium does).
pub(super) fn on_loopback(headers: &HeaderMap, origin: Option<&str>) -> bool {
    let host = match origin {
        Some(origin) => origin
            .parse::<axum::http::Uri>()
            .ok()
            .and_then(|uri| uri.host().map(str::to_owned)),
        None => headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .and_then(|h| h.parse::<axum::http::uri::Authority>().ok())
            .map(|a| a.host().to_owned()),
    };
    let Some(host) = host else {
        return true;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => name == "localhost" || name.ends_with(".localhost"),
    }
}

/// 24 random bytes, base64url: CSRF tokens and nonces.
pub(super) fn random_token() -> String {
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether two tokens are equal, in time that does not depend on where
/// they differ.
pub(super) fn same_token(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secure_cookies_are_host_prefixed_and_say_so() {
        let plain = Cookies { secure: false };
        let cookie = plain.set(SESSION, "v", 60);
        assert_eq!(
            cookie,
            "idem_session=v; Path=/; HttpOnly; SameSite=Strict; Max-Age=60"
        );
        let secure = Cookies { secure: true };
        let cookie = secure.set(LOGIN, "v", 60);
        assert!(
            cookie.starts_with("__Host-idem_login=v; Path=/;"),
            "{cookie}"
        );
        assert!(cookie.ends_with("; Secure") && !cookie.contains("Domain"));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "idem_login=planted; __Host-idem_login=mine"
                .parse()
                .unwrap(),
        );
        assert_eq!(secure.get(&headers, LOGIN), Some("mine"));
        assert_eq!(plain.get(&headers, LOGIN), Some("planted"));
        assert!(secure.clear(SESSION).contains("Max-Age=0"));
    }

    #[test]
    fn a_cookie_sent_twice_is_found_and_cleared_along_its_path() {
        let plain = Cookies { secure: false };
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, "idem_session=eve; other=1".parse().unwrap());
        assert_eq!(plain.planted(&headers), None);
        headers.append(header::COOKIE, "idem_session=dana".parse().unwrap());
        assert_eq!(plain.planted(&headers).as_deref(), Some("idem_session"));
        assert_eq!(plain.get(&headers, SESSION), Some("eve"));
        let secure = Cookies { secure: true };
        assert_eq!(secure.planted(&headers), None, "only __Host- counts");
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "idem_login=a; idem_session=b; idem_login=c"
                .parse()
                .unwrap(),
        );
        assert_eq!(plain.planted(&headers).as_deref(), Some("idem_login"));
        let clears = plain.clear_along("idem_session", "/records/k1/approve");
        assert_eq!(clears.len(), 4);
        assert!(
            clears[0].starts_with("idem_session=; Path=/;"),
            "{clears:?}"
        );
        assert!(
            clears[3].contains("Path=/records/k1/approve;"),
            "{clears:?}"
        );
        assert!(clears.iter().all(|c| c.contains("Max-Age=0")));
    }

    #[test]
    fn a_post_must_come_from_the_inbox_itself() {
        let post = Method::POST;
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, v.parse().unwrap());
            }
            h
        };
        let host = ("host", "127.0.0.1:8080");
        assert!(same_origin(
            &post,
            &headers(&[host, ("origin", "http://127.0.0.1:8080")]),
            None
        ));
        assert!(!same_origin(
            &post,
            &headers(&[host, ("origin", "http://127.0.0.1:9000")]),
            None
        ));
        assert!(!same_origin(
            &post,
            &headers(&[host, ("origin", "null")]),
            None
        ));
        assert!(!same_origin(
            &post,
            &headers(&[host, ("sec-fetch-site", "same-site")]),
            None
        ));
        assert!(same_origin(&post, &headers(&[host]), None), "a program");
        assert!(same_origin(
            &Method::GET,
            &headers(&[host, ("origin", "http://evil")]),
            None
        ));
        let public = Some("https://inbox.example.com");
        assert!(same_origin(
            &post,
            &headers(&[host, ("origin", "https://inbox.example.com")]),
            public
        ));
        assert!(!same_origin(
            &post,
            &headers(&[host, ("origin", "http://127.0.0.1:8080")]),
            public
        ));
    }

    #[test]
    fn loopback_names_are_told_from_the_origin_else_the_host() {
        let host = |value: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, value.parse().unwrap());
            h
        };
        for loopback in [
            "127.0.0.1:8080",
            "127.3.4.5",
            "localhost:8443",
            "LOCALHOST.",
            "inbox.localhost:80",
            "[::1]:8080",
        ] {
            assert!(on_loopback(&host(loopback), None), "{loopback}");
        }
        for other in ["inbox.example.com", "10.0.0.5:8080", "[2001:db8::1]:443"] {
            assert!(!on_loopback(&host(other), None), "{other}");
        }
        assert!(on_loopback(&HeaderMap::new(), None), "no Host: cautious");
        let local = host("127.0.0.1:8080");
        assert!(!on_loopback(&local, Some("https://inbox.example.com")));
        assert!(on_loopback(&local, Some("https://localhost:8443")));
        assert!(on_loopback(&local, Some("not an origin")));
    }

    #[test]
    fn tokens_compare_equal_only_when_equal() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "abcd"));
    }
}
