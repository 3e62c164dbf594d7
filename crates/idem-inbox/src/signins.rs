//! Sign-ins, sign-outs and failed sign-ins in the store's audit log, with
//! the name (the name *tried*, for a failure) and the address the request
//! came from; `idem log` shows them.
//!
//! An event about a sign-in is about no record: its key stands for the
//! name ([`name_key`]: the same key for every event of one name, so
//! `idem log KEY` follows one person), its tool is [`INBOX_TOOL`], and it
//! has no state before or after.
//!
//! Successes and sign-outs are one event each: they need a password or a
//! session, so a stranger cannot make many. Failures are bounded per
//! instance and per [`WINDOW`]: the first failure of a name from an
//! address is written at once; its repeats in the window are counted and
//! written as one event when the window ends; once [`MAX_ITEMISED`]
//! names-and-addresses are in a window, failures of others are only
//! counted, into one event. A window therefore writes at most
//! 2 × [`MAX_ITEMISED`] + 1 events, however many sign-ins fail in it (the
//! throttle, `throttle.rs`, bounds the password checks themselves).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_runtime::audit::AuditEvent;
use idem_runtime::clock::Timestamp;
use idem_runtime::key::{CanonicalArgs, Fingerprint, IdempotencyKey};
use idem_runtime::record::AuditAction;
use idem_runtime::store::StoreExt;
use idem_runtime::store::{Store, StoreError};
use idem_runtime::text::visible;

/// The tool the audit events of the inbox's sign-ins carry.
pub const INBOX_TOOL: &str = idem_runtime::ledger::names::INBOX;

/// How long failures are counted before their counts are written.
pub const WINDOW: Duration = Duration::from_secs(60);

/// How many names-and-addresses a window itemises.
pub const MAX_ITEMISED: usize = 32;

/// The failures of the current window.
#[derive(Debug)]
struct Window {
    started: Instant,
    at: Timestamp,
    /// (name tried, address) → failures after the first.
    repeats: HashMap<(String, String), u64>,
    /// Failures of names-and-addresses beyond [`MAX_ITEMISED`].
    others: u64,
}

impl Window {
    fn new() -> Self {
        Window {
            started: Instant::now(),
            at: idem_runtime::clock::Clock::now(&idem_runtime::clock::SystemClock),
            repeats: HashMap::new(),
            others: 0,
        }
    }
}

/// The inbox's sign-ins, written to the store's audit log.
#[derive(Debug)]
pub(super) struct SignIns {
    store: Arc<dyn Store>,
    window: Mutex<Window>,
}

impl SignIns {
    /// Sign-ins audited on `store`.
    pub(super) fn new(store: Arc<dyn Store>) -> Self {
        SignIns {
            store,
            window: Mutex::new(Window::new()),
        }
    }

    /// `name` signed in from `from`.
    pub(super) async fn signed_in(&self, name: &str, from: &str) -> Result<(), StoreError> {
        self.append(AuditAction::SignedIn, name, format!("from {from}"))
            .await
    }

    /// `name` signed out from `from`.
    pub(super) async fn signed_out(&self, name: &str, from: &str) -> Result<(), StoreError> {
        self.append(AuditAction::SignedOut, name, format!("from {from}"))
            .await
    }

    /// A sign-in as `name` from `from` failed (`why`: "wrong name or
    /// password", "not checked: …"). Written at once, counted, or
    /// neither, as the module docs say; a store that cannot take it is
    /// reported on stderr, since the sign-in fails anyway.
    pub(super) async fn failed(&self, name: &str, from: &str, why: &str) {
        let (ended, first) = {
            let mut window = self.window.lock().unwrap();
            let ended = (window.started.elapsed() >= WINDOW)
                .then(|| std::mem::replace(&mut *window, Window::new()));
            let who = (name.to_owned(), from.to_owned());
            let room = window.repeats.len() < MAX_ITEMISED;
            let first = match window.repeats.get_mut(&who) {
                Some(n) => {
                    *n += 1;
                    false
                }
                None if room => {
                    window.repeats.insert(who, 0);
                    true
                }
                None => {
                    window.others += 1;
                    false
                }
            };
            (ended, first)
        };
        if let Some(ended) = ended {
            self.write_counts(ended).await;
        }
        if first {
            let reason = format!("{why}, from {from}");
            if let Err(e) = self.append(AuditAction::SignInFailed, name, reason).await {
                tracing::warn!("a failed sign-in was not audited: {e}");
            }
        }
    }

    /// Write the counts of the window, if it has ended (or at once, with
    /// `now`: the server is stopping): called every [`WINDOW`], so that
    /// counts reach the log without another failure.
    pub(super) async fn flush(&self, now: bool) {
        let ended = {
            let mut window = self.window.lock().unwrap();
            (now || window.started.elapsed() >= WINDOW)
                .then(|| std::mem::replace(&mut *window, Window::new()))
        };
        if let Some(ended) = ended {
            self.write_counts(ended).await;
        }
    }

