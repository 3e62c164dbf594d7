//! The upstream MCP server: a child process spoken to over stdio by rmcp's
//! client, or a server reached over streamable HTTP; started (or connected
//! to) again when it has gone (a crash, a restart), and the notifications
//! it sends passed on to the proxy's own client.

use std::sync::{Arc, Mutex};
use std::time::Duration;

#[allow(deprecated)] // LoggingMessageNotificationParam: see `on_logging_message`.
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    ClientRequest, Implementation, InitializeResult, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProgressToken, ResourceUpdatedNotificationParam, ServerPeerInfo,
    ServerResult,
};
use rmcp::service::{NotificationContext, Peer, PeerRequestOptions, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, RoleServer, ServiceExt};

use idem_runtime::error::ToolError;

use super::http::{self, HttpClient};

/// The field of an ambiguous error's details holding the upstream's
/// JSON-RPC error (`code`, `message`), which the configuration may name
/// transient.
pub(super) const JSONRPC_ERROR: &str = "jsonrpc_error";

/// An entry of a list shared with other tasks, taken out again when the
/// guard is dropped: a call under way, for as long as it is.
pub(super) struct Listed<T: PartialEq> {
    list: Arc<Mutex<Vec<T>>>,
    entry: T,
}

impl<T: PartialEq + Clone> Listed<T> {
    fn new(list: &Arc<Mutex<Vec<T>>>, entry: T) -> Self {
        list.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(entry.clone());
        Listed {
            list: list.clone(),
            entry,
        }
    }
}

impl<T: PartialEq> Drop for Listed<T> {
    fn drop(&mut self) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = list.iter().position(|e| *e == self.entry) {
            list.remove(at);
        }
    }
}

/// Where a call's progress goes: under the client's token, to the client's
/// own session (over HTTP, one proxy serves many).
#[derive(Clone)]
pub(super) struct ProgressTo {
    token: ProgressToken,
    peer: Peer<RoleServer>,
}

/// Where the progress of the request being served goes, if anywhere.
pub(super) fn progress_to() -> Option<ProgressTo> {
    crate::call::request_progress().map(|(token, peer)| ProgressTo { token, peer })
}

/// An upstream request under way: the token rmcp gave the request, where
/// its progress goes if its client asked for progress, and whom to tell
/// that the upstream is still at work on it (each progress notification
/// starts the call's idle timer again).
#[derive(Clone)]
struct Routed {
    upstream: ProgressToken,
    to: Option<ProgressTo>,
    alive: Arc<tokio::sync::Notify>,
}

impl PartialEq for Routed {
    fn eq(&self, other: &Self) -> bool {
        self.upstream == other.upstream
    }
}

/// A `tools/call`'s answer as a tool result. A result rmcp read as another
/// shape (one with no content, `{}`, or only `_meta`) is read again as a
/// tool result; one that is none is unexpected.
fn call_result(answer: ServerResult) -> Result<CallToolResult, ServiceError> {
    match answer {
        ServerResult::CallToolResult(result) => Ok(result),
        ServerResult::EmptyResult(_) => Ok(CallToolResult::success(Vec::new())),
        other => serde_json::to_value(other)
            .and_then(serde_json::from_value)
            .map_err(|_| ServiceError::UnexpectedResponse),
    }
}

/// What the upstream said at `initialize`, as a server's configuration.
fn initialized(info: &ServerPeerInfo) -> InitializeResult {
    let mut result = InitializeResult::new(info.capabilities.clone());
    result.protocol_version = info.protocol_version.clone();
    result.server_info = info
        .server_info
        .clone()
        .unwrap_or_else(|| Implementation::new("upstream", ""));
    result.instructions = info.instructions.clone();
    result.meta = info.meta.clone();
    result
}

/// Where the upstream server is.
#[derive(Debug, Clone)]
pub(super) enum Source {
    /// A program (and its arguments) the proxy starts and speaks to over
    /// stdio.
    Command(Vec<String>),
    /// A server already running, reached over streamable HTTP.
    Http(Box<HttpUpstream>),
}

/// An upstream reached over streamable HTTP.
#[derive(Clone)]
pub(super) struct HttpUpstream {
    /// Its `http://` or `https://` URL.
    pub(super) url: String,
    /// Whom to trust for `https://`.
    pub(super) tls: rustls::ClientConfig,
    /// The bearer token every request carries, if the upstream needs one
    /// (never shown: not in `Debug`, not in any message).
    pub(super) token: Option<String>,
}

impl std::fmt::Debug for HttpUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpUpstream")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish_non_exhaustive()
    }
}

