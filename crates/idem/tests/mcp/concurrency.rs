//! MCP calls cancelled or made twice at once, through rmcp's own client in
//! process: a cancelled call that claimed its key still records its
//! outcome, and two identical calls at once charge once.

use std::sync::Arc;
use std::time::Duration;

use crate::mcp_support::{call, connect, deduplicated, server, Ledger};
use idem::mcp::{CallToolRequestParamsExt, McpServer};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelledNotificationParam, ListToolsResult,
    PaginatedRequestParams, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::json;
use tokio::sync::Notify;

/// [`McpServer`], and a signal when a `notifications/cancelled` has been
/// handled (rmcp cancels the request's token before it calls
/// `on_cancelled`).
struct Watched {
    inner: McpServer<Ledger>,
    cancelled: Arc<Notify>,
}

impl ServerHandler for Watched {
    fn get_info(&self) -> ServerConfig {
        self.inner.get_info()
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.inner.list_tools(request, context).await
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.get_tool(name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.inner.call_tool(request, context).await
    }

    async fn on_cancelled(
        &self,
        _notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        self.cancelled.notify_one();
    }
}

fn slow(customer: &str) -> CallToolRequestParams {
    call(
        "slow_charge",
        json!({ "customer": customer, "cents": 4_900 }),
    )
    .with_idempotency_key("order-17-payment")
}

#[tokio::test]
async fn a_cancelled_call_that_has_claimed_its_key_still_records_its_outcome() {
    let ledger = Ledger::default();
    let cancelled = Arc::new(Notify::new());
    let client = Arc::new(
        connect(Watched {
            inner: server(&ledger),
            cancelled: cancelled.clone(),
        })
        .await,
    );

    // The call claims its key and reaches the payment provider...
    let pending = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool(slow("cus_17")).await }
    });
    ledger.started.notified().await;
    // ...and the client gives up on it: dropping rmcp's request sends
    // `notifications/cancelled`.
    pending.abort();
    tokio::time::timeout(Duration::from_secs(10), cancelled.notified())
        .await
        .expect("the server saw the cancellation");

    // The charge goes through after the request is gone.
    ledger.gate.add_permits(1);
    let retry = tokio::time::timeout(Duration::from_secs(10), client.call_tool(slow("cus_17")))
        .await
        .expect("the retry is answered")
        .unwrap();
    assert_eq!(retry.is_error, Some(false), "{retry:?}");
    assert!(deduplicated(&retry));
    assert_eq!(
        retry.structured_content,
        Some(json!({"charge_id": "ch_1", "cents": 4900}))
    );
    assert_eq!(ledger.charges(), 1);
}

#[tokio::test]
async fn two_concurrent_identical_calls_charge_once() {
    let ledger = Ledger::default();
    let client = Arc::new(connect(server(&ledger)).await);
    let first = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool(slow("cus_17")).await.unwrap() }
    });
    ledger.started.notified().await;
    // The duplicate arrives while the first is at the payment provider.
    let second = tokio::spawn({
        let client = client.clone();
        async move { client.call_tool(slow("cus_17")).await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    ledger.gate.add_permits(2);

    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(ledger.charges(), 1);
    assert_eq!(first.content, second.content);
    assert!(!deduplicated(&first));
    assert!(deduplicated(&second));
}
