//! Sessions in signed cookies, CSRF tokens, and slowing down guessers.
//!
//! A session is the approver's name, an expiry and a random nonce, signed
//! with HMAC-SHA256 under a key drawn when the server starts (so a restart
//! signs everybody out). The cookie is `HttpOnly` (no script reads it),
//! `SameSite=Strict` (no other site's page sends it) and, with
//! `--secure-cookies`, `Secure`. The nonce is also the CSRF token every
//! form posts back: a page on another site can neither read it nor make
//! the browser send the cookie.
//!
//! The role is not in the cookie: it is read from the approvers file on
//! every request, so removing someone from the file (and restarting)
//! takes effect at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

/// The session cookie's name.
pub(super) const COOKIE: &str = "idem_session";

/// The cookie that carries the sign-in form's CSRF token before anyone is
/// signed in.
pub(super) const LOGIN_COOKIE: &str = "idem_login";

/// A verified session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Session {
    /// Who signed in.
    pub name: String,
    /// The CSRF token of this session.
    pub csrf: String,
}

/// Signs and checks session cookies.
#[derive(Debug)]
pub(super) struct Sessions {
    key: [u8; 32],
    ttl: Duration,
    secure: bool,
}

impl Sessions {
    /// Sessions lasting `ttl`, signed with a fresh random key.
    pub(super) fn new(ttl: Duration, secure: bool) -> Self {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        Sessions { key, ttl, secure }
    }

    fn mac(&self, payload: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        mac.update(payload.as_bytes());
        mac
    }

    /// A new session for `name`: the `Set-Cookie` value and the session.
    pub(super) fn start(&self, name: &str) -> (String, Session) {
        let csrf = random_token();
        let expires = unix_now() + self.ttl.as_secs();
        let payload = format!(
            "{}.{expires}.{csrf}",
            URL_SAFE_NO_PAD.encode(name.as_bytes())
        );
        let signature = URL_SAFE_NO_PAD.encode(self.mac(&payload).finalize().into_bytes());
        let cookie = self.cookie(
            COOKIE,
            &format!("{payload}.{signature}"),
            Some(self.ttl.as_secs()),
        );
        (
            cookie,
            Session {
                name: name.to_owned(),
                csrf,
            },
        )
    }

    /// The session a cookie value proves, if its signature holds and it
    /// has not expired.
    pub(super) fn verify(&self, value: &str) -> Option<Session> {
        let (payload, signature) = value.rsplit_once('.')?;
        let signature = URL_SAFE_NO_PAD.decode(signature).ok()?;
        self.mac(payload).verify_slice(&signature).ok()?;
        let mut parts = payload.split('.');
        let name = String::from_utf8(URL_SAFE_NO_PAD.decode(parts.next()?).ok()?).ok()?;
        let expires: u64 = parts.next()?.parse().ok()?;
        let csrf = parts.next()?.to_owned();
        if parts.next().is_some() || expires <= unix_now() {
            return None;
        }
        Some(Session { name, csrf })
    }

    /// A `Set-Cookie` value that ends the session.
    pub(super) fn end(&self) -> String {
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

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The value of cookie `name` in a `Cookie` header.
pub(super) fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// The first delay after a failed sign-in; each further failure doubles
/// it, up to [`MAX_DELAY`].
pub(super) const FIRST_DELAY: Duration = Duration::from_millis(500);

/// The longest a name (from one address) must wait between attempts.
pub(super) const MAX_DELAY: Duration = Duration::from_secs(30);

/// Failed sign-ins per name and address: after each, the next attempt
/// for that pair is refused until a delay has passed, doubling with every
/// failure. Success forgets the failures.
#[derive(Debug, Default)]
pub(super) struct Throttle {
    failures: Mutex<HashMap<(String, IpAddr), (u32, Instant)>>,
}

impl Throttle {
    /// How long `name` from `from` must still wait, if at all.
    pub(super) fn wait(&self, name: &str, from: IpAddr) -> Option<Duration> {
        let failures = self.failures.lock().unwrap();
        let (_, until) = failures.get(&(name.to_owned(), from))?;
        until.checked_duration_since(Instant::now())
    }

    /// A failed attempt.
    pub(super) fn failed(&self, name: &str, from: IpAddr) {
        let mut failures = self.failures.lock().unwrap();
        if failures.len() > 10_000 {
            let now = Instant::now();
            failures.retain(|_, (_, until)| *until > now);
        }
        let entry = failures
            .entry((name.to_owned(), from))
            .or_insert((0, Instant::now()));
        entry.0 += 1;
        let delay = FIRST_DELAY
            .saturating_mul(1 << (entry.0 - 1).min(16))
            .min(MAX_DELAY);
        entry.1 = Instant::now() + delay;
    }

    /// A successful sign-in.
    pub(super) fn succeeded(&self, name: &str, from: IpAddr) {
        self.failures
            .lock()
            .unwrap()
            .remove(&(name.to_owned(), from));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_cookie_proves_its_name_only_with_its_signature() {
        let sessions = Sessions::new(Duration::from_secs(60), false);
        let (cookie, session) = sessions.start("dana");
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        assert!(!cookie.contains("Secure"));
        let value = cookie_value(cookie.split(';').next().unwrap(), COOKIE).unwrap();
        assert_eq!(sessions.verify(value), Some(session));
        // Another name under the same signature.
        let (_, rest) = value.split_once('.').unwrap();
        let forged = format!("{}.{rest}", URL_SAFE_NO_PAD.encode("root"));
        assert_eq!(sessions.verify(&forged), None);
        // Another server's key.
        let other = Sessions::new(Duration::from_secs(60), true);
        assert_eq!(other.verify(value), None);
        assert!(other.start("x").0.contains("; Secure"));
    }

    #[test]
    fn failures_slow_the_next_attempt_down_and_success_forgets_them() {
        let throttle = Throttle::default();
        let from: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(throttle.wait("dana", from), None);
        throttle.failed("dana", from);
        let first = throttle.wait("dana", from).unwrap();
        throttle.failed("dana", from);
        assert!(throttle.wait("dana", from).unwrap() > first);
        assert_eq!(throttle.wait("vic", from), None);
        throttle.succeeded("dana", from);
        assert_eq!(throttle.wait("dana", from), None);
    }

    #[test]
    fn tokens_compare_equal_only_when_equal() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "abcd"));
    }
}
