//! The calls a server has under way, for a server that stops by draining:
//! [`CallsInFlight`] counts each `tools/call` from its request until its
//! dispatch has ended (a call answered with a task, or whose client went
//! away, runs on until it is recorded), says which they are, and, once
//! told to [`stop_taking`](CallsInFlight::stop_taking), has the server
//! refuse new ones.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use idem_runtime::{RunContext, ToolCall};
use rmcp::ErrorData;
use serde_json::json;

tokio::task_local! {
    /// The `tools/call` being served, as [`CallsInFlight`] counts it: its
    /// dispatch holds it until it ends, after the request if need be.
    static IN_FLIGHT: Arc<Entry>;
}

/// Serve a `tools/call` in `call`, counted as `entry` ([`keyed`] finds it).
pub(crate) async fn counted<F>(entry: Arc<Entry>, call: F) -> F::Output
where
    F: std::future::Future<Output = Result<rmcp::model::CallToolResponse, ErrorData>>,
{
    IN_FLIGHT.scope(entry, call).await
}

/// The entry of the `tools/call` being served, now that its call is keyed:
/// held by its dispatch.
pub(crate) fn keyed(call: &ToolCall, run: &RunContext) -> Option<Arc<Entry>> {
    let entry = IN_FLIGHT.try_with(Arc::clone).ok()?;
    entry.keyed(keyed_by(call, run));
    Some(entry)
}

/// The calls under way on an [`McpServer`](crate::McpServer) and its
/// clones, shared: [`McpServer::calls_in_flight`](crate::McpServer::calls_in_flight).
///
/// ```
/// # async fn drain(server: idem_mcp::McpServer) {
/// let calls = server.calls_in_flight();
/// calls.stop_taking();
/// if !calls.finished_within(std::time::Duration::from_secs(30)).await {
///     for call in calls.list() {
///         eprintln!("left in flight: {} ({})", call.tool, call.key);
///     }
/// }
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct CallsInFlight {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    stopping: AtomicBool,
    next: AtomicU64,
    calls: Mutex<BTreeMap<u64, CallInFlight>>,
    /// Told each time the last call ends.
    idle: tokio::sync::Notify,
}

/// One call under way.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallInFlight {
    /// The tool called.
    pub tool: String,
    /// What the call is keyed by, as its client sent it: the key of
    /// `io.idem/idempotencyKey` (or a chat client's call id), `RUN#STEP`
    /// for a run's step, `-` for a call keyed by its arguments' window.
    pub key: String,
    /// When it came.
    pub since: Instant,
    /// Who calls (the principal, over HTTP with authentication) and the
    /// tool's class, for its access line.
    pub(crate) caller: Caller,
}

/// Who calls, and the tool's class: what a call's access line says of it
/// beside its tool and key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Caller {
    /// The principal, when the server knows who calls.
    pub(crate) principal: Option<String>,
    /// The tool's class (`non_idempotent_write`), `-` when unknown.
    pub(crate) class: String,
}

impl CallsInFlight {
    /// Refuse every call from now on (each is answered that the server is
    /// stopping and nothing ran); calls already under way go on.
    pub fn stop_taking(&self) {
        self.inner.stopping.store(true, Ordering::SeqCst);
    }

