//! Sessions kept by the server, in the store, so that every `idem serve`
//! on one store agrees on who is signed in.
//!
//! A session is a record of the store under a reserved tool
//! ([`SESSION_TOOL`]: bookkeeping, which listings and counts leave out):
//! who signed in, when (the store's clock) and when it was last used. The
//! cookie holds only a random id (256 bits); the record's key is the id's
//! SHA-256, and the session's CSRF token is another hash of the id, kept
//! nowhere: the store holds nothing a cookie or a token could be made
//! from, and pages and logs show neither.
//!
//! A session is also bound to the browser that started it, when its
//! sign-in carried a browser key (the inbox's script makes one and keeps
//! it in `localStorage`, which, unlike cookies, another port of the same
//! host can neither read nor write): the record keeps the key's digest
//! (`Session::bound` compares a request's key with it), never the key.
//! A session id planted in another browser then meets that browser's
//! key, not its own; `state.rs` says what is refused.
//!
//! Every request reads its session from the store (nothing about
//! sessions is cached), so a session ends on every instance at once:
//!
//! * **signing out** deletes the record;
//! * **`idem approver revoke NAME`** writes a revocation record
//!   ([`REVOCATION_TOOL`], one per name, kept [`REVOCATION_TTL`], far
//!   longer than any session): every session of NAME started before it is
//!   over, which every request checks (a second read);
//! * the **absolute lifetime** (`--session`) is the record's expiry, by
//!   the store's clock, and also checked against its start;
//! * the **idle lifetime** (`--session-idle`) is checked against the last
//!   use, written back at most every `Sessions::touch_every`
//!   (a quarter of the idle lifetime, at most a minute), so a session may
//!   end up to that much *before* its idle lifetime, never after. The last
//!   use is the instances' own clocks: skew between them moves it by the
//!   skew.
//!
//! Anything that cannot be read as a live session — no record, another
//! tool's, an unreadable one — is no session: nothing lapses into access.
//! Signing in always starts a new session (the id a browser had before is
//! never promoted).
//!
//! The role is not in the session: it is read from the approvers file on
//! every request. The one-time notice a decision leaves for the next page
//! is kept in this process only (at most [`MAX_NOTICES`]): behind a load
//! balancer it may be shown by one instance and not another.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use idem_runtime::clock::{Clock, SystemClock, Timestamp};
use idem_runtime::key::IdempotencyKey;
use idem_runtime::ledger::{self, names, Ledger};
use idem_runtime::store::{Store, StoreError};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::cookies::{same_token, Cookies, SESSION};
use idem_runtime::store::StoreExt;

/// The tool a session's record carries.
pub const SESSION_TOOL: &str = names::SESSION;

/// The tool a revocation's record carries.
pub const REVOCATION_TOOL: &str = names::SESSIONS_REVOKED;

/// How long a revocation is kept: ten years, longer than any session
/// (`--session` is held to it).
pub const REVOCATION_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

/// The most one-time notices kept at once.
pub const MAX_NOTICES: usize = 10_000;

/// How long a claim of a session's or a revocation's key is held while
/// it is written.
const LEASE: Duration = Duration::from_secs(30);

/// A live session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Session {
    /// Who signed in.
    pub name: String,
    /// The CSRF token of this session.
    pub csrf: String,
    /// The digest of the browser key its sign-in carried, if it carried
    /// one ([`browser_digest`]).
    browser: Option<String>,
    /// The key of its record.
    key: IdempotencyKey,
}

/// How a request's browser key stands to its session's
/// ([`Session::bound`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Binding {
    /// The key the session was started with.
    Same,
    /// Neither the session nor the request has a key.
    Unkeyed,
    /// The session has a key and the request none.
    Missing,
    /// The request has a key the session was not started with (or the
    /// session has none): the session is not this browser's.
    Other,
}

impl Session {
    /// How the browser key a request carries (`""`: none) stands to the
    /// one this session was started with; compared in time that does
    /// not depend on where they differ.
    pub(super) fn bound(&self, key: &str) -> Binding {
        match (browser_digest(key), &self.browser) {
            (Some(sent), Some(kept)) if same_token(&sent, kept) => Binding::Same,
            (Some(_), _) => Binding::Other,
            (None, Some(_)) => Binding::Missing,
            (None, None) => Binding::Unkeyed,
        }
    }
}

/// What a session's record holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    /// Who.
    name: String,
    /// When it started (ms, the store's clock).
    started: u64,
    /// When it was last used, as last written (ms, an instance's clock).
    used: u64,
    /// The digest of the browser key its sign-in carried; none in
    /// sessions started without one (or before sessions had them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    browser: Option<String>,
}

