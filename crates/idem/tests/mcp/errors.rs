//! Errors of MCP calls, through rmcp's own client in process: an unknown
//! tool is a protocol error with a suggestion; invalid arguments and a key
//! reused with other arguments are error results, and nothing runs.

use crate::mcp_support::{call, charge, connect, error_of, server, Ledger};
use idem::mcp::CallToolRequestParamsExt;
use rmcp::ServiceError;
use serde_json::json;

#[tokio::test]
async fn an_unknown_tool_is_a_protocol_error_with_a_suggestion() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let error = client
        .call_tool(
            call("chrage_card", json!({"customer": "cus_17", "cents": 1}))
                .with_idempotency_key("k"),
        )
        .await
        .unwrap_err();
    let ServiceError::McpError(error) = error else {
        panic!("a JSON-RPC error, got {error:?}")
    };
    assert_eq!(error.code, rmcp::model::ErrorCode::INVALID_PARAMS);
    assert!(
        error.message.contains("did you mean `charge_card`"),
        "{}",
        error.message
    );
    assert_eq!(error.data.unwrap()["suggestion"], "charge_card");
}

#[tokio::test]
async fn invalid_arguments_are_an_error_result_and_nothing_runs() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    let result = client
        .call_tool(
            call(
                "charge_card",
                json!({"customer": "cus_17", "cents": "lots"}),
            )
            .with_idempotency_key("order-17"),
        )
        .await
        .unwrap();
    let error = error_of(&result);
    assert_eq!(error["code"], "invalid_arguments");
    assert!(error["message"].as_str().unwrap().contains("cents"));
    assert_eq!(ledger.charges(), 0);
}

#[tokio::test]
async fn a_key_reused_with_other_arguments_is_an_error_result() {
    let ledger = Ledger::default();
    let client = connect(server(&ledger)).await;
    client
        .call_tool(charge("cus_17", 4_900).with_idempotency_key("order-17"))
        .await
        .unwrap();
    let result = client
        .call_tool(charge("cus_17", 9_900).with_idempotency_key("order-17"))
        .await
        .unwrap();
    assert_eq!(error_of(&result)["code"], "key_reused");
    assert_eq!(ledger.charges(), 1);
}
