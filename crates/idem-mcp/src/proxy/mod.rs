//! `idem proxy`: idem in front of an MCP server nobody has to change.
//!
//! The proxy starts the upstream server (`idem proxy -- COMMAND…`) as a
//! child process and speaks MCP to it over stdio with rmcp's client, or
//! connects to one already running over streamable HTTP (`idem proxy
//! --upstream http://HOST:PORT/mcp`); it
//! serves the same tools to its own client over stdio with idem's MCP
//! server ([`McpServer`]), so every call is keyed, recorded and
//! answered exactly as a Rust tool's would be:
//!
//! * `config`: each tool's class and key options, from the `--config`
//!   file or the upstream's annotations; `--print-config` writes them.
//! * `tool`: an upstream tool as an idem tool, defined at run time; its
//!   call carries the idempotency key to the upstream in `_meta`
//!   (`io.idem/idempotencyKey`).
//! * `upstream`: the child process or HTTP session, started again when it
//!   has gone, and the mapping of what can go wrong to idem's error kinds.
//! * `http`: the HTTP client rmcp's streamable HTTP transport runs on
//!   (hyper's, plain HTTP), which tells a request never sent from one sent.
//! * `listen`: the HTTP side (`--listen`): the socket, TLS, who calls,
//!   the routes.
//! * `stop`: stopping by draining (SIGTERM, SIGINT, `--shutdown-grace`).
//! * `metrics`: `/metrics`, the executor's instruments for Prometheus.
//! * here: the server the client sees. Tool calls go through idem; the
//!   upstream's result is recorded whole and answered as it came (with
//!   idem's `_meta`); resources, prompts, completions and the upstream's
//!   notifications pass through; the capabilities are the upstream's,
//!   with idem's entry added.
//!
//! * `gateway`: several upstream servers behind one endpoint (the
//!   `[[upstream]]` tables of the configuration file), their tools under a
//!   prefix each.
//!
//! Records are kept in the namespace `mcp/NAME`, NAME being the server's
//! own name (or the file's `[server] name`; `gateway` for several), so
//! `idem ls --namespace mcp/NAME` lists them.

mod config;
mod gateway;
mod http;
mod jsonrpc;
mod listen;
mod metrics;
mod options;
mod reload;
mod sessions;
mod stop;
mod tool;
mod upstream;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use crate::{McpServer, REPEAT_ARGUMENT_META};
use idem_runtime::approval::{ApprovalDecision, Callback};
use idem_runtime::store::{Store, StoreError};
use idem_runtime::{Dispatcher, Executor, Namespace, Registry};
#[allow(deprecated)] // SetLevelRequestParams: see `set_level`.
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, GetTaskParams, GetTaskResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse, ServerConfig,
    SetLevelRequestParams, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, ServiceError};
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler};
use serde_json::Value;

use config::Config;
pub use config::{ConfigError, Table};
use listen::Listening;
pub use options::{ProxyError, ProxyOptions, UpstreamUrlError};
pub use stop::DEFAULT_SHUTDOWN_GRACE;
// Where they were before `crate::auth` served other servers too.
pub use crate::auth::{new_token, Principals};
use idem_runtime::store::StoreExt;
use tool::UpstreamTool;
use upstream::{Source, Upstream};