/// What a revocation's record holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Revocation {
    /// Whose sessions.
    name: String,
    /// Sessions started at or before this instant (ms, the store's clock)
    /// are over.
    before: u64,
}

/// The sessions of the store.
#[derive(Debug)]
pub(super) struct Sessions {
    store: Arc<dyn Store>,
    idle: Duration,
    absolute: Duration,
    cookies: Cookies,
    /// Record key → (the record page it is for, text).
    notices: Mutex<HashMap<String, (String, String)>>,
}

impl Sessions {
    /// Sessions on `store`, ending after `idle` unused or `absolute` in
    /// all (at most [`REVOCATION_TTL`]).
    pub(super) fn new(
        store: Arc<dyn Store>,
        idle: Duration,
        absolute: Duration,
        cookies: Cookies,
    ) -> Self {
        let absolute = absolute.min(REVOCATION_TTL);
        Sessions {
            store,
            idle: idle.min(absolute),
            absolute,
            cookies,
            notices: Mutex::new(HashMap::new()),
        }
    }

    /// How often a session's last use is written back: a quarter of the
    /// idle lifetime, at most a minute.
    pub(super) fn touch_every(&self) -> Duration {
        (self.idle / 4).min(Duration::from_secs(60))
    }

    /// A new session for `name`, bound to the browser key `browser` (`""`:
    /// none): the `Set-Cookie` value and the session.
    pub(super) async fn start(
        &self,
        name: &str,
        browser: &str,
    ) -> Result<(String, Session), StoreError> {
        let mut raw = [0u8; 32];
        rand::rng().fill_bytes(&mut raw);
        let value = URL_SAFE_NO_PAD.encode(raw);
        let key = session_key(&value);
        let row = Row {
            name: name.to_owned(),
            started: self.store.now().await?.as_millis(),
            used: SystemClock.now().as_millis(),
            browser: browser_digest(browser),
        };
        let book = sessions(&*self.store);
        if !book
            .create(&key, &made_of(SESSION_TOOL), &row, self.absolute)
            .await?
        {
            // 256 random bits met an existing record.
            return Err(book.corrupt(&key, "a new session's key is taken"));
        }
        let cookie = self.cookies.set(SESSION, &value, self.absolute.as_secs());
        let session = Session {
            name: row.name,
            csrf: csrf_of(&value),
            browser: row.browser,
            key,
        };
        Ok((cookie, session))
    }

