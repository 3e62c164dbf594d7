//! How idem's servers stop (`idem proxy`, `idem serve`): by draining. The
//! first SIGTERM or SIGINT ([`StopSignals`]) stops new work; what is under
//! way finishes within a grace period ([`drain`]); a second signal ends
//! the wait at once. [`on_each_sighup`] reloads what a server reads from
//! files. [`Requests`] counts an HTTP server's requests until
//! their responses have been sent, so that the server's answers leave
//! before it does.
//!
//! systemd, Docker and Kubernetes stop a service with SIGTERM, then
//! SIGKILL after their own grace (90 s, 10 s, 30 s by default): a
//! `--shutdown-grace` shorter than theirs lets the server say what it
//! left rather than be killed in silence.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use futures_util::StreamExt as _;

/// SIGTERM and SIGINT (Ctrl-C), listened for from the moment this is made:
/// a process that made it is no longer ended by them, it is told.
#[derive(Debug)]
pub struct StopSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Listen for SIGTERM and SIGINT (Ctrl-C on other platforms).
    pub fn listen() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(StopSignals {
                term: signal(SignalKind::terminate())?,
                int: signal(SignalKind::interrupt())?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// The next signal, by name (`SIGTERM`, `SIGINT`).
    pub async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => "SIGTERM",
                _ = self.int.recv() => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

/// Call `reload` on each SIGHUP, the signal that asks a service to read
/// its files again (`systemctl reload`), for as long as the future runs;
/// on platforms without SIGHUP, never.
pub async fn on_each_sighup(mut reload: impl FnMut()) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut hangups) = signal(SignalKind::hangup()) {
            while hangups.recv().await.is_some() {
                reload();
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = &mut reload;
        std::future::pending::<()>().await;
    }
}

/// How a [`drain`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Everything under way finished within the grace period.
    Finished,
    /// The grace period ran out first.
    GraceRanOut,
    /// A second signal (named) came first.
    Signalled(&'static str),
}

/// Wait for `finished`, for at most `grace`, or until the next of
/// `signals`.
pub async fn drain(
    signals: &mut StopSignals,
    grace: Duration,
    finished: impl Future<Output = ()>,
) -> Drained {
    tokio::select! {
        () = finished => Drained::Finished,
        () = tokio::time::sleep(grace) => Drained::GraceRanOut,
        signal = signals.next() => Drained::Signalled(signal),
    }
}

/// An HTTP server's requests under way, each counted from its arrival until
/// its response's body has been sent (or dropped): one that answers with
/// an event stream is under way until the stream ends.
///
/// ```
/// # fn serve(router: axum::Router) -> axum::Router {
/// let requests = idem_net::stop::Requests::default();
/// // An endless stream (the page's live events) is not waited for.
/// requests.track(router, |request| request.uri().path() != "/events")
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Requests {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, String>>,
    idle: tokio::sync::Notify,
}

impl Requests {
    /// `router` with its requests counted, those `counted` says yes to.
    pub fn track(&self, router: axum::Router, counted: fn(&Request) -> bool) -> axum::Router {
        let requests = self.clone();
        router.layer(axum::middleware::from_fn(
            move |request: Request, next: axum::middleware::Next| {
                let requests = requests.clone();
                async move {
                    if !counted(&request) {
                        return next.run(request).await;
                    }
                    // The method and path only: a query may carry a secret.
                    let what = format!("{} {}", request.method(), request.uri().path());
                    let open = requests.open(what);
                    let response = next.run(request).await;
                    let (parts, body) = response.into_parts();
                    // Counted until the body has been sent or dropped.
                    let body = body.into_data_stream().map(move |chunk| {
                        let _ = &open;
                        chunk
                    });
                    Response::from_parts(parts, Body::from_stream(body))
                }
            },
        ))
    }

    /// The requests under way (`METHOD /path`), oldest first.
    pub fn list(&self) -> Vec<String> {
        self.requests().values().cloned().collect()
    }

    /// Wait until no request is under way.
    pub async fn finished(&self) {
        loop {
            let idle = self.inner.idle.notified();
            if self.requests().is_empty() {
                return;
            }
            idle.await;
        }
    }

    fn open(&self, what: String) -> Open {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        self.requests().insert(id, what);
        Open {
            id,
            requests: self.clone(),
        }
    }

    fn requests(&self) -> MutexGuard<'_, BTreeMap<u64, String>> {
        self.inner.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A request counted by [`Requests`] until it is dropped.
struct Open {
    id: u64,
    requests: Requests,
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut open = self.requests.requests();
        open.remove(&self.id);
        if open.is_empty() {
            self.requests.inner.idle.notify_waiters();
        }
    }
}
