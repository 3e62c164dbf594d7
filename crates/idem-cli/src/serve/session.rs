//! Sessions kept by the server, CSRF tokens, and whether a request comes
//! from the inbox's own pages.
//!
//! A session is a row in this process's table: who, its CSRF token, when
//! it started and when it was last used, and a one-time notice for the
//! next page. The cookie holds only a random id (256 bits); the table is
//! keyed by the id's SHA-256, so the table itself holds nothing a cookie
//! could be made from. Signing out deletes the row, so a copy of the
//! cookie taken before stops working at once; a session also ends when
//! it has not been used for the idle lifetime (`--session-idle`) or has
//! lasted the absolute one (`--session`), and signing in always starts a
//! new one (the id a browser had before is never promoted). The table is
//! in memory: a restart signs everybody out, and two `idem serve`
//! processes do not share sign-ins.
//!
//! The cookie is `HttpOnly` (no script reads it), `SameSite=Strict` (no
//! other site's page sends it) and, with `--secure-cookies`, `Secure`.
//! Cookies do not keep ports apart, so another server on the same host
//! can set them: that is why every post is also checked for coming from
//! the inbox's own origin ([`same_origin`]), sign-in included.
//!
//! The role is not in the session: it is read from the approvers file on
//! every request, so removing someone from the file (and restarting)
//! takes effect at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, Method};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// The session cookie's name.
pub(super) const COOKIE: &str = "idem_session";

/// The cookie that carries the sign-in form's CSRF token before anyone is
/// signed in.
pub(super) const LOGIN_COOKIE: &str = "idem_login";

/// The most sessions kept at once; beyond, the least recently used goes.
pub(super) const MAX_SESSIONS: usize = 10_000;

/// A live session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Session {
    /// Who signed in.
    pub name: String,
    /// The CSRF token of this session.
    pub csrf: String,
    /// The table's key (the id's SHA-256).
    id: [u8; 32],
}

#[derive(Debug)]
struct Row {
    name: String,
    csrf: String,
    started: Instant,
    used: Instant,
    /// A notice for the next page of this record (key, text).
    notice: Option<(String, String)>,
}

/// The sessions of this server.
#[derive(Debug)]
pub(super) struct Sessions {
    rows: Mutex<HashMap<[u8; 32], Row>>,
    idle: Duration,
    absolute: Duration,
    secure: bool,
}

impl Sessions {
    /// Sessions ending after `idle` unused or `absolute` in all.
    pub(super) fn new(idle: Duration, absolute: Duration, secure: bool) -> Self {
        Sessions {
            rows: Mutex::new(HashMap::new()),
            idle: idle.min(absolute),
            absolute,
            secure,
        }
    }

    /// A new session for `name`: the `Set-Cookie` value and the session.
    pub(super) fn start(&self, name: &str) -> (String, Session) {
        let mut raw = [0u8; 32];
        rand::rng().fill_bytes(&mut raw);
        let value = URL_SAFE_NO_PAD.encode(raw);
        let id = hash(&value);
        let csrf = random_token();
        let now = Instant::now();
        let mut rows = self.rows.lock().unwrap();
        if rows.len() >= MAX_SESSIONS {
            rows.retain(|_, row| self.live(row, now));
        }
        if rows.len() >= MAX_SESSIONS {
            if let Some(oldest) = rows.iter().min_by_key(|(_, r)| r.used).map(|(k, _)| *k) {
                rows.remove(&oldest);
            }
        }
        rows.insert(
            id,
            Row {
                name: name.to_owned(),
                csrf: csrf.clone(),
                started: now,
                used: now,
                notice: None,
            },
        );
        let cookie = self.cookie(COOKIE, &value, Some(self.absolute.as_secs()));
        (
            cookie,
            Session {
                name: name.to_owned(),
                csrf,
                id,
            },
        )
    }

    fn live(&self, row: &Row, now: Instant) -> bool {
        now.duration_since(row.used) < self.idle && now.duration_since(row.started) < self.absolute
    }

    /// The live session a cookie value names (and it counts as used now).
    pub(super) fn verify(&self, value: &str) -> Option<Session> {
        let id = hash(value);
        let now = Instant::now();
        let mut rows = self.rows.lock().unwrap();
        let row = rows.get_mut(&id)?;
        if !self.live(row, now) {
            rows.remove(&id);
            return None;
        }
        row.used = now;
        Some(Session {
            name: row.name.clone(),
            csrf: row.csrf.clone(),
            id,
        })
    }

    /// End `session`, wherever its cookie was copied to.
    pub(super) fn end(&self, session: &Session) {
        self.rows.lock().unwrap().remove(&session.id);
    }

    /// Keep `text` for the next page of record `key` this session opens.
    pub(super) fn notify(&self, session: &Session, key: &str, text: String) {
        if let Some(row) = self.rows.lock().unwrap().get_mut(&session.id) {
            row.notice = Some((key.to_owned(), text));
        }
    }

    /// The notice kept for record `key`, once.
    pub(super) fn take_notice(&self, session: &Session, key: &str) -> Option<String> {
        let mut rows = self.rows.lock().unwrap();
        let row = rows.get_mut(&session.id)?;
        match &row.notice {
            Some((for_key, _)) if for_key == key => row.notice.take().map(|(_, text)| text),
            _ => None,
        }
    }

    /// A `Set-Cookie` value that deletes the session cookie.
    pub(super) fn cleared(&self) -> String {
        self.cookie(COOKIE, "", Some(0))
    }

    /// A `Set-Cookie` value for `name=value`, with this server's
    /// attributes; `max_age` in seconds (`None`: for the browser session).
    pub(super) fn cookie(&self, name: &str, value: &str, max_age: Option<u64>) -> String {
        let mut cookie = format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict");
        if let Some(age) = max_age {
            cookie.push_str(&format!("; Max-Age={age}"));
        }
        if self.secure {
            cookie.push_str("; Secure");
        }
        cookie
    }
}

fn hash(value: &str) -> [u8; 32] {
    Sha256::digest(value.as_bytes()).into()
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

/// The value of cookie `name` in a `Cookie` header.
pub(super) fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_lives_until_it_is_ended_or_left_unused() {
        let sessions = Sessions::new(Duration::from_secs(60), Duration::from_secs(600), false);
        let (cookie, session) = sessions.start("dana");
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        assert!(!cookie.contains("Secure"));
        let value = cookie_value(cookie.split(';').next().unwrap(), COOKIE).unwrap();
        assert_eq!(sessions.verify(value), Some(session.clone()));
        assert_eq!(sessions.verify("made-up"), None);
        sessions.notify(&session, "k1", "Done: approved.".into());
        assert_eq!(sessions.take_notice(&session, "k2"), None);
        assert_eq!(
            sessions.take_notice(&session, "k1").as_deref(),
            Some("Done: approved.")
        );
        assert_eq!(sessions.take_notice(&session, "k1"), None, "once");
        sessions.end(&session);
        assert_eq!(sessions.verify(value), None, "ended for every copy");
        // Unused for longer than the idle lifetime.
        let short = Sessions::new(Duration::ZERO, Duration::from_secs(600), true);
        let (cookie, _) = short.start("dana");
        assert!(cookie.contains("; Secure"));
        let value = cookie_value(cookie.split(';').next().unwrap(), COOKIE).unwrap();
        assert_eq!(short.verify(value), None);
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
    fn tokens_compare_equal_only_when_equal() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "abcd"));
    }
}
