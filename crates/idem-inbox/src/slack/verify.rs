//! Slack's request signing: every interactivity request carries
//! `X-Slack-Request-Timestamp` (Unix seconds) and `X-Slack-Signature:
//! v0=HEX`, the HMAC-SHA256, keyed by the app's signing secret, of
//! `v0:{timestamp}:{raw body}`. A request is let in only when the
//! signature checks (compared in constant time), the timestamp is within
//! [`WINDOW`] of this machine's clock, and the same signature was not let
//! in before within that window. Nothing else is read first: a flood of
//! forged requests costs one HMAC each, and no store work.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::notify::endpoint::Secret;

/// How far a request's timestamp may be from this machine's clock,
/// either way (Slack's own advice: five minutes).
pub(crate) const WINDOW: u64 = 300;

/// The most signatures remembered at once (a replay is one seen within
/// [`WINDOW`]); past it, signed requests are refused until older ones
/// age out. Only Slack can sign, so it is never reached in use.
const REMEMBERED: usize = 100_000;

/// Why a request is not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unverified {
    /// No timestamp or signature header, or not as Slack writes them.
    Missing,
    /// The timestamp is more than [`WINDOW`] from this machine's clock.
    Stale,
    /// The signature is not the body's under the signing secret.
    Forged,
    /// This very request was let in before.
    Replayed,
    /// Too many signatures remembered to tell a replay ([`REMEMBERED`]).
    Busy,
}

impl Unverified {
    /// What the refusal says.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Unverified::Missing => "The request carries no Slack signature (X-Slack-Request-Timestamp and X-Slack-Signature).",
            Unverified::Stale => "The request's timestamp is more than five minutes from this server's clock.",
            Unverified::Forged => "The request's Slack signature does not match its body.",
            Unverified::Replayed => "This request was received before; a request is acted on once.",
            Unverified::Busy => "Too many requests to tell a repeated one; try again in a few minutes.",
        }
    }
}

/// The signing secret, and the signatures let in within the window.
pub(crate) struct Verifier {
    secret: Secret,
    /// Signature → its timestamp.
    seen: Mutex<HashMap<[u8; 32], u64>>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verifier(…)")
    }
}

impl Verifier {
    /// A verifier with `secret`.
    pub(crate) fn new(secret: Secret) -> Verifier {
        Verifier {
            secret,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// The signing secret read from `file` or the environment variable
    /// `env` (one of the two; trailing whitespace ignored).
    pub(crate) fn read(file: Option<&Path>, env: Option<&str>) -> Result<Verifier, String> {
        let text = match (file, env) {
            (Some(path), None) => std::fs::read_to_string(path).map_err(|e| {
                format!(
                    "cannot read the Slack signing secret file {}: {e}",
                    path.display()
                )
            })?,
            (None, Some(var)) => std::env::var(var).map_err(|_| {
                format!("the environment variable {var} holding the Slack signing secret is not set")
            })?,
            _ => {
                return Err(
                    "give the Slack signing secret by a file or an environment variable, one of the two"
                        .to_owned(),
                )
            }
        };
        let secret = text.trim_end();
        if secret.len() < 16 {
            return Err("the Slack signing secret is shorter than 16 bytes: copy it from the app's Basic Information page, Signing Secret".to_owned());
        }
        Ok(Verifier::new(Secret::new(secret.as_bytes().to_vec())))
    }

    /// Whether the request of `headers` and `body`, received at Unix time
    /// `now`, is Slack's and new.
    pub(crate) fn check(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: u64,
    ) -> Result<(), Unverified> {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let timestamp: u64 = header("x-slack-request-timestamp")
            .and_then(|t| t.trim().parse().ok())
            .ok_or(Unverified::Missing)?;
        let signature = header("x-slack-signature")
            .and_then(|s| s.trim().strip_prefix("v0="))
            .and_then(|hex_text| hex::decode(hex_text).ok())
            .filter(|bytes| bytes.len() == 32)
            .ok_or(Unverified::Missing)?;
        if now.abs_diff(timestamp) > WINDOW {
            return Err(Unverified::Stale);
        }
        let mut mac =
            Hmac::<Sha256>::new_from_slice(self.secret.bytes()).expect("HMAC takes any key");
        mac.update(format!("v0:{timestamp}:").as_bytes());
        mac.update(body);
        // `verify_slice` compares in constant time.
        mac.verify_slice(&signature)
            .map_err(|_| Unverified::Forged)?;
        let mut key = [0u8; 32];
        key.copy_from_slice(&signature);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.contains_key(&key) {
            return Err(Unverified::Replayed);
        }
        if seen.len() >= REMEMBERED {
            seen.retain(|_, at| now.abs_diff(*at) <= WINDOW);
            if seen.len() >= REMEMBERED {
                return Err(Unverified::Busy);
            }
        }
        seen.insert(key, timestamp);
        Ok(())
    }
}

/// The `X-Slack-Signature` of `body` sent at `timestamp` under `secret`
/// (what Slack computes; for tests).
#[cfg(test)]
pub(crate) fn sign(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key");
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";

    fn headers(timestamp: &str, signature: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-slack-request-timestamp", timestamp.parse().unwrap());
        headers.insert("x-slack-signature", signature.parse().unwrap());
        headers
    }

    /// Slack's worked example ("Verifying requests from Slack"): this
    /// secret, timestamp and body give this signature.
    #[test]
    fn slack_s_own_example_checks() {
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(sign(SECRET, 1_531_420_618, body), expected);
        let verifier = Verifier::new(Secret::new(SECRET.to_vec()));
        assert_eq!(
            verifier.check(&headers("1531420618", expected), body, 1_531_420_618 + 60),
            Ok(())
        );
    }

    #[test]
    fn forged_stale_missing_and_replayed_requests_are_refused() {
        let verifier = Verifier::new(Secret::new(SECRET.to_vec()));
        let now = 1_700_000_000;
        let body = b"payload=%7B%7D";
        let good = sign(SECRET, now, body);
        let check = |t: u64, sig: &str, body: &[u8]| {
            verifier.check(&headers(&t.to_string(), sig), body, now)
        };
        assert_eq!(
            check(
                now,
                &sign(b"another secret, 32 bytes long!!", now, body),
                body
            ),
            Err(Unverified::Forged)
        );
        assert_eq!(
            check(now, &good, b"payload=%7B%22x%22%7D"),
            Err(Unverified::Forged)
        );
        assert_eq!(
            check(now + 1, &good, body),
            Err(Unverified::Forged),
            "the timestamp is signed"
        );
        let old = now - WINDOW - 1;
        assert_eq!(
            check(old, &sign(SECRET, old, body), body),
            Err(Unverified::Stale)
        );
        let ahead = now + WINDOW + 1;
        assert_eq!(
            check(ahead, &sign(SECRET, ahead, body), body),
            Err(Unverified::Stale)
        );
        assert_eq!(check(now, "v1=00", body), Err(Unverified::Missing));
        assert_eq!(check(now, "v0=zz", body), Err(Unverified::Missing));
        assert_eq!(
            verifier.check(&HeaderMap::new(), body, now),
            Err(Unverified::Missing)
        );
        assert_eq!(check(now, &good, body), Ok(()));
        assert_eq!(check(now, &good, body), Err(Unverified::Replayed));
        let edge = now - WINDOW;
        assert_eq!(check(edge, &sign(SECRET, edge, body), body), Ok(()));
    }
}
