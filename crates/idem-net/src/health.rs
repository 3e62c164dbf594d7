//! `/healthz` and `/readyz` for idem's servers (`idem proxy --listen`,
//! `idem serve`), as load balancers and Kubernetes probe them:
//!
//! * `GET /healthz`: the process lives and serves HTTP. Always `200`.
//! * `GET /readyz`: it can serve a call now: each of its [`Health::check`]s
//!   answered (the store, the upstream) within [`PROBE_TIMEOUT`], and it is
//!   not stopping. `200` with `{"status":"ready",…}`, else `503` with a
//!   short JSON body naming what is down: `{"status":"not ready",
//!   "down":{"store":"not answering"}}`, or `{"status":"stopping"}`.
//!
//! Both are unauthenticated (a probe carries no token), answer `GET` and
//! `HEAD` only, and say nothing but the names of the checks and fixed
//! words: no record, no host, no error text (a probe logs its error on
//! the server's side).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// How long a check may take before it counts as down.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why a check is down, in fixed words (`"not answering"`; no quote nor
/// backslash: it is written into JSON as it is): what `/readyz` shows.
pub type Down = &'static str;

type Probe = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<(), Down>> + Send>> + Send + Sync>;

/// The checks of `/readyz`, and whether the server is stopping.
///
/// ```
/// use idem_net::health::Health;
///
/// let health = Health::default().check("store", || async { Ok(()) });
/// let routes: axum::Router = health.router();
/// health.stopping(); // `/readyz` answers 503 from now on
/// # let _ = routes;
/// ```
#[derive(Clone, Default)]
pub struct Health {
    checks: Vec<(String, Probe)>,
    stopping: Arc<AtomicBool>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.checks.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("Health")
            .field("checks", &names)
            .field("stopping", &self.stopping.load(Ordering::SeqCst))
            .finish()
    }
}

impl Health {
    /// Add the check `name` (letters, digits, `_`, `-` and `:`: it is
    /// written into JSON as it is): `probe` says whether it is up, or why
    /// not.
    pub fn check<F, Fut>(mut self, name: impl Into<String>, probe: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Down>> + Send + 'static,
    {
        let probe: Probe = Arc::new(move || Box::pin(probe()));
        self.checks.push((name.into(), probe));
        self
    }

    /// From now on `/readyz` answers `503 {"status":"stopping"}`: a load
    /// balancer sends the next calls elsewhere while this server drains.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// The routes `/healthz` and `/readyz`.
    pub fn router<S: Clone + Send + Sync + 'static>(&self) -> axum::Router<S> {
        let ready = self.clone();
        axum::Router::new()
            .route(
                "/healthz",
                get(|| async { json(StatusCode::OK, r#"{"status":"alive"}"#.to_owned()) }),
            )
            .route("/readyz", get(move || async move { ready.ready().await }))
    }

    /// The answer of `/readyz`: every check run at once, each within
    /// [`PROBE_TIMEOUT`].
    async fn ready(&self) -> Response {
        if self.stopping.load(Ordering::SeqCst) {
            return json(
                StatusCode::SERVICE_UNAVAILABLE,
                r#"{"status":"stopping"}"#.to_owned(),
            );
        }
        let probes = self.checks.iter().map(|(name, probe)| async move {
            let said = match tokio::time::timeout(PROBE_TIMEOUT, probe()).await {
                Ok(Ok(())) => "ok",
                Ok(Err(down)) => down,
                Err(_) => "timed out",
            };
            (name.as_str(), said)
        });
        let said = futures_util::future::join_all(probes).await;
        let fields = |all: &[(&str, &str)]| {
            let fields: Vec<String> = all.iter().map(|(n, s)| format!(r#""{n}":"{s}""#)).collect();
            fields.join(",")
        };
        let down: Vec<(&str, &str)> = said.iter().copied().filter(|(_, s)| *s != "ok").collect();
        if down.is_empty() {
            let body = format!(r#"{{"status":"ready","checks":{{{}}}}}"#, fields(&said));
            json(StatusCode::OK, body)
        } else {
            let body = format!(r#"{{"status":"not ready","down":{{{}}}}}"#, fields(&down));
            json(StatusCode::SERVICE_UNAVAILABLE, body)
        }
    }
}

/// A JSON answer no cache keeps.
fn json(status: StatusCode, body: String) -> Response {
    let headers = [
        (header::CONTENT_TYPE, "application/json"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    (status, headers, body).into_response()
}