    async fn write_counts(&self, window: Window) {
        let since = window.at.rfc3339();
        let mut events: Vec<(String, String)> = window
            .repeats
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|((name, from), n)| {
                let s = if n == 1 { "" } else { "s" };
                (
                    name,
                    format!("{n} more failed sign-in{s} from {from} in the minute from {since}"),
                )
            })
            .collect();
        if window.others > 0 {
            events.push((
                "(other names)".to_owned(),
                format!(
                    "{} failed sign-ins of more than {MAX_ITEMISED} names and addresses in the minute from {since}, not itemised",
                    window.others
                ),
            ));
        }
        for (name, reason) in events {
            if let Err(e) = self.append(AuditAction::SignInFailed, &name, reason).await {
                tracing::warn!("failed sign-ins were not audited: {e}");
            }
        }
    }

    async fn append(
        &self,
        action: AuditAction,
        name: &str,
        reason: String,
    ) -> Result<(), StoreError> {
        let event = AuditEvent {
            seq: None,
            at: self.store.now().await?,
            by: name.to_owned(),
            action,
            reason: Some(reason),
            key: name_key(name),
            tool: INBOX_TOOL.to_owned(),
            namespace: None,
            fingerprint: fingerprint(),
            before: None,
            after: None,
        };
        self.store.append_audit(&event).await.map(|_| ())
    }
}

/// The key the audit events of `name`'s sign-ins are under.
pub fn name_key(name: &str) -> IdempotencyKey {
    idem_runtime::ledger::key(&["idem-inbox-approver/v1", name])
}

fn fingerprint() -> Fingerprint {
    CanonicalArgs::from_value(&serde_json::json!({ "tool": INBOX_TOOL }))
        .expect("an object")
        .fingerprint
}

/// Where a request came from, as the audit log says it: the peer's
/// address, and the address a trusted proxy's header names
/// (`--client-address-header`) before it, escaped and cut to 100
/// characters.
pub(super) fn address(peer: std::net::SocketAddr, forwarded: Option<&str>) -> String {
    let peer = peer.ip();
    match forwarded.map(str::trim).filter(|f| !f.is_empty()) {
        Some(client) => {
            let client: String = visible(client).chars().take(100).collect();
            format!("{client} (via {peer})")
        }
        None => peer.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_runtime::audit::AuditQuery;
    use idem_runtime::store::MemoryStore;

    async fn log(store: &dyn Store) -> Vec<AuditEvent> {
        store
            .audit(&AuditQuery::default(), None, 10_000)
            .await
            .unwrap()
            .events
    }

    #[tokio::test]
    async fn a_flood_of_failures_writes_a_bounded_number_of_events() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let signins = SignIns::new(store.clone());
        for _ in 0..100 {
            signins
                .failed("dana", "10.0.0.1", "wrong name or password")
                .await;
        }
        for n in 0..1000 {
            signins
                .failed(
                    &format!("made-up-{n}"),
                    "10.0.0.2",
                    "wrong name or password",
                )
                .await;
        }
        let written = log(&*store).await;
        assert_eq!(written.len(), MAX_ITEMISED, "the first of each, itemised");
        assert_eq!(written[0].by, "dana");
        assert_eq!(
            written[0].reason.as_deref(),
            Some("wrong name or password, from 10.0.0.1")
        );
        assert_eq!(written[0].key, name_key("dana"));
        // The window ends: its counts are written, once.
        signins.window.lock().unwrap().started -= WINDOW;
        signins.flush(false).await;
        signins.flush(false).await;
        let written = log(&*store).await;
        assert_eq!(written.len(), MAX_ITEMISED + 2);
        let reasons: Vec<&str> = written[MAX_ITEMISED..]
            .iter()
            .filter_map(|e| e.reason.as_deref())
            .collect();
        assert!(
            reasons
                .iter()
                .any(|r| r.starts_with("99 more failed sign-ins from 10.0.0.1")),
            "{reasons:?}"
        );
        assert!(
            reasons
                .iter()
                .any(|r| r.starts_with("969 failed sign-ins of more than 32")),
            "{reasons:?}"
        );
    }

    #[tokio::test]
    async fn a_sign_in_is_one_event_with_its_address() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let signins = SignIns::new(store.clone());
        signins.signed_in("dana", "127.0.0.1").await.unwrap();
        let written = log(&*store).await;
        assert_eq!(written[0].action, AuditAction::SignedIn);
        assert_eq!((written[0].before, written[0].after), (None, None));
        let peer: std::net::SocketAddr = "127.0.0.1:5000".parse().unwrap();
        assert_eq!(address(peer, None), "127.0.0.1");
        assert_eq!(
            address(peer, Some(" 203.0.113.7\n")),
            "203.0.113.7 (via 127.0.0.1)"
        );
        assert_eq!(address(peer, Some("a\u{1b}b")), "a\\u{1b}b (via 127.0.0.1)");
    }
}
