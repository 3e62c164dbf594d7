//! What every request handler shares ([`App`]), and who a request comes
//! from ([`User`] on a page, an [`Identity`] on the API). Defined low in
//! the crate: the handlers (`pages`, `api`, `login`, `live`, `listing`,
//! `deliveries`) take it as their axum state, and it depends on none of
//! them; a request that may not go on is told by [`NotLetIn`], which the
//! pages turn into HTML.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, HeaderMap, HeaderName};
use idem_runtime::catalog::Catalog;
use idem_runtime::operator::Operator;
use idem_runtime::store::StoreError;

use crate::approvers::{Approvers, Identity};
use crate::change::Changes;
use crate::cookies::{self, Cookies};
use crate::notify;
use crate::session::{Binding, Session, Sessions};
use crate::signins::{self, SignIns};
use crate::throttle::Throttle;

/// The largest request body read (a form, a JSON decision); a larger one
/// is refused with 413.
pub(crate) const MAX_BODY: usize = 256 * 1024;

/// Why a page request is not let in, before any page is made: the pages
/// say it in HTML ([`crate::pages::not_let_in`]).
#[derive(Debug)]
pub(crate) enum NotLetIn {
    /// The store could not be read or written: nobody is let in unchecked.
    StoreDown,
    /// The trusted proxy's header is missing.
    NoProxyName,
    /// The trusted proxy named someone the approvers file does not list.
    NotListed(String),
}

/// Why a session may not change anything from the browser a request
/// comes from ([`App::same_browser`]): the pages say it in HTML
/// ([`crate::pages::not_this_browser`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotThisBrowser {
    /// The request's browser key is not the session's: the session id
    /// was planted in this browser (a page on another port of the same
    /// host replaced the inbox's cookie). Its cookie is cleared here.
    Other,
    /// The request has no browser key, and the session needs one: it was
    /// started with one, or another port could have set its cookie
    /// ([`App::plantable`]), and only the key tells a planted session
    /// from the browser's own.
    Missing,
}

impl NotThisBrowser {
    /// A title and what to tell the person, for a request whose cookie
    /// another port could have set or not ([`App::plantable`]).
    pub(crate) fn words(self, plantable: bool) -> (&'static str, &'static str) {
        match self {
            NotThisBrowser::Other => (
                "Signed out",
                "This browser was signed in with a session it did not start: a page of another \
                 site on this host replaced the inbox's cookie with someone else's. Nothing was \
                 done, and you are signed out here; sign in again.",
            ),
            NotThisBrowser::Missing if !plantable => (
                "Refused",
                "This session was started with a key that the inbox's script keeps in this \
                 browser, and this request has none (is JavaScript off?). Nothing was changed. \
                 Enable JavaScript, or sign out and sign in again.",
            ),
            NotThisBrowser::Missing => (
                "Refused",
                "Over plain HTTP (or under a loopback name), a decision needs the key that the \
                 inbox's script keeps in this browser from the sign-in on, and this request has \
                 none. Nothing was changed. Enable JavaScript, then sign out and sign in again; \
                 or serve the inbox over HTTPS under a name of its own (--tls-cert, or \
                 --secure-cookies behind a TLS proxy, with --origin), where the pages work \
                 without JavaScript.",
            ),
        }
    }
}

/// What every request handler shares.
pub(crate) struct App {
    pub(crate) operator: Operator,
    /// The approvers file as last read (at start, and on each SIGHUP):
    /// swapped whole, read through [`App::approvers`].
    pub(crate) approvers: std::sync::RwLock<Arc<Approvers>>,
    pub(crate) sessions: Sessions,
    pub(crate) signins: SignIns,
    pub(crate) cookies: Cookies,
    pub(crate) throttle: Arc<Throttle>,
    pub(crate) catalog: Option<Catalog>,
    pub(crate) overdue: Duration,
    pub(crate) proxy_header: Option<HeaderName>,
    /// The header a reverse proxy names the client's address in
    /// (`--client-address-header`), for the audit log.
    pub(crate) address_header: Option<HeaderName>,
    /// The origin posts must come from (`--origin`); `None`: the request's
    /// own host.
    pub(crate) origin: Option<String>,
    /// The `Host` names the inbox answers to: its listen address, the
    /// loopback names and `--origin`'s.
    pub(crate) hosts: idem_net::hosts::AllowedHosts,
    /// What the inbox's last look found changed (`live::watch`).
    pub(crate) changes: tokio::sync::watch::Receiver<Changes>,
    /// How often an open live stream reads its session again.
    pub(crate) recheck: Duration,
    /// Becomes `true` when the server is stopping: live streams end.
    pub(crate) stopping: tokio::sync::watch::Receiver<bool>,
    /// The webhooks' delivery log.
    pub(crate) deliveries: Arc<notify::log::Log>,
    /// The webhooks' endpoints, by name.
    pub(crate) endpoints: Vec<String>,
    /// Refusals' log lines, at a bounded rate.
    pub(crate) refusals: crate::quiet::Quiet,
    /// Slack's buttons, when set up (a signing secret).
    pub(crate) slack: Option<crate::slack::Slack>,
}

/// Someone signed in on a page: who, their session, and the cookie to set
/// when the session was just made (a trusted proxy's first request).
pub(crate) struct User {
    pub(crate) identity: Identity,
    pub(crate) session: Session,
    pub(crate) set_cookie: Option<String>,
}

