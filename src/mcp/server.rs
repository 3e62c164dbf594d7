//! [`McpServer`]: an rmcp `ServerHandler` serving a registry's tools, and
//! the same tools as a `ToolRouter` fragment.

use std::sync::Arc;

use rmcp::handler::server::router::tool::{ToolRoute, ToolRouter};
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, JsonObject, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};

use super::call::Tools;
use crate::registry::BoxFuture;
use crate::{Dispatcher, Namespace};

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
            tools: Arc::new(Tools::new(dispatcher, None)),
            config: ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
                .with_server_info(Implementation::new("idem", env!("CARGO_PKG_VERSION"))),
        }
    }

    /// What the server says of itself at `initialize` (its name, version,
    /// instructions, capabilities). Keep tools enabled in the capabilities.
    pub fn with_config(mut self, config: ServerConfig) -> Self {
        self.config = config;
        self
    }

    /// Key every call in tenant `namespace` rather than the executor's
    /// default (one server per tenant; see
    /// [`Namespace`](crate::Namespace)).
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        let dispatcher = self.tools.dispatcher.clone();
        self.tools = Arc::new(Tools::new(dispatcher, Some(namespace)));
        self
    }

    /// The dispatcher the calls run through.
    pub fn dispatcher(&self) -> &Dispatcher<S> {
        &self.tools.dispatcher
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
                        ..
                    } = context;
                    Box::pin(async move {
                        let meta: &JsonObject = &request_context.meta;
                        tools
                            .call(&name, arguments, meta, &request_context)
                            .await
                            .map(CallToolResponse::from)
                    })
                },
            ));
        }
        router
    }
}

impl<S: Send + Sync + 'static> ServerHandler for McpServer<S> {
    fn get_info(&self) -> ServerConfig {
        self.config.clone()
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
        self.tools
            .call(&request.name, request.arguments, &meta, &context)
            .await
            .map(CallToolResponse::from)
    }
}
