//! Whose MCP session is whose on the proxy's HTTP side: each session
//! belongs to the principal that opened it, and a principal holds at most
//! [`PER_PRINCIPAL`] of them.
//!
//! rmcp's session manager knows sessions by id alone: anyone holding an id
//! could use it or end it (`DELETE`), and a principal could open sessions
//! until the process runs out of memory (each keeps a worker and its
//! buffers for five idle minutes). This layer sits behind the
//! authentication layer, which names the caller:
//!
//! * a request naming a session another principal opened is answered as
//!   rmcp answers an unknown one (404), and reaches nothing;
//! * a principal's session opened past the cap closes the one of theirs
//!   idle the longest first (a client that comes back to it is told it
//!   is gone, and opens another, as MCP's clients do). A session with a
//!   call under way (a POST whose answer is still being sent) is never
//!   closed: while all of a principal's sessions are busy, the cap waits
//!   for one to be idle.
//!
//! Without authentication (`--no-auth`, loopback), every caller is one
//! principal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{SessionId, SessionManager as _};

use crate::auth::Caller;

/// The sessions one principal may hold at once.
pub(super) const PER_PRINCIPAL: usize = 64;

/// The header naming a session.
const SESSION: &str = "mcp-session-id";

/// Each session's principal, and when it was last used.
#[derive(Clone)]
pub(super) struct Owners {
    sessions: Arc<LocalSessionManager>,
    owners: Arc<Mutex<HashMap<String, Owner>>>,
    cap: usize,
}

struct Owner {
    principal: String,
    used: Instant,
    /// Its POSTs whose answers are still being sent.
    busy: usize,
}

impl Owners {
    /// For the sessions of `sessions`, at most `cap` a principal.
    pub(super) fn new(sessions: Arc<LocalSessionManager>, cap: usize) -> Self {
        Owners {
            sessions,
            owners: Arc::default(),
            cap,
        }
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, HashMap<String, Owner>> {
        self.owners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The middleware: see the module's docs.
    pub(super) async fn layer(self, request: Request, next: Next) -> Response {
        let principal = request
            .extensions()
            .get::<Caller>()
            .map_or_else(String::new, |caller| caller.name().to_owned());
        let named = request
            .headers()
            .get(SESSION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let ending = request.method() == http::Method::DELETE;
        let posting = request.method() == http::Method::POST;
        let mut busy = None;
        if let Some(id) = &named {
            let mut owners = self.owners();
            match owners.get_mut(id) {
                Some(owner) if owner.principal != principal => {
                    drop(owners);
                    return not_found();
                }
                Some(owner) => {
                    owner.used = Instant::now();
                    if posting {
                        owner.busy += 1;
                        busy = Some(Busy {
                            owners: self.owners.clone(),
                            id: id.clone(),
                        });
                    }
                }
                None => {}
            }
        }
        let response = next.run(request).await;
        // Busy until the answer's last byte is sent (or its client left).
        let response = match busy {
            Some(busy) => response.map(|body| {
                use http_body_util::BodyExt as _;
                axum::body::Body::new(body.map_frame(move |frame| {
                    let _ = &busy;
                    frame
                }))
            }),
            None => response,
        };
        match named {
            Some(id) if ending && response.status().is_success() => {
                self.owners().remove(&id);
            }
            Some(_) => {}
            None => {
                let opened = response
                    .headers()
                    .get(SESSION)
                    .and_then(|v| v.to_str().ok());
                if let Some(id) = opened {
                    self.opened(id.to_owned(), principal).await;
                }
            }
        }
        response
    }

    /// `id` was opened by `principal`: past the cap, close the session of
    /// theirs idle the longest, and forget the ones that ended on their own.
    async fn opened(&self, id: String, principal: String) {
        let theirs: Vec<(String, Instant, bool)> = {
            let mut owners = self.owners();
            owners.insert(
                id.clone(),
                Owner {
                    principal: principal.clone(),
                    used: Instant::now(),
                    busy: 0,
                },
            );
            owners
                .iter()
                .filter(|(other, o)| o.principal == principal && **other != id)
                .map(|(other, o)| (other.clone(), o.used, o.busy > 0))
                .collect()
        };
        if theirs.len() < self.cap {
            return;
        }
        // Those ended by rmcp (idle for its keep-alive) first.
        let mut live = Vec::with_capacity(theirs.len());
        for (other, used, busy) in theirs {
            let session = SessionId::from(other.clone());
            if self.sessions.has_session(&session).await.unwrap_or(false) {
                live.push((other, used, busy));
            } else {
                self.owners().remove(&other);
            }
        }
        let excess = (live.len() + 1).saturating_sub(self.cap);
        let mut idle: Vec<_> = live.into_iter().filter(|(_, _, busy)| !busy).collect();
        idle.sort_by_key(|(_, used, _)| *used);
        for (other, _, _) in idle.into_iter().take(excess) {
            self.owners().remove(&other);
            let _ = self.sessions.close_session(&SessionId::from(other)).await;
            tracing::info!(
                principal = %idem_runtime::text::visible(&principal),
                cap = self.cap,
                "a session idle the longest was closed: its principal opened one past the cap"
            );
        }
    }
}

/// A POST of a session under way: its session is busy until this drops.
struct Busy {
    owners: Arc<Mutex<HashMap<String, Owner>>>,
    id: String,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut owners = self
            .owners
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(owner) = owners.get_mut(&self.id) {
            owner.busy = owner.busy.saturating_sub(1);
        }
    }
}

/// What rmcp answers for a session it does not know, given before the
/// request's body is read: with `Connection: close`
/// ([`close_unread`](crate::auth::close_unread)), or a client's next
/// request on the connection could meet the socket hyper closes after it
/// (CI saw a `DELETE` answered by a closed socket right after a refused
/// ping).
fn not_found() -> Response {
    crate::auth::close_unread(
        (http::StatusCode::NOT_FOUND, "Not Found: Session not found").into_response(),
    )
}