    /// The live session a cookie value names, if any; its last use is
    /// written back when it is older than [`Sessions::touch_every`].
    pub(super) async fn verify(&self, value: &str) -> Result<Option<Session>, StoreError> {
        if value.is_empty() || value.len() > 128 {
            return Ok(None);
        }
        let key = session_key(value);
        let book = sessions(&*self.store);
        let entry = match book.get::<Row>(&key).await {
            Ok(Some(entry)) => entry,
            // Anything that does not read as a session is no session.
            Ok(None) | Err(StoreError::Corrupt(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let row = entry.value.clone();
        let now = SystemClock.now();
        let unused = Timestamp(row.used).until(now);
        let lived = Timestamp(row.started).until(now);
        if unused >= self.idle || lived >= self.absolute || self.revoked(&row).await? {
            // Gone for good; a failed delete leaves it to its expiry.
            let _ = book.delete(&entry).await;
            return Ok(None);
        }
        if unused >= self.touch_every() {
            let touched = Row {
                used: now.as_millis(),
                ..row.clone()
            };
            // `false`: another request touched it first.
            book.swap_until(&entry, &touched, None).await?;
        }
        Ok(Some(Session {
            name: row.name,
            csrf: csrf_of(value),
            browser: row.browser,
            key,
        }))
    }

    /// Whether `row`'s session was revoked after it started.
    async fn revoked(&self, row: &Row) -> Result<bool, StoreError> {
        let key = revocation_key(&row.name);
        let Some(record) = self.store.get(&key).await? else {
            return Ok(false);
        };
        // A revocation that cannot be read ends the session.
        Ok(revocations(&*self.store)
            .read::<Revocation>(record)
            .map_or(true, |r| {
                r.value.name != row.name || row.started <= r.value.before
            }))
    }

    /// End `session` on every instance, wherever its cookie was copied to.
    pub(super) async fn end(&self, session: &Session) -> Result<(), StoreError> {
        self.notices.lock().unwrap().remove(session.key.as_str());
        // A touch may swap the record in between: read it again.
        let book = sessions(&*self.store);
        for _ in 0..4 {
            let Some(record) = self.store.get(&session.key).await? else {
                return Ok(());
            };
            let entry = book.read::<serde::de::IgnoredAny>(record)?;
            if book.delete(&entry).await? {
                return Ok(());
            }
        }
        Err(book.corrupt(&session.key, "the session kept changing"))
    }

    /// Keep `text` for the next page of record `key` this session opens
    /// on this instance.
    pub(super) fn notify(&self, session: &Session, key: &str, text: String) {
        let mut notices = self.notices.lock().unwrap();
        if notices.len() >= MAX_NOTICES && !notices.contains_key(session.key.as_str()) {
            if let Some(any) = notices.keys().next().cloned() {
                notices.remove(&any);
            }
        }
        notices.insert(session.key.as_str().to_owned(), (key.to_owned(), text));
    }

    /// The notice kept for record `key`, once.
    pub(super) fn take_notice(&self, session: &Session, key: &str) -> Option<String> {
        let mut notices = self.notices.lock().unwrap();
        match notices.get(session.key.as_str()) {
            Some((for_key, _)) if for_key == key => {
                notices.remove(session.key.as_str()).map(|(_, text)| text)
            }
            _ => None,
        }
    }

    /// A `Set-Cookie` value that deletes the session cookie.
    pub(super) fn cleared(&self) -> String {
        self.cookies.clear(SESSION)
    }
}

/// `idem approver revoke NAME`: every session of `name` started until now
/// (the store's clock) is over, on every instance; returns that instant.
/// The revocation is kept [`REVOCATION_TTL`].
pub async fn revoke(store: &dyn Store, name: &str) -> Result<Timestamp, StoreError> {
    let now = store.now().await?;
    let key = revocation_key(name);
    let book = revocations(store);
    let revocation = |before: Timestamp| Revocation {
        name: name.to_owned(),
        before: before.as_millis(),
    };
    for _ in 0..8 {
        let written = match book.get::<Revocation>(&key).await? {
            None => {
                let made_of = made_of(REVOCATION_TOOL);
                book.create(&key, &made_of, &revocation(now), REVOCATION_TTL)
                    .await?
                    .then_some(now)
            }
            Some(entry) => {
                // Never earlier than a revocation already written (a clock
                // that went back would otherwise revive sessions).
                let before = Timestamp(now.as_millis().max(entry.value.before));
                book.swap(&entry, &revocation(before), REVOCATION_TTL)
                    .await?
                    .then_some(before)
            }
        };
        if let Some(before) = written {
            return Ok(before);
        }
    }
    Err(book.corrupt(&key, "the revocation kept changing"))
}

/// The book of sessions on `store`.
fn sessions(store: &dyn Store) -> Ledger<'_> {
    Ledger::new(store, SESSION_TOOL).lease(LEASE)
}

/// The book of revocations on `store`.
fn revocations(store: &dyn Store) -> Ledger<'_> {
    Ledger::new(store, REVOCATION_TOOL).lease(LEASE)
}

/// What a session's or a revocation's record is made of (its
/// fingerprint's arguments).
fn made_of(tool: &str) -> serde_json::Value {
    serde_json::json!({ "tool": tool })
}

/// The key of the session whose cookie is `value`: a hash of it, so the
/// store holds nothing a cookie could be made from.
pub(super) fn session_key(value: &str) -> IdempotencyKey {
    ledger::key(&["idem-inbox-session/v1", value])
}

/// The key of `name`'s revocation.
fn revocation_key(name: &str) -> IdempotencyKey {
    ledger::key(&["idem-inbox-revoked/v1", name])
}

/// The CSRF token of the session whose cookie is `value`.
fn csrf_of(value: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"idem serve csrf\0")
        .chain_update(value.as_bytes())
        .finalize();
    URL_SAFE_NO_PAD.encode(digest)
}