/// Run the proxy as `options` say until its client goes away (stdio) or
/// a signal stops it (SIGTERM, SIGINT): then it drains, as the module
/// `stop` says. `store` opens the store that records the
/// calls, once the upstream has answered: a proxy that cannot start opens
/// none.
pub async fn run<F, Fut>(options: &ProxyOptions, store: F) -> Result<(), ProxyError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Arc<dyn Store>, StoreError>>,
{
    let args = options;
    let config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ProxyError::Config(format!("cannot read {}: {e}", path.display())))?;
            Config::parse(&text, &path.display().to_string())?
        }
        None => Config::default(),
    };
    let state_secret = match &args.state_secret_file {
        Some(path) => Some(std::fs::read(path).map_err(|e| {
            ProxyError::Config(format!("--state-secret-file {}: {e}", path.display()))
        })?),
        None => None,
    };
    if let Some(secret) = &state_secret {
        // Checked before anything starts.
        crate::ask::States::with_secret(secret)
            .map_err(|e| ProxyError::Config(format!("--state-secret-file: {e}")))?;
    }
    let gateway = !config.upstream.is_empty();
    let source = match (&args.upstream, gateway) {
        (_, true) if args.upstream.is_some() || !args.command.is_empty() => {
            return Err(ProxyError::Config(
                "the --config file names its [[upstream]] servers: give no --upstream URL or command"
                    .into(),
            ))
        }
        (_, true) => {
            gateway::check(&config.upstream)?;
            None
        }
        (Some(url), false) => {
            http::check_url(url)?;
            Some(Source::Http(Box::new(upstream::HttpUpstream {
                url: url.clone(),
                tls: http::tls_config(url)?,
                token: upstream_token(args)?,
            })))
        }
        (None, false) if args.command.is_empty() => {
            return Err(ProxyError::Config(
                "no upstream server: give its command after `--`, its --upstream URL, or [[upstream]] tables in the --config file".into(),
            ))
        }
        (None, false) => Some(Source::Command(args.command.clone())),
    };
    // Who may call, and the address, are settled before any upstream
    // starts: a proxy that cannot serve starts nothing.
    let listening = match &args.listen {
        Some(address) => Some(Listening::open(address, args).await?),
        None => None,
    };
    let (mounts, name, info) = match source {
        Some(source) => {
            let upstream = Arc::new(Upstream::new(source));
            let (peer, info) = upstream.start().await.map_err(ProxyError::Upstream)?;
            let tools = peer.list_all_tools().await.map_err(|e| {
                ProxyError::Upstream(format!("the upstream server did not list its tools: {e}"))
            })?;
            let name = config
                .server
                .name
                .clone()
                .unwrap_or_else(|| info.server_info.name.clone());
            let tools = tools
                .into_iter()
                .map(|tool| {
                    let remote = tool.name.to_string();
                    (tool, remote)
                })
                .collect();
            let mount = gateway::Mount {
                name: name.clone(),
                upstream,
                tools,
                info: info.clone(),
            };
            (vec![mount], name, info)
        }
        None => {
            let mounts = gateway::start(&config.upstream).await?;
            let name = config
                .server
                .name
                .clone()
                .unwrap_or_else(|| "gateway".to_owned());
            let info = gateway::info(&mounts, &name);
            (mounts, name, info)
        }
    };
    let tools: Vec<Tool> = mounts
        .iter()
        .flat_map(|m| m.tools.iter().map(|(tool, _)| tool.clone()))
        .collect();

    let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
    let path = args
        .config
        .as_ref()
        .map_or_else(String::new, |p| p.display().to_string());
    if let Err(problem) = config.check(&names, &path) {
        gateway::stop(&mounts).await;
        return Err(problem.into());
    }

    if args.print_config {
        let text = config::print(&config, &name, &info.server_info.version, &tools);
        gateway::stop(&mounts).await;
        print!("{text}");
        return Ok(());
    }

    let namespace = Namespace::new(format!("mcp/{name}")).map_err(|e| ProxyError::Name {
        name: name.clone(),
        reason: e.to_string(),
    })?;
    // Every irreversible call is left to a person: the one in the chat
    // when the client can ask them, else an operator (`idem approve`, the
    // inbox), as each tool's `approval` says.
    let metrics = metrics::Metrics::new()?;
    let store = metrics.timed(store().await?);
    let executor = Executor::builder_shared(store)
        .meter(metrics.meter())
        .approvals(Callback::new(|request| async move {
            Ok(ApprovalDecision::Pending {
                message: format!("`{}` cannot be undone: a person decides", request.tool),
            })
        }))
        .build();
    let mut registry: Registry = Registry::new();
    let mut policies = Vec::new();
    let mut reloadable = Vec::new();
    for mount in &mounts {
        for (tool, remote) in &mount.tools {
            let resolved = config.resolve(tool);
            let description = tool.description.as_deref().unwrap_or_default();
            let defined = UpstreamTool::new(
                &tool.name,
                remote,
                description,
                &resolved,
                mount.upstream.clone(),
            );
            let live = defined.live();
            reloadable.push(reload::Served {
                listed: tool.clone(),
                live,
            });
            registry.insert(Arc::new(defined)).map_err(|e| {
                ProxyError::Upstream(format!(
                    "the upstream server `{}` lists a tool twice: {e}",
                    mount.name
                ))
            })?;
            policies.push((tool.name.to_string(), resolved));
        }
    }
    config.write_catalog(&registry, &tools)?;
    let mut dispatcher = Dispatcher::new(executor.clone(), registry);
    if let Some(bytes) = config.server.max_argument_bytes {
        dispatcher = dispatcher.max_argument_bytes(bytes);
    }
    let mut server = McpServer::new(dispatcher)
        .with_config(info.clone())
        .namespace(namespace)
        .tasks_after(config.server.tasks_after());
    if let Some(secret) = &state_secret {
        server = server
            .request_state_secret(secret)
            .map_err(|e| ProxyError::Config(format!("--state-secret-file: {e}")))?;
    }
    server = config::per_tool(server, policies);
    if listening.as_ref().is_some_and(|l| l.auth.is_some()) {
        // Each principal's calls in a namespace of their own.
        server = server.principal_from_auth();
    }
    let grace = args.shutdown_grace.unwrap_or(DEFAULT_SHUTDOWN_GRACE);
    let stopping = stop::Stopping::new(server.calls_in_flight(), grace)?;
    let upstreams = mounts.iter().map(|m| m.upstream.clone()).collect();
    let proxy = Proxy::new(server, upstreams, tools);
    let served = match listening {
        Some(listening) => {
            if let Some(path) = args.config.clone() {
                let reload = reload::Reload::new(path, config, reloadable);
                tokio::spawn(idem_net::stop::on_each_sighup(move || {
                    eprintln!("{}", reload.run());
                }));
            }
            let health = listen::health(executor.store().clone(), &mounts, gateway);
            let routes = metrics.router(executor.store().clone());
            listening
                .serve(proxy, &name, stopping, health, routes)
                .await
        }
        // Stopped at once, calls left under way: no wait for the upstream
        // nor the store to close.
        None => stop::serve_stdio(proxy, stopping).await,
    };
    if !matches!(served, Err(ProxyError::Stopped { .. })) {
        gateway::stop(&mounts).await;
        executor.store().close().await;
    }
    served
}

