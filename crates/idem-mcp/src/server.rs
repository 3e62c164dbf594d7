//! [`McpServer`]: an rmcp `ServerHandler` serving a registry's tools, and
//! the same tools as a `ToolRouter` fragment.

use std::sync::Arc;

use rmcp::handler::server::router::tool::{ToolRoute, ToolRouter};
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetTaskParams, GetTaskResult, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    TASKS_EXTENSION_ID,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;

use crate::ask::States;
use crate::call::{Request, Tools};
use crate::key::{CLIENT_FIELDS, IDEMPOTENCY_KEY_HEADER};
use crate::meta::CAPABILITY;
use crate::policy::{Approver, Unkeyed};
use idem_runtime::registry::BoxFuture;
use idem_runtime::{Dispatcher, Namespace};

/// An MCP server for the tools of a [`Dispatcher`]'s registry: an rmcp
/// [`ServerHandler`] whose `tools/call` runs through the dispatcher, keyed
/// as the [module documentation](super) says.
///
/// ```no_run
/// use idem::mcp::McpServer;
/// use idem::prelude::*;
/// use rmcp::ServiceExt;
/// # #[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// # struct Charge { customer: String, cents: u64 }
///
/// /// Charge a customer's card.
/// #[idem::tool(class = "non_idempotent_write")]
/// async fn charge_card(args: Charge) -> Result<String, ToolError> {
///     Ok(format!("charged {} cents", args.cents))
/// }
///
/// # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
/// let executor = Executor::builder_shared(idem::store::from_env().await?).build();
/// let dispatcher = Dispatcher::new(executor, tools![charge_card]);
/// // Over stdio (rmcp's `transport-io` feature), until the client hangs up.
/// let transport = (tokio::io::stdin(), tokio::io::stdout());
/// McpServer::new(dispatcher).serve(transport).await?.waiting().await?;
/// # Ok(())
/// # }
/// ```
///
/// It is cheap to clone (rmcp's streamable HTTP server makes one per
/// session from a factory closure).
pub struct McpServer<S = ()> {
    tools: Arc<Tools<S>>,
    config: ServerConfig,
}

impl<S> Clone for McpServer<S> {
    fn clone(&self) -> Self {
        McpServer {
            tools: self.tools.clone(),
            config: self.config.clone(),
        }
    }
}

