//! JSON-RPC's own errors on the proxy's HTTP side, where rmcp answers
//! otherwise: a body that is not JSON gets `-32700` (rmcp: `415` and a
//! line of text), and a `tools/call` whose `arguments` are not an object
//! gets `-32602` (rmcp: `-32601`, "method not found"), as JSON-RPC 2.0
//! and MCP say. Everything else passes unchanged.

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use serde_json::{json, Value};

/// The middleware, for bodies of at most `limit` bytes (rmcp's own
/// limit: a larger one is refused with 413 here, as rmcp would).
pub(super) async fn errors(limit: usize, request: Request, next: Next) -> Response {
    let json = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    if request.method() != http::Method::POST || !json {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        return (
            http::StatusCode::PAYLOAD_TOO_LARGE,
            "the request body is too large",
        )
            .into_response();
    };
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(message) => message,
        Err(e) => {
            let error = json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {"code": -32700, "message": format!("Parse error: the body is not JSON ({e})")},
            });
            return answer(http::StatusCode::BAD_REQUEST, &error);
        }
    };
    if let Some(error) = invalid_arguments(&message) {
        return answer(http::StatusCode::OK, &error);
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// `message` as the JSON body of a response with `status`.
fn answer(status: http::StatusCode, message: &Value) -> Response {
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        message.to_string(),
    )
        .into_response()
}

/// The error answer to a `tools/call` request whose `arguments` are there
/// and not an object.
fn invalid_arguments(message: &Value) -> Option<Value> {
    if message.get("method")?.as_str()? != "tools/call" {
        return None;
    }
    let id = message.get("id")?;
    let arguments = message.get("params")?.get("arguments")?;
    if arguments.is_object() || arguments.is_null() {
        return None;
    }
    Some(json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32602,
            "message": "Invalid params: `arguments` must be a JSON object of the tool's arguments",
        },
    }))
}