/// The bearer token for the upstream, from `--upstream-token-file` or
/// `--upstream-token-env` (never from the command line itself, where other
/// users of the machine read it).
fn upstream_token(options: &ProxyOptions) -> Result<Option<String>, ProxyError> {
    read_token(
        options.upstream_token_file.as_deref(),
        options.upstream_token_env.as_deref(),
        ["--upstream-token-file", "--upstream-token-env"],
    )
}

/// A bearer token from the file `file`, else the environment variable
/// `variable`: one line of printable text. `said` names the two where
/// the user gave them.
fn read_token(
    file: Option<&std::path::Path>,
    variable: Option<&str>,
    said: [&str; 2],
) -> Result<Option<String>, ProxyError> {
    let [file_said, variable_said] = said;
    let (token, from) = match (file, variable) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ProxyError::Config(format!("{file_said} {}: {e}", path.display())))?;
            (text, format!("{file_said} {}", path.display()))
        }
        (None, Some(variable)) => {
            let text = std::env::var(variable).map_err(|_| {
                ProxyError::Config(format!(
                    "{variable_said} {variable}: the variable is not set (or not UTF-8)"
                ))
            })?;
            (text, format!("{variable_said} {variable}"))
        }
        (None, None) => return Ok(None),
    };
    let token = token.trim();
    if token.is_empty() || token.contains(|c: char| c.is_control() || c.is_whitespace()) {
        return Err(ProxyError::Config(format!(
            "{from}: the token must be one line of printable text without spaces"
        )));
    }
    Ok(Some(token.to_owned()))
}