impl<S: Send + Sync + 'static> McpServer<S> {
    /// Serve the tools of `dispatcher`'s registry through it.
    ///
    /// The server calls itself `idem` with idem's version and offers tools;
    /// [`McpServer::with_config`] says otherwise.
    pub fn new(dispatcher: Dispatcher<S>) -> Self {
        McpServer {
            tools: Arc::new(Tools::new(dispatcher)),
            config: ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
                .with_server_info(Implementation::new("idem", env!("CARGO_PKG_VERSION"))),
        }
    }

    /// What the server says of itself at `initialize` (its name, version,
    /// instructions, capabilities). Keep tools enabled in the capabilities;
    /// the server adds its own entry to `experimental` ([`CAPABILITY`]).
    pub fn with_config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// Key every call in tenant `namespace` rather than the executor's
    /// default (one server per tenant; see
    /// [`Namespace`](idem_runtime::Namespace)). With a
    /// [`principal`](McpServer::principal), each caller's calls are keyed
    /// in `namespace/principal`.
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.tools_mut().namespace = Some(namespace);
        self
    }

    /// What to do with a write that carries no key of idem's — every call
    /// of a chat client ([`Unkeyed`]; a ten-minute window by default).
    pub fn unkeyed(mut self, policy: Unkeyed) -> Self {
        let tools = self.tools_mut();
        tools.unkeyed = policy;
        tools.define();
        self
    }

    /// What to do with a call of `tool` that carries no key of idem's,
    /// when it differs from the server's [`McpServer::unkeyed`]: a
    /// shorter window for a tool whose identical calls are often meant
    /// (a `git_commit "wip"` after staging more), or [`Unkeyed::Refuse`]
    /// for one that must never be keyed by its arguments.
    pub fn unkeyed_for(mut self, tool: &str, policy: Unkeyed) -> Self {
        let tools = self.tools_mut();
        tools.unkeyed_by_tool.insert(tool.to_owned(), policy);
        tools.define();
        self
    }

    /// Who is calling, for a server that serves many people (over
    /// streamable HTTP): the OAuth token's subject, a header set by a
    /// trusted proxy, any function of the request. Each principal's calls
    /// are keyed in a namespace of their own (`default/alice`, or
    /// `NAMESPACE/alice` under [`McpServer::namespace`]), so one user's
    /// key, or identical unkeyed call, never answers another's. `None`
    /// (stdio, one user): the server's namespace.
    ///
    /// rmcp's streamable HTTP server puts the request's
    /// `http::request::Parts` in `context.extensions`:
    ///
    /// ```
    /// # use idem::mcp::McpServer;
    /// # fn f(server: McpServer) -> McpServer {
    /// server.principal(|context| {
    ///     let parts = context.extensions.get::<http::request::Parts>()?;
    ///     // Set by the authenticating proxy in front of this server.
    ///     let user = parts.headers.get("x-authenticated-user")?;
    ///     Some(user.to_str().ok()?.to_owned())
    /// })
    /// # }
    /// ```
    pub fn principal<F>(mut self, principal: F) -> Self
    where
        F: Fn(&RequestContext<RoleServer>) -> Option<String> + Send + Sync + 'static,
    {
        self.tools_mut().principal = Some(Arc::new(principal));
        self
    }

    /// Each caller's calls in a namespace of their own, the caller being
    /// who [`auth`](crate::auth)'s layer let through
    /// ([`Caller::of`](crate::auth::Caller::of)): a server behind
    /// [`Authenticator::layer`](crate::auth::Authenticator::layer) (feature
    /// `http-auth`; the [module's example](crate::auth) serves one).
    ///
    /// ```
    /// # use idem::mcp::McpServer;
    /// # fn f(server: McpServer) -> McpServer {
    /// server.principal_from_auth()
    /// # }
    /// ```
    #[cfg(feature = "http-auth")]
    pub fn principal_from_auth(self) -> Self {
        self.principal(|context| {
            crate::auth::Caller::of(context).map(|caller| caller.name().to_owned())
        })
    }

    /// Who decides the approvals of tool `tool` that the executor's policy
    /// leaves to a person ([`Approver`]; by default the person in the chat
    /// when the client can ask them, else an operator).
    pub fn approver(mut self, tool: &str, approver: Approver) -> Self {
        self.tools_mut().approvers.insert(tool.to_owned(), approver);
        self
    }

    /// Who decides approvals for every tool without an
    /// [`McpServer::approver`] of its own.
    pub fn approvers(mut self, approver: Approver) -> Self {
        self.tools_mut().default_approver = approver;
        self
    }

    /// The secret that seals the state of an approval asked in the chat
    /// (protocol 2026-07-28), at least 32 bytes. Every server behind one
    /// load balancer needs the same; by default each process makes its
    /// own, and an answer that comes back to another process is asked
    /// afresh.
    pub fn request_state_secret(mut self, secret: &[u8]) -> Result<Self, SecretError> {
        let states = States::with_secret(secret).map_err(SecretError)?;
        self.tools_mut().states = states;
        Ok(self)
    }

    /// How long a call with a record (any write) may run before a client
    /// that declared the tasks extension is answered with a task, while
    /// the call goes on; `tasks/get` then says it is working, and gives
    /// its result once recorded. Ten seconds by default; `None`: every
    /// call is answered in its request (a read always is). The task's id
    /// is sealed with [`McpServer::request_state_secret`], so servers
    /// behind one load balancer read each other's tasks when they share it.
    pub fn tasks_after(mut self, after: Option<std::time::Duration>) -> Self {
        self.tools_mut().tasks_after = after;
        self
    }

    /// `tasks/get` for the tasks its calls answer with (a call that waits
    /// for an operator's approval, or runs longer than
    /// [`McpServer::tasks_after`], from a client that declared the tasks
    /// extension): the call's state, carried on once it is approved. A
    /// server of your own that serves [`McpServer::tool_router`] forwards
    /// its `ServerHandler::get_task` here, and declares the extension with
    /// [`McpServer::capabilities`].
    pub async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.tools.task(&request.task_id, &context).await
    }

    /// The capabilities this server declares: tools, the tasks extension,
    /// and its entry in `experimental` ([`CAPABILITY`]). A server of your
    /// own that serves [`McpServer::tool_router`] declares these.
    pub fn capabilities(&self) -> ServerCapabilities {
        let mut capabilities = self.config.capabilities.clone();
        let (policy, window) = match self.tools.unkeyed {
            Unkeyed::Window(within) => ("window", Some(within.as_secs())),
            Unkeyed::Refuse => ("refuse", None),
        };
        let mut entry = json!({
            "keyFields": CLIENT_FIELDS,
            "keyHeader": IDEMPOTENCY_KEY_HEADER,
            "reasonField": crate::meta::REASON_META,
            "unkeyed": policy,
        });
        if let Some(window) = window {
            entry["windowSeconds"] = window.into();
        }
        let serde_json::Value::Object(entry) = entry else {
            unreachable!("an object literal")
        };
        capabilities
            .experimental
            .get_or_insert_with(Default::default)
            .insert(CAPABILITY.to_owned(), entry);
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .entry(TASKS_EXTENSION_ID.to_owned())
            .or_default();
        capabilities
    }

    fn tools_mut(&mut self) -> &mut Tools<S> {
        Arc::make_mut(&mut self.tools)
    }

    /// The dispatcher the calls run through.
    pub fn dispatcher(&self) -> &Dispatcher<S> {
        &self.tools.dispatcher
    }

    /// The calls under way on this server and its clones, and the switch
    /// that has it refuse new ones: what a server that stops by draining
    /// waits for ([`CallsInFlight`](crate::CallsInFlight)).
    pub fn calls_in_flight(&self) -> crate::CallsInFlight {
        self.tools.in_flight.clone()
    }

    /// The tools' definitions, in registration order.
    pub fn tools(&self) -> &[Tool] {
        &self.tools.definitions
    }

    /// The same tools as a [`ToolRouter`] fragment, to merge into the
    /// router of a server of your own next to its `#[tool_router]` tools
    /// (`Self::tool_router() + idem_server.tool_router()`). Its calls run
    /// exactly as [`McpServer`]'s do.
    ///
    /// ```
    /// use idem::mcp::McpServer;
    /// use idem::prelude::*;
    /// use rmcp::handler::server::router::tool::ToolRouter;
    /// # #[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    /// # struct Charge { customer: String, cents: u64 }
    ///
    /// /// Charge a customer's card.
    /// #[idem::tool(class = "non_idempotent_write")]
    /// async fn charge_card(args: Charge) -> Result<String, ToolError> {
    ///     Ok(format!("charged {} cents", args.cents))
    /// }
    ///
    /// struct MyServer {
    ///     tool_router: ToolRouter<MyServer>,
    /// }
    ///
    /// let executor = Executor::builder(MemoryStore::new()).build();
    /// let idem_tools = McpServer::new(Dispatcher::new(executor, tools![charge_card]));
    /// let server = MyServer { tool_router: ToolRouter::new() + idem_tools.tool_router() };
    /// assert!(server.tool_router.has_route("charge_card"));
    /// ```
    pub fn tool_router<H: Send + Sync + 'static>(&self) -> ToolRouter<H> {
        let mut router = ToolRouter::new();
        for definition in &self.tools.definitions {
            let tools = self.tools.clone();
            router.add_route(ToolRoute::new_dyn(
                definition.clone(),
                move |context: ToolCallContext<'_, H>| -> BoxFuture<'_, _> {
                    let tools = tools.clone();
                    let ToolCallContext {
                        request_context,
                        name,
                        arguments,
                        input_responses,
                        request_state,
                        ..
                    } = context;
                    Box::pin(async move {
                        let meta: &JsonObject = &request_context.meta;
                        let request = Request {
                            name: &name,
                            arguments,
                            meta,
                            input_responses,
                            request_state,
                        };
                        tools.call(request, &request_context).await
                    })
                },
            ));
        }
        router
    }
}

impl<S: Send + Sync + 'static> ServerHandler for McpServer<S> {
    /// The configuration, with [`McpServer::capabilities`].
    fn get_info(&self) -> ServerConfig {
        let mut config = self.config.clone();
        config.capabilities = self.capabilities();
        config
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(
            self.tools.definitions.clone(),
        ))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.get(name).cloned()
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        McpServer::get_task(self, request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // rmcp moves a request's `_meta` into the context; a caller that
        // builds the request itself may leave it on the request.
        let mut meta: JsonObject = context.meta.0 .0.clone();
        if let Some(own) = request.meta {
            meta.extend(own.0 .0);
        }
        let call = Request {
            name: &request.name,
            arguments: request.arguments,
            meta: &meta,
            input_responses: request.input_responses,
            request_state: request.request_state,
        };
        self.tools.call(call, &context).await
    }
}

/// A [`McpServer::request_state_secret`] that cannot seal states (shorter
/// than 32 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretError(String);

impl std::fmt::Display for SecretError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request-state secret cannot seal approval states: {}",
            self.0
        )
    }
}

impl std::error::Error for SecretError {}