impl App {
    /// The approvers file as last read: a request reads one whole set,
    /// the one before a reload or the one after.
    pub(crate) fn approvers(&self) -> Arc<Approvers> {
        Arc::clone(&self.approvers.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// The person a page request comes from, from the trusted proxy's
    /// header or the session cookie; `None`: not signed in. A store that
    /// cannot be read refuses: nobody is signed in unchecked.
    pub(crate) async fn page_user(&self, headers: &HeaderMap) -> Result<Option<User>, NotLetIn> {
        let from_cookie = match self.cookie_session(headers).await {
            Ok(session) => session,
            Err(e) => {
                tracing::warn!("a session could not be read: {e}");
                return Err(NotLetIn::StoreDown);
            }
        };
        if let Some(name) = &self.proxy_header {
            let Some(vouched) = headers.get(name).and_then(|v| v.to_str().ok()) else {
                return Err(NotLetIn::NoProxyName);
            };
            let Some(identity) = self.approvers().identity(vouched.trim()) else {
                return Err(NotLetIn::NotListed(vouched.to_owned()));
            };
            return Ok(Some(match from_cookie {
                Some(session) if session.name == identity.name => User {
                    identity,
                    session,
                    set_cookie: None,
                },
                _ => {
                    let (cookie, session) = match self.sessions.start(&identity.name, "").await {
                        Ok(started) => started,
                        Err(e) => {
                            tracing::warn!("a session could not be started: {e}");
                            return Err(NotLetIn::StoreDown);
                        }
                    };
                    User {
                        identity,
                        session,
                        set_cookie: Some(cookie),
                    }
                }
            }));
        }
        Ok(from_cookie.and_then(|session| {
            self.approvers()
                .identity(&session.name)
                .map(|identity| User {
                    identity,
                    session,
                    set_cookie: None,
                })
        }))
    }

    /// Whether a page on another port of the inbox's host can have set
    /// the session cookie of a request with `headers`: over plain HTTP,
    /// and under a loopback name even with `__Host-` cookies
    /// ([`cookies::on_loopback`]). Elsewhere only a secure page of the
    /// inbox's own name can set a `__Host-` cookie for it.
    pub(crate) fn plantable(&self, headers: &HeaderMap) -> bool {
        !self.cookies.secure || cookies::on_loopback(headers, self.origin.as_deref())
    }

    /// Whether `user`'s session may change something from a request
    /// with `headers` carrying browser key `key` (`""`: none): the key it
    /// was started with; or, when it was started without one, no key and
    /// a cookie no other port can have planted ([`App::plantable`]).
    /// Where one could, a session without a key changes nothing: only
    /// the key, kept where the other port cannot reach, tells the
    /// browser's own session from a planted one. Behind a trusted proxy
    /// every request is vouched for, and the session is the proxy's
    /// person's: no key.
    pub(crate) fn same_browser(
        &self,
        user: &User,
        key: &str,
        headers: &HeaderMap,
    ) -> Result<(), NotThisBrowser> {
        if self.proxy_header.is_some() {
            return Ok(());
        }
        match user.session.bound(key) {
            Binding::Same => Ok(()),
            Binding::Unkeyed if !self.plantable(headers) => Ok(()),
            Binding::Unkeyed | Binding::Missing => Err(NotThisBrowser::Missing),
            Binding::Other => Err(NotThisBrowser::Other),
        }
    }

    /// For a session that is [`NotThisBrowser::Other`]'s: `Set-Cookie`
    /// values in `headers` that delete its cookie, at `/` (where a planted
    /// cookie that replaced the browser's own is) and along `path`.
    pub(crate) fn clear_planted(&self, why: NotThisBrowser, path: &str, headers: &mut HeaderMap) {
        if why != NotThisBrowser::Other {
            return;
        }
        let name = self.cookies.name(cookies::SESSION);
        for value in self.cookies.clear_along(&name, path) {
            if let Ok(value) = value.parse() {
                headers.append(header::SET_COOKIE, value);
            }
        }
    }

    /// The live session the request's cookie names, if any.
    pub(crate) async fn cookie_session(
        &self,
        headers: &HeaderMap,
    ) -> Result<Option<Session>, StoreError> {
        match self.cookies.get(headers, cookies::SESSION) {
            Some(value) => self.sessions.verify(value).await,
            None => Ok(None),
        }
    }

    /// Where a request came from, for the audit log: the peer, and the
    /// client a trusted proxy names (`--client-address-header`).
    pub(crate) fn address(&self, peer: SocketAddr, headers: &HeaderMap) -> String {
        signins::address(peer, self.forwarded(headers))
    }

    /// The client's address as the reverse proxy names it
    /// (`--client-address-header`).
    fn forwarded<'a>(&self, headers: &'a HeaderMap) -> Option<&'a str> {
        let name = self.address_header.as_ref()?;
        headers.get(name)?.to_str().ok()
    }

    /// The source a sign-in is budgeted by ([`crate::throttle::source`]).
    pub(crate) fn source(&self, peer: SocketAddr, headers: &HeaderMap) -> String {
        crate::throttle::source(peer.ip(), self.forwarded(headers))
    }

    /// The bot (or person) an API request comes from: a bearer token, or
    /// the trusted proxy's header.
    pub(crate) fn api_user(&self, headers: &HeaderMap) -> Option<Identity> {
        if let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer)
        {
            return self.approvers().check_token(token);
        }
        let name = self.proxy_header.as_ref()?;
        let vouched = headers.get(name)?.to_str().ok()?;
        self.approvers().identity(vouched.trim())
    }
}

/// The token of an `Authorization: Bearer TOKEN` value; the scheme's
/// name is case-insensitive (RFC 7235).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}