/// The server the proxy's client talks to.
#[derive(Clone)]
struct Proxy {
    idem: McpServer,
    /// The upstream servers: one, whose resources, prompts and
    /// completions pass through, or several behind one endpoint, which
    /// serve their tools only.
    upstreams: Arc<Vec<Arc<Upstream>>>,
    /// The upstreams' tools as listed, with idem's additions.
    listed: Arc<Vec<Tool>>,
}

impl Proxy {
    fn new(idem: McpServer, upstreams: Vec<Arc<Upstream>>, tools: Vec<Tool>) -> Self {
        let ours: HashMap<&str, &Tool> = idem.tools().iter().map(|t| (&*t.name, t)).collect();
        let listed = tools
            .iter()
            .map(|tool| match ours.get(&*tool.name) {
                Some(definition) => listed(tool, definition),
                None => tool.clone(),
            })
            .collect();
        Proxy {
            idem,
            upstreams: Arc::new(upstreams),
            listed: Arc::new(listed),
        }
    }

    /// The one upstream what is not a tool call passes through to.
    async fn upstream(&self) -> Result<rmcp::Peer<RoleClient>, ErrorData> {
        let [upstream] = self.upstreams.as_slice() else {
            return Err(ErrorData::invalid_request(
                "this gateway of several upstream servers serves their tools only",
                None,
            ));
        };
        upstream
            .peer()
            .await
            .map_err(|e| ErrorData::internal_error(e, None))
    }
}

/// The upstream's definition of a tool with what idem adds: its class's
/// annotations (the title kept), idem's `_meta` (class, keying), and,
/// for a tool keyed by a window, the optional repeat argument and the
/// sentence that explains it.
fn listed(upstream: &Tool, ours: &Tool) -> Tool {
    let mut tool = upstream.clone();
    tool.description = ours.description.clone();
    if let Some(mut annotations) = ours.annotations.clone() {
        if let Some(theirs) = &upstream.annotations {
            annotations.title = theirs.title.clone();
            annotations.open_world_hint = theirs.open_world_hint.or(annotations.open_world_hint);
        }
        tool.annotations = Some(annotations);
    }
    if let Some(meta) = &ours.meta {
        let mine = tool.meta.get_or_insert_with(Default::default);
        for (k, v) in meta.iter() {
            mine.insert(k.clone(), v.clone());
        }
        if let Some(Value::String(argument)) = meta.get(REPEAT_ARGUMENT_META) {
            let repeat = ours
                .input_schema
                .get("properties")
                .and_then(|p| p.get(argument))
                .cloned();
            if let Some(repeat) = repeat {
                let mut schema = (*tool.input_schema).clone();
                let properties = schema
                    .entry("properties")
                    .or_insert_with(|| Value::Object(Default::default()));
                if let Some(properties) = properties.as_object_mut() {
                    properties.insert(argument.clone(), repeat);
                }
                tool.input_schema = Arc::new(schema);
            }
        }
    }
    tool
}