impl Source {
    /// The upstream as its messages name it: the program, or the URL.
    fn name(&self) -> &str {
        match self {
            Source::Command(command) => command.first().map_or("", String::as_str),
            Source::Http(upstream) => &upstream.url,
        }
    }
}

/// The upstream server, (re)started or (re)connected on demand.
pub(super) struct Upstream {
    source: Source,
    running: tokio::sync::Mutex<Option<RunningService<RoleClient, Forward>>>,
    forward: Forward,
}

/// Where the upstream's notifications go: the proxy's client, once it has
/// connected.
#[derive(Clone, Default)]
pub(super) struct Forward {
    downstream: Arc<Mutex<Option<Peer<RoleServer>>>>,
    /// The upstream calls under way whose client asked for progress: the
    /// token rmcp gave the upstream request, and the client's. The
    /// upstream's progress goes back under the client's token of the call
    /// it names, however many are under way.
    calls: Arc<Mutex<Vec<Routed>>>,
}

impl Forward {
    /// Send the upstream's notifications to `peer` from now on.
    pub(super) fn connect(&self, peer: Peer<RoleServer>) {
        *self.downstream.lock().unwrap_or_else(|e| e.into_inner()) = Some(peer);
    }

    fn peer(&self) -> Option<Peer<RoleServer>> {
        self.downstream
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl ClientHandler for Forward {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("idem-proxy", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_progress(
        &self,
        mut params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let routed = self
            .calls
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|routed| routed.upstream == params.progress_token)
            .cloned();
        let Some(routed) = routed else {
            return;
        };
        routed.alive.notify_one();
        let Some(to) = routed.to else {
            return;
        };
        params.progress_token = to.token;
        let _ = to.peer.notify_progress(params).await;
    }

    // Logging is deprecated (SEP-2577) but servers still send it.
    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(peer) = self.peer() {
            let _ = peer.notify_logging_message(params).await;
        }
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(peer) = self.peer() {
            let _ = peer.notify_resource_updated(params).await;
        }
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(peer) = self.peer() {
            let _ = peer.notify_resource_list_changed().await;
        }
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(peer) = self.peer() {
            let _ = peer.notify_prompt_list_changed().await;
        }
    }
}

impl Upstream {
    /// The upstream at `source`; nothing runs (or connects) until
    /// [`Upstream::start`].
    pub(super) fn new(source: Source) -> Self {
        Upstream {
            source,
            running: tokio::sync::Mutex::new(None),
            forward: Forward::default(),
        }
    }

    /// Where its notifications go.
    pub(super) fn forward(&self) -> &Forward {
        &self.forward
    }

    /// Start it or connect to it (or find it running) and return what it
    /// said at `initialize`, with a handle to talk to it. Over HTTP a new
    /// connection is a new session, initialized again.
    pub(super) async fn start(&self) -> Result<(Peer<RoleClient>, InitializeResult), String> {
        let mut running = self.running.lock().await;
        if let Some(service) = running.as_ref() {
            if !service.is_closed() && !service.peer().is_transport_closed() {
                if let Some(info) = service.peer_info() {
                    return Ok((service.peer().clone(), initialized(&info)));
                }
            }
        }
        let name = self.source.name();
        let service = match &self.source {
            Source::Command(command) => {
                let (program, args) = command
                    .split_first()
                    .ok_or("no upstream command: give one after `--`")?;
                let mut command = tokio::process::Command::new(program);
                command.args(args);
                // A process group of its own: Ctrl-C in the proxy's terminal
                // (SIGINT to the whole foreground group) reaches the proxy
                // alone, which drains; the upstream finishes the calls under
                // way and is stopped after.
                #[cfg(unix)]
                command.process_group(0);
                let transport = TokioChildProcess::new(command)
                    .map_err(|e| format!("could not start the upstream server `{program}`: {e}"))?;
                self.forward.clone().serve(transport).await
            }
            Source::Http(upstream) => {
                let mut config =
                    StreamableHttpClientTransportConfig::with_uri(upstream.url.as_str());
                if let Some(token) = &upstream.token {
                    config = config.auth_header(token.clone());
                }
                let client = HttpClient::new(upstream.tls.clone());
                let transport = StreamableHttpClientTransport::with_client(client, config);
                self.forward.clone().serve(transport).await
            }
        }
        .map_err(|e| {
            // rmcp's error names its worker types; what a person needs is
            // the client's own words, when they are there.
            let said = e.to_string();
            let said = said
                .find("cannot connect to the upstream server")
                .map_or(said.as_str(), |at| &said[at..]);
            format!("the upstream server `{name}` did not initialize: {said}")
        })?;
        let info = service
            .peer_info()
            .map(|info| initialized(&info))
            .ok_or("the upstream server sent no initialize result")?;
        let peer = service.peer().clone();
        *running = Some(service);
        Ok((peer, info))
    }

