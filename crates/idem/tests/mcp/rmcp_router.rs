//! idem tools next to rmcp's own: the `#[tool]` name clash, and both kinds
//! of tool served by one `ToolRouter`.

use crate::mcp_support::{call, connect, deduplicated, tool_names, Charge, Ledger, Receipt};
use idem::mcp::CallToolRequestParamsExt;
use serde_json::json;

mod mixed {
    //! A server of the application's own: rmcp's `#[tool]` is in scope (so
    //! a bare `#[tool]` is rmcp's), idem's is written `#[idem::tool]`, and
    //! both kinds of tool are served by one `ToolRouter`.

    use idem::mcp::McpServer;
    use idem::{tools, Dispatcher, Executor, MemoryStore, State, ToolError};
    use rmcp::handler::server::router::tool::ToolRouter;
    use rmcp::handler::server::wrapper::Parameters;
    use rmcp::{tool, tool_handler, tool_router, ServerHandler};
    use schemars::JsonSchema;
    use serde::Deserialize;

    use super::{Charge, Ledger, Receipt};

    #[derive(Deserialize, JsonSchema)]
    pub struct Greeting {
        name: String,
    }

    /// An idem tool, in a module where `tool` means rmcp's.
    #[idem::tool(class = "non_idempotent_write")]
    async fn refund(args: Charge, State(ledger): State<Ledger>) -> Result<Receipt, ToolError> {
        Ok(ledger.charge(&args))
    }

    pub struct Shop {
        tool_router: ToolRouter<Shop>,
    }

    #[tool_router]
    impl Shop {
        /// Say hello (an rmcp tool).
        #[tool]
        fn hello(&self, Parameters(greeting): Parameters<Greeting>) -> String {
            format!("hello, {}", greeting.name)
        }
    }

    #[tool_handler(router = self.tool_router)]
    impl ServerHandler for Shop {}

    impl Shop {
        pub fn new(ledger: &Ledger) -> Shop {
            let executor = Executor::builder(MemoryStore::new())
                .state(ledger.clone())
                .build();
            let idem_tools = McpServer::new(Dispatcher::new(executor, tools![refund]));
            Shop {
                tool_router: Shop::tool_router() + idem_tools.tool_router(),
            }
        }
    }
}

#[tokio::test]
async fn rmcp_tools_and_idem_tools_serve_side_by_side_from_one_router() {
    let ledger = Ledger::default();
    let client = connect(mixed::Shop::new(&ledger)).await;

    let names = tool_names(&client).await;
    assert_eq!(names, ["hello", "refund"]);

    let hello = client
        .call_tool(call("hello", json!({"name": "Ada"})))
        .await
        .unwrap();
    assert_eq!(hello.content[0].as_text().unwrap().text, "hello, Ada");

    // The idem tool behind the fragment is keyed as on `McpServer`: by a
    // window without a key, by the key with one.
    let refund = || call("refund", json!({"customer": "cus_17", "cents": 900}));
    client.call_tool(refund()).await.unwrap();
    let unkeyed = client.call_tool(refund()).await.unwrap();
    assert!(deduplicated(&unkeyed));
    client
        .call_tool(refund().with_idempotency_key("refund-17"))
        .await
        .unwrap();
    let again = client
        .call_tool(refund().with_idempotency_key("refund-17"))
        .await
        .unwrap();
    assert!(deduplicated(&again));
    assert_eq!(ledger.charges(), 2);
}