    /// Whether [`stop_taking`](Self::stop_taking) was said.
    pub fn is_stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::SeqCst)
    }

    /// The calls under way, oldest first.
    pub fn list(&self) -> Vec<CallInFlight> {
        self.calls().values().cloned().collect()
    }

    /// How many calls are under way.
    pub fn len(&self) -> usize {
        self.calls().len()
    }

    /// Whether no call is under way.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wait until no call is under way, for at most `grace`: whether they
    /// all ended.
    pub async fn finished_within(&self, grace: Duration) -> bool {
        tokio::time::timeout(grace, self.finished()).await.is_ok()
    }

    /// Wait until no call is under way.
    pub async fn finished(&self) {
        loop {
            // Registered before the count is read, so that an end between
            // the two is not missed.
            let idle = self.inner.idle.notified();
            if self.is_empty() {
                return;
            }
            idle.await;
        }
    }

    /// Count a call of `tool` from now until the returned entry (and every
    /// clone of it) is dropped; once the server stops taking calls, the
    /// call's refusal ([`stopping`]).
    pub(crate) fn enter(&self, tool: &str, caller: Caller) -> Result<Arc<Entry>, ErrorData> {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let call = CallInFlight {
            tool: tool.to_owned(),
            key: "-".to_owned(),
            since: Instant::now(),
            caller,
        };
        self.calls().insert(id, call);
        let entry = Arc::new(Entry {
            id,
            calls: self.clone(),
        });
        // Checked after the call is counted: a drain that starts in
        // between sees it, or it sees the drain.
        match self.is_stopping() {
            true => Err(stopping(tool)),
            false => Ok(entry),
        }
    }

    fn calls(&self) -> MutexGuard<'_, BTreeMap<u64, CallInFlight>> {
        self.inner.calls.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A call counted by [`CallsInFlight`], until it is dropped.
#[derive(Debug)]
pub(crate) struct Entry {
    id: u64,
    calls: CallsInFlight,
}

impl Entry {
    /// The call, as it is now.
    pub(crate) fn call(&self) -> CallInFlight {
        self.calls
            .calls()
            .get(&self.id)
            .cloned()
            .unwrap_or_else(|| CallInFlight {
                tool: String::new(),
                key: "-".to_owned(),
                since: Instant::now(),
                caller: Caller::default(),
            })
    }

    /// What the call is keyed by, once it is known.
    pub(crate) fn keyed(&self, key: String) {
        if let Some(call) = self.calls.calls().get_mut(&self.id) {
            call.key = key;
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut calls = self.calls.calls();
        calls.remove(&self.id);
        if calls.is_empty() {
            self.calls.inner.idle.notify_waiters();
        }
    }
}

/// What `call` is keyed by, as [`CallInFlight`]
/// shows it: its client's key, its run's step, or `-` (its window).
fn keyed_by(call: &ToolCall, run: &RunContext) -> String {
    match (&call.id, &run.run_id) {
        (Some(id), _) => idem_runtime::text::visible(id).into_owned(),
        (None, Some(run_id)) => format!("{}#{}", idem_runtime::text::visible(run_id), run.step),
        (None, None) => "-".to_owned(),
    }
}

/// The answer to a call that comes once the server stopped taking calls
/// ([`CallsInFlight::stop_taking`]): a protocol error, since the server is
/// not serving; nothing ran, and the same call, sent again to a server
/// that serves, runs as if for the first time.
fn stopping(name: &str) -> ErrorData {
    let name = idem_runtime::text::visible(name);
    ErrorData::new(
        rmcp::model::ErrorCode(SERVER_STOPPING),
        format!(
            "the server is stopping: `{name}` was not run. Send the call again, with the same \
             key, once it is back or to another instance."
        ),
        Some(json!({ "code": "server_stopping" })),
    )
}

/// The JSON-RPC error code of [`stopping`], in the range JSON-RPC leaves
/// to servers.
const SERVER_STOPPING: i32 = -32_001;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_drain_waits_for_every_entry_and_then_refuses_new_calls() {
        let calls = CallsInFlight::default();
        let first = calls.enter("append", Caller::default()).unwrap();
        first.keyed("k-1".to_owned());
        let second = calls.enter("append", Caller::default()).unwrap();
        let held = first.clone();
        drop(first);
        assert_eq!(calls.len(), 2, "a clone keeps the call counted");
        calls.stop_taking();
        assert!(
            calls.enter("append", Caller::default()).is_err(),
            "refused once stopping"
        );
        assert_eq!(calls.len(), 2, "a refused call is not left counted");
        assert_eq!(calls.list()[0].key, "k-1");
        assert!(!calls.finished_within(Duration::from_millis(20)).await);
        let waiting = tokio::spawn({
            let calls = calls.clone();
            async move { calls.finished_within(Duration::from_secs(5)).await }
        });
        drop(held);
        tokio::task::yield_now().await;
        drop(second);
        assert!(waiting.await.unwrap(), "finished once the last one ended");
        assert!(calls.is_empty());
    }
}
