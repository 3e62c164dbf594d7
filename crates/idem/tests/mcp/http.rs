//! The `Idempotency-Key` header on rmcp's streamable HTTP transport: it
//! keys a call, and one user's key or repeat never answers another user's
//! call.

use crate::mcp_support::{server, Ledger};
use idem::mcp::{DEDUPLICATED_META, IDEMPOTENCY_KEY_META};
use serde_json::json;

mod http_transport {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    use serde_json::{json, Value};

    use super::{server, Ledger};

    /// A stateless JSON-response service, as a gateway in front of many
    /// workers would run it.
    pub fn service(
        ledger: &Ledger,
    ) -> StreamableHttpService<idem::mcp::McpServer<Ledger>, NeverSessionManager> {
        service_of(server(ledger))
    }

    /// `server` as such a service.
    pub fn service_of(
        server: idem::mcp::McpServer<Ledger>,
    ) -> StreamableHttpService<idem::mcp::McpServer<Ledger>, NeverSessionManager> {
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true);
        StreamableHttpService::new(move || Ok(server.clone()), Default::default(), config)
    }

    /// POST one JSON-RPC request; the JSON-RPC response.
    pub async fn post(
        service: &StreamableHttpService<idem::mcp::McpServer<Ledger>, NeverSessionManager>,
        id: u64,
        params: Value,
        idempotency_key: Option<&str>,
    ) -> Value {
        let key: Vec<_> = idempotency_key
            .map(|k| ("Idempotency-Key", k))
            .into_iter()
            .collect();
        post_with(service, id, params, &key).await
    }

    /// POST one JSON-RPC request with these extra headers.
    pub async fn post_with(
        service: &StreamableHttpService<idem::mcp::McpServer<Ledger>, NeverSessionManager>,
        id: u64,
        params: Value,
        headers: &[(&str, &str)],
    ) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
        let mut request = http::Request::post("http://localhost/mcp")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        let response = service.handle(request).await;
        assert_eq!(response.status(), 200);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&body).unwrap()
    }
}

#[tokio::test]
async fn the_idempotency_key_header_keys_a_call_on_streamable_http() {
    let ledger = Ledger::default();
    let service = http_transport::service(&ledger);
    let params = json!({"name": "charge_card", "arguments": {"customer": "cus_17", "cents": 4900}});

    // Two requests, two JSON-RPC ids, one key: one charge.
    let first = http_transport::post(&service, 1, params.clone(), Some("\"order-17\"")).await;
    let retry = http_transport::post(&service, 2, params.clone(), Some("order-17")).await;
    assert_eq!(first["result"]["isError"], false, "{first}");
    assert_eq!(retry["result"]["content"], first["result"]["content"]);
    assert_eq!(retry["result"]["_meta"][DEDUPLICATED_META], true);
    assert_eq!(ledger.charges(), 1);

    // A `_meta` key outranks the header.
    let mut with_meta = params.clone();
    with_meta["_meta"] = json!({ IDEMPOTENCY_KEY_META: "order-18" });
    let other = http_transport::post(&service, 3, with_meta, Some("order-17")).await;
    assert_eq!(other["result"]["_meta"][DEDUPLICATED_META], false);
    assert_eq!(ledger.charges(), 2);

    // Without a header nor `_meta`, the charge is keyed by what it does:
    // a third charge, and its re-sent request (a new JSON-RPC id, as the
    // spec requires) is answered from it.
    let unkeyed = http_transport::post(&service, 4, params.clone(), None).await;
    assert_eq!(unkeyed["result"]["_meta"][DEDUPLICATED_META], false);
    let resent = http_transport::post(&service, 5, params, None).await;
    assert_eq!(resent["result"]["_meta"][DEDUPLICATED_META], true);
    assert_eq!(ledger.charges(), 3);
}

#[tokio::test]
async fn one_users_key_or_repeat_never_answers_another_users_call() {
    let ledger = Ledger::default();
    // Who is calling, as the authenticating proxy in front says.
    let server = server(&ledger).principal(|context| {
        let parts = context.extensions.get::<http::request::Parts>()?;
        Some(parts.headers.get("x-user")?.to_str().ok()?.to_owned())
    });
    let service = http_transport::service_of(server);
    let params = json!({"name": "charge_card", "arguments": {"customer": "cus_17", "cents": 4900}});
    let as_user = |user: &'static str, key: Option<&'static str>| {
        let mut headers = vec![("x-user", user)];
        headers.extend(key.map(|k| ("Idempotency-Key", k)));
        headers
    };

    // The same key from two users: two charges, each answered its own.
    let ada =
        http_transport::post_with(&service, 1, params.clone(), &as_user("ada", Some("k-1"))).await;
    let bob =
        http_transport::post_with(&service, 2, params.clone(), &as_user("bob", Some("k-1"))).await;
    assert_eq!(bob["result"]["_meta"][DEDUPLICATED_META], false, "{bob}");
    assert_ne!(
        bob["result"]["structuredContent"],
        ada["result"]["structuredContent"]
    );
    assert_eq!(ledger.charges(), 2);
    // Each user's retry is theirs.
    let ada_again =
        http_transport::post_with(&service, 3, params.clone(), &as_user("ada", Some("k-1"))).await;
    assert_eq!(
        ada_again["result"]["structuredContent"],
        ada["result"]["structuredContent"]
    );

    // The same unkeyed call from two users: two charges too.
    http_transport::post_with(&service, 4, params.clone(), &as_user("ada", None)).await;
    let bob_unkeyed =
        http_transport::post_with(&service, 5, params.clone(), &as_user("bob", None)).await;
    assert_eq!(bob_unkeyed["result"]["_meta"][DEDUPLICATED_META], false);
    assert_eq!(ledger.charges(), 4);
    let ada_repeat = http_transport::post_with(&service, 6, params, &as_user("ada", None)).await;
    assert_eq!(ada_repeat["result"]["_meta"][DEDUPLICATED_META], true);
    assert_eq!(ledger.charges(), 4);
}