/// idem's answer to a call, with the upstream's result in it restored:
/// idem's server carries a recorded result in `structuredContent`; the
/// client gets the upstream's content, structured content and `isError`
/// as they came, after any sentence idem put first (a repeat already
/// done), and idem's `_meta` added to the upstream's. idem's own answers
/// (a refusal, an unknown outcome, an approval) pass as they are.
fn restore(response: CallToolResponse) -> CallToolResponse {
    let CallToolResponse::Complete(mut ours) = response else {
        return response;
    };
    let recorded = if ours.is_error == Some(true) {
        // The upstream's own `isError` result, recorded as a failure.
        let upstream = ours
            .meta
            .as_ref()
            .and_then(|m| m.get(crate::ERROR_META))
            .and_then(|e| e.get("details"))
            .and_then(|d| d.get(tool::UPSTREAM_RESULT))
            .cloned();
        let Some(upstream) = upstream else {
            return CallToolResponse::Complete(ours);
        };
        // Given once, as the result itself, not again inside `_meta`.
        if let Some(error) = ours
            .meta
            .as_mut()
            .and_then(|m| m.get_mut(crate::ERROR_META))
            .and_then(Value::as_object_mut)
        {
            error.remove("details");
        }
        let repeat = ours
            .meta
            .as_ref()
            .and_then(|m| m.get(crate::DEDUPLICATED_META))
            == Some(&Value::Bool(true));
        if !repeat {
            // The first call: the upstream's answer as it came.
            ours.content.clear();
        }
        ours.content
            .push(rmcp::model::ContentBlock::text(String::new()));
        upstream
    } else {
        match ours.structured_content.take() {
            Some(recorded) => recorded,
            None => return CallToolResponse::Complete(ours),
        }
    };
    let mut theirs: CallToolResult = match serde_json::from_value(recorded.clone()) {
        Ok(theirs) => theirs,
        Err(_) => {
            ours.structured_content = Some(recorded);
            return CallToolResponse::Complete(ours);
        }
    };
    // The result type of the protocol spoken with the client, which may
    // be newer than the upstream's.
    theirs.result_type = ours.result_type;
    let first = ours.content.len().saturating_sub(1);
    theirs.content.splice(0..0, ours.content.drain(..first));
    if let Some(meta) = ours.meta {
        let mine = theirs.meta.get_or_insert_with(Default::default);
        for (k, v) in meta.iter() {
            mine.insert(k.clone(), v.clone());
        }
    }
    CallToolResponse::Complete(theirs)
}

fn passed(e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        other => ErrorData::internal_error(format!("the upstream server: {other}"), None),
    }
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        self.idem.get_info()
    }

    /// The versions up to the upstream's: what passes through (a resource,
    /// a prompt) is in the upstream's protocol, so the client speaks it too.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        let upstream = self.idem.get_info().protocol_version;
        Cow::Borrowed(ProtocolVersion::known_up_to(&upstream))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        for upstream in self.upstreams.iter() {
            upstream.forward().connect(context.peer.clone());
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items((*self.listed).clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.listed.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // The upstream's progress goes back under this request's token, to
        // this request's session (`crate::call::request_progress`).
        ServerHandler::call_tool(&self.idem, request, context)
            .await
            .map(restore)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let mut got = self.idem.get_task(request, context).await?;
        // A completed task's result is the upstream's, as `call_tool`
        // answers it.
        if let rmcp::model::TaskPayload::Completed { result } = &mut got.task.payload {
            let ours = serde_json::from_value(Value::Object(std::mem::take(result)))
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            if let CallToolResponse::Complete(theirs) = restore(CallToolResponse::Complete(ours)) {
                if let Ok(Value::Object(object)) = serde_json::to_value(theirs) {
                    *result = object;
                }
            }
        }
        Ok(got)
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.upstream()
            .await?
            .list_resources(request)
            .await
            .map_err(passed)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.upstream()
            .await?
            .list_resource_templates(request)
            .await
            .map_err(passed)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.upstream()
            .await?
            .read_resource_once(request)
            .await
            .map_err(passed)
    }

    // Legacy (before 2026-07-28) but what the upstreams of today speak:
    // advertised when the upstream advertises it, so passed through.
    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.upstream()
            .await?
            .subscribe(request)
            .await
            .map_err(passed)
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.upstream()
            .await?
            .unsubscribe(request)
            .await
            .map_err(passed)
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.upstream()
            .await?
            .list_prompts(request)
            .await
            .map_err(passed)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.upstream()
            .await?
            .get_prompt_once(request)
            .await
            .map_err(passed)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.upstream()
            .await?
            .complete(request)
            .await
            .map_err(passed)
    }

    // Logging is deprecated (SEP-2577) but servers still take it.
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.upstream()
            .await?
            .set_level(request)
            .await
            .map_err(passed)
    }
}