    /// Call a tool upstream.
    ///
    /// An upstream that cannot be started (or restarted, or connected to)
    /// has received nothing: a transient error, and the call may run
    /// again; so has an HTTP upstream that no longer knew the session (it
    /// restarted: rmcp starts a new session and sends the call once more
    /// before it gives up). Once the
    /// request has gone, an error response, a transport that closes (the
    /// server crashed) or a timeout leaves its effect unknown: an
    /// ambiguous error, which the executor re-runs with the same key for an
    /// idempotent write and records as an unknown outcome otherwise. A
    /// result with `isError` is the tool's answer, returned as it came.
    ///
    /// `progress` says where the call's progress goes, if its client asked
    /// for progress.
    pub(super) async fn call(
        &self,
        params: CallToolRequestParams,
        progress: Option<ProgressTo>,
        idle: Duration,
    ) -> Result<CallToolResult, ToolError> {
        let (peer, _) = self.start().await.map_err(|e| {
            ToolError::transient(format!("{e}; the call was not sent, nothing ran"))
        })?;
        // Sent as rmcp's `call_tool` sends it, keeping the handle for the
        // progress token rmcp gave the request.
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
        let answer = async {
            let handle = peer
                .send_cancellable_request(request, PeerRequestOptions::no_options())
                .await?;
            let alive = Arc::new(tokio::sync::Notify::new());
            let _routed = Listed::new(
                &self.forward.calls,
                Routed {
                    upstream: handle.progress_token.clone(),
                    to: progress,
                    alive: alive.clone(),
                },
            );
            let response = handle.await_response();
            tokio::pin!(response);
            // MCP's reset-on-progress: the call may take as long as it
            // keeps reporting progress, and `idle` without a word.
            loop {
                tokio::select! {
                    answer = &mut response => return answer.map(Some),
                    () = alive.notified() => {}
                    () = tokio::time::sleep(idle) => return Ok(None),
                }
            }
        }
        .await;
        let answer = match answer {
            Ok(Some(answer)) => Ok(answer),
            Err(e) => Err(e),
            Ok(None) => {
                return Err(ToolError::ambiguous(format!(
                    "the upstream server received the call and sent neither its result nor \
                     progress for {} (the tool's `timeout` in the proxy's configuration): \
                     whether it took effect is unknown",
                    idem_runtime::text::duration::exact(idle)
                )))
            }
        };
        match answer.and_then(call_result) {
            Ok(result) => Ok(result),
            // Over HTTP the request's POST is the send: only a connection
            // never made (or a session the server no longer knew) sent
            // nothing.
            Err(ServiceError::TransportSend(e)) if matches!(self.source, Source::Http(_)) => {
                let error = &*e.error;
                if http::unsent(error) {
                    Err(ToolError::transient(format!(
                        "the request did not reach the upstream server ({error}); nothing ran"
                    )))
                } else {
                    Err(ToolError::ambiguous(format!(
                        "the upstream server received the call, then the exchange failed \
                         ({error}): whether it took effect is unknown"
                    )))
                }
            }
            Err(ServiceError::TransportSend(e)) => Err(ToolError::transient(format!(
                "the request could not be sent to the upstream server ({e}); nothing ran"
            ))),
            Err(ServiceError::McpError(e)) => Err(ToolError::ambiguous(format!(
                "the upstream server answered with a protocol error ({}: {}) after it received \
                 the call",
                e.code.0, e.message
            ))
            .with_details(serde_json::json!({
                JSONRPC_ERROR: { "code": e.code.0, "message": e.message },
            }))),
            Err(e) => Err(ToolError::ambiguous(format!(
                "the upstream server received the call, then {e}: whether it took effect is \
                 unknown"
            ))),
        }
    }

    /// The running upstream's handle, if it runs, for requests other than
    /// tool calls (resources, prompts), which pass through unchanged.
    pub(super) async fn peer(&self) -> Result<Peer<RoleClient>, String> {
        self.start().await.map(|(peer, _)| peer)
    }

    /// Whether it answers a ping now, started (or connected to) again if it
    /// had gone: `/readyz`.
    pub(super) async fn ping(&self) -> Result<(), String> {
        let ping = rmcp::model::PingRequest {
            method: Default::default(),
            extensions: Default::default(),
        };
        let peer = self.peer().await?;
        let answer = peer.send_request(ping.into()).await;
        answer.map(|_| ()).map_err(|e| e.to_string())
    }

    /// Stop it, waiting for the child to exit (over HTTP: end the
    /// session).
    pub(super) async fn stop(&self) {
        if let Some(service) = self.running.lock().await.take() {
            let _ = service.cancel().await;
        }
    }
}
