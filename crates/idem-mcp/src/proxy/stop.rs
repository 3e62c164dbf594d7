//! How the proxy stops: by draining. The first SIGTERM or SIGINT stops new
//! calls (each answered that the server is stopping and nothing ran);
//! the calls under way finish and are recorded, for up to
//! `--shutdown-grace`; a second signal, or the grace running out, stops
//! at once and names the calls left in flight ([`ProxyError::Stopped`]).
//! Over stdio, a client that hangs up is waited for the same way: the
//! calls it left finish and are recorded.

use std::time::Duration;

use idem_net::stop::{drain, Drained, StopSignals};
use rmcp::ServiceExt;

use super::options::ProxyError;
use super::Proxy;
use crate::CallsInFlight;

/// How long the calls under way may take to finish once the proxy is told
/// to stop, unless `--shutdown-grace` says otherwise.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// What a stopping proxy waits for, and for how long.
pub(super) struct Stopping {
    pub(super) calls: CallsInFlight,
    pub(super) grace: Duration,
    pub(super) signals: StopSignals,
}

impl Stopping {
    /// Listen for the signals from now on.
    pub(super) fn new(calls: CallsInFlight, grace: Duration) -> Result<Self, ProxyError> {
        Ok(Stopping {
            calls,
            grace,
            signals: StopSignals::listen()?,
        })
    }

    /// Stop taking calls after `signal`, and wait for those under way (and
    /// for `more`, such as their responses being sent) within the grace.
    pub(super) async fn drain(
        &mut self,
        signal: &str,
        more: impl std::future::Future<Output = ()>,
    ) -> Result<(), ProxyError> {
        self.calls.stop_taking();
        let under_way = self.calls.len();
        eprintln!(
            "idem proxy: {signal}: stopping: no new calls; waiting up to {} for {under_way} \
             call{} under way (a second signal stops at once)",
            seconds(self.grace),
            if under_way == 1 { "" } else { "s" },
        );
        let calls = self.calls.clone();
        self.wait(async move {
            calls.finished().await;
            more.await;
        })
        .await?;
        eprintln!("idem proxy: stopped: every call under way finished and was recorded");
        Ok(())
    }

    /// Wait for `finished` within the grace: [`ProxyError::Stopped`],
    /// naming the calls left, when it ran out or a second signal came.
    pub(super) async fn wait(
        &mut self,
        finished: impl std::future::Future<Output = ()>,
    ) -> Result<(), ProxyError> {
        let why = match drain(&mut self.signals, self.grace, finished).await {
            Drained::Finished => return Ok(()),
            Drained::GraceRanOut => format!("the {} grace ran out", seconds(self.grace)),
            Drained::Signalled(signal) => format!("a second {signal}"),
        };
        Err(ProxyError::Stopped {
            why,
            calls: self.calls.list(),
        })
    }
}

/// Serve `proxy` over stdio until its client hangs up or a signal stops it.
pub(super) async fn serve_stdio(proxy: Proxy, mut stopping: Stopping) -> Result<(), ProxyError> {
    let service = proxy
        .serve(crate::stdio())
        .await
        .map_err(|e| ProxyError::Client(e.to_string()))?;
    let session = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        _ = &mut waiting => {
            // The client hung up: what it left under way finishes.
            let calls = stopping.calls.clone();
            calls.stop_taking();
            stopping.wait(async move { calls.finished().await }).await
        }
        signal = stopping.signals.next() => {
            stopping.drain(signal, std::future::ready(())).await?;
            // The answers of the last calls are sent before the session ends.
            session.cancel();
            let _ = waiting.await;
            Ok(())
        }
    }
}

/// `30s`, `1.5s`: a duration as a person reads it.
fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}