/// The digest of browser key `key` as a session keeps it; `None` for no
/// key (`""`). Any text is a key (the script's are 64 hexadecimal
/// digits; the body's bound, `MAX_BODY`, bounds the others).
fn browser_digest(key: &str) -> Option<String> {
    if key.is_empty() {
        return None;
    }
    let digest = Sha256::new()
        .chain_update(b"idem serve browser\0")
        .chain_update(key.as_bytes())
        .finalize();
    Some(URL_SAFE_NO_PAD.encode(digest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_runtime::store::MemoryStore;

    fn sessions(idle: Duration) -> (Arc<dyn Store>, Sessions) {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let cookies = Cookies { secure: false };
        let table = Sessions::new(store.clone(), idle, Duration::from_secs(600), cookies);
        (store, table)
    }

    fn value(cookie: &str) -> String {
        let pair = cookie.split(';').next().unwrap();
        pair.split_once('=').unwrap().1.to_owned()
    }

    #[tokio::test]
    async fn a_session_lives_in_the_store_until_it_is_ended() {
        let (store, table) = sessions(Duration::from_secs(60));
        let (cookie, session) = table.start("dana", "").await.unwrap();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        let value = value(&cookie);
        assert_eq!(table.verify(&value).await.unwrap(), Some(session.clone()));
        assert_eq!(table.verify("made-up").await.unwrap(), None);
        // Another instance on the same store agrees.
        let other = Sessions::new(
            store.clone(),
            Duration::from_secs(60),
            Duration::from_secs(600),
            Cookies { secure: false },
        );
        assert_eq!(other.verify(&value).await.unwrap(), Some(session.clone()));
        // The store holds neither the cookie nor the token.
        let record = store.get(&session.key).await.unwrap().unwrap();
        let text = serde_json::to_string(&record).unwrap();
        assert!(!text.contains(&value) && !text.contains(&session.csrf));
        assert!(record.is_bookkeeping());

        table.notify(&session, "k1", "Done: approved.".into());
        assert_eq!(table.take_notice(&session, "k2"), None);
        assert_eq!(
            table.take_notice(&session, "k1").as_deref(),
            Some("Done: approved.")
        );
        assert_eq!(table.take_notice(&session, "k1"), None, "once");

        other.end(&session).await.unwrap();
        assert_eq!(
            table.verify(&value).await.unwrap(),
            None,
            "ended everywhere"
        );
    }

    #[tokio::test]
    async fn a_revocation_ends_the_sessions_started_before_it_only() {
        let (store, table) = sessions(Duration::from_secs(60));
        let (dana, _) = table.start("dana", "").await.unwrap();
        let (vic, _) = table.start("vic", "").await.unwrap();
        revoke(&*store, "dana").await.unwrap();
        assert_eq!(table.verify(&value(&dana)).await.unwrap(), None);
        assert!(table.verify(&value(&vic)).await.unwrap().is_some());
        // Revoked again, later: still one record, and a sign-in after it
        // lives.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let (again, _) = table.start("dana", "").await.unwrap();
        assert!(table.verify(&value(&again)).await.unwrap().is_some());
        revoke(&*store, "dana").await.unwrap();
        assert_eq!(table.verify(&value(&again)).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_session_left_unused_for_its_idle_lifetime_is_over() {
        let (_store, table) = sessions(Duration::ZERO);
        let (cookie, _) = table.start("dana", "").await.unwrap();
        assert_eq!(table.verify(&value(&cookie)).await.unwrap(), None);
    }
    #[tokio::test]
    async fn a_session_is_bound_to_the_browser_key_it_was_started_with() {
        let (store, table) = sessions(Duration::from_secs(60));
        let dana_key = "d".repeat(64);
        let (cookie, started) = table.start("dana", &dana_key).await.unwrap();
        // Read back from the store, as another request would.
        let session = table.verify(&value(&cookie)).await.unwrap().unwrap();
        assert_eq!(session, started);
        assert_eq!(session.bound(&dana_key), Binding::Same);
        assert_eq!(session.bound(""), Binding::Missing);
        assert_eq!(session.bound(&"e".repeat(64)), Binding::Other);
        assert_eq!(session.bound(&dana_key[..63]), Binding::Other);
        // The store keeps a digest, not the key.
        let record = store.get(&session.key).await.unwrap().unwrap();
        let text = serde_json::to_string(&record).unwrap();
        assert!(!text.contains(&dana_key), "{text}");

        // Started without a key (no script, or before keys existed): any
        // key a request carries is another browser's.
        let (cookie, _) = table.start("eve", "").await.unwrap();
        let unkeyed = table.verify(&value(&cookie)).await.unwrap().unwrap();
        assert_eq!(unkeyed.bound(""), Binding::Unkeyed);
        assert_eq!(unkeyed.bound(&dana_key), Binding::Other);

        // A session written before sessions kept a key reads as unkeyed.
        let before: Row = serde_json::from_str(r#"{"name":"dana","started":1,"used":1}"#).unwrap();
        assert_eq!(before.browser, None);
    }
}
