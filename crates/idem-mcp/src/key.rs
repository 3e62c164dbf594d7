//! Where the key of one `tools/call` comes from, in the documented order.
//!
//! 1. `_meta` [`IDEMPOTENCY_KEY_META`]: the client's key.
//! 2. The HTTP [`IDEMPOTENCY_KEY_HEADER`] header, on the streamable HTTP
//!    transport (rmcp puts the request's `http::request::Parts` in the
//!    request context's extensions).
//! 3. `_meta` [`RUN_ID_META`] and [`STEP_META`]: the run and step, which
//!    the executor hashes with the tool's name and arguments.
//! 4. What chat clients send of their own accord ([`CLIENT_FIELDS`]):
//!    Claude Code's tool-use id (a call id); VS Code's conversation and
//!    request ids, Codex's thread and turn ids (each a run).
//! 5. Nothing here: the server's policy for calls without a key decides
//!    ([`Unkeyed`](crate::Unkeyed)), or the tool's own derivation (a
//!    natural or custom key).
//!
//! The JSON-RPC request id and the progress token are never read: both
//! are new on every retry, so a key made of them would deduplicate nothing.
//!
//! 1, 2 and Claude Code's id become the call's call id (the `call` source
//! of `docs/keys.md`), 3 and the other clients' ids its run context (the
//! `step` source); the executor derives the key, so the key is namespaced
//! and versioned as on every other route.

use idem_runtime::text::json_type;
use serde_json::Value;

/// The `_meta` field of a `tools/call` request that carries its
/// idempotency key: a string, the same on every retry of one intended
/// effect and different for every new one (1 to 256 bytes).
pub const IDEMPOTENCY_KEY_META: &str = "io.idem/idempotencyKey";

/// The `_meta` field carrying the agent run's id (a string), with
/// [`STEP_META`]: the key source of a call without an idempotency key.
pub const RUN_ID_META: &str = "io.idem/runId";

/// The `_meta` field carrying the step of the run that made the call (a
/// non-negative integer), with [`RUN_ID_META`].
pub const STEP_META: &str = "io.idem/step";

/// The HTTP header read on the streamable HTTP transport (case does not
/// matter in HTTP). Its value may be bare (`Idempotency-Key: 8e03…`) or a
/// quoted string as the IETF draft writes it (`Idempotency-Key: "8e03…"`).
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// The `_meta` field in which Claude Code sends the model's tool-use id
/// (`toolu_…`): the same on a re-sent request, new for every tool use.
pub const CLAUDE_CODE_TOOL_USE_META: &str = "claudecode/toolUseId";

/// The `_meta` field in which VS Code sends the chat conversation's id.
pub const VSCODE_CONVERSATION_META: &str = "vscode.conversationId";

/// The `_meta` field in which VS Code sends the id of the chat request
/// (one turn of the conversation).
pub const VSCODE_REQUEST_META: &str = "vscode.requestId";

/// The `_meta` field in which Codex sends its turn's metadata: an object
/// (or that object as JSON text) with `thread_id` (or `session_id`) and
/// `turn_id`.
pub const CODEX_TURN_META: &str = "x-codex-turn-metadata";

/// The fields a server reads of what MCP clients send, in the order it
/// reads them. The server's capabilities list them (`experimental` →
/// `io.idem` → `keyFields`), so a client can tell which it may send.
pub const CLIENT_FIELDS: &[&str] = &[
    IDEMPOTENCY_KEY_META,
    RUN_ID_META,
    STEP_META,
    CLAUDE_CODE_TOOL_USE_META,
    VSCODE_CONVERSATION_META,
    VSCODE_REQUEST_META,
    CODEX_TURN_META,
];

/// What one call is keyed by, before the executor derives the key.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Keying {
    /// From `_meta`, the header or Claude Code: the executor's call id.
    pub(crate) call_id: Option<String>,
    /// From `_meta` run id and step, or a chat client's conversation.
    pub(crate) run: Option<(String, u64)>,
    /// Which client's own ids these are; `None` for idem's fields and the
    /// header, which a client sends because it means them as a key.
    pub(crate) client: Option<&'static str>,
}

impl Keying {
    /// Whether the call carries anything to key it by.
    pub(crate) fn is_keyed(&self) -> bool {
        self.call_id.is_some() || self.run.is_some()
    }
}

/// Read the call's key source from its `_meta` and, on HTTP, its headers.
///
/// A field that is present but unusable (a key that is not a string, a
/// run id without a step, two `Idempotency-Key` headers) is an error, not
/// a reason to fall through to the next source: the client meant to send
/// a key, and a call keyed differently from its retries is exactly what
/// idem exists to prevent.
pub(crate) fn keying(
    meta: &serde_json::Map<String, Value>,
    http: Option<&http::request::Parts>,
) -> Result<Keying, String> {
    if let Some(value) = meta.get(IDEMPOTENCY_KEY_META) {
        let Value::String(key) = value else {
            return Err(format!(
                "`_meta` field `{IDEMPOTENCY_KEY_META}` must be a string, found {}",
                json_type(value)
            ));
        };
        return Ok(Keying {
            call_id: Some(key.clone()),
            ..Keying::default()
        });
    }
    if let Some(parts) = http {
        if let Some(key) = header_key(&parts.headers)? {
            return Ok(Keying {
                call_id: Some(key),
                ..Keying::default()
            });
        }
    }
    match (meta.get(RUN_ID_META), meta.get(STEP_META)) {
        (None, None) => client_keying(meta),
        (Some(Value::String(run_id)), Some(step)) => match step.as_u64() {
            Some(step) => Ok(Keying {
                run: Some((run_id.clone(), step)),
                ..Keying::default()
            }),
            None => Err(format!(
                "`_meta` field `{STEP_META}` must be a non-negative integer, found {}",
                if step.is_number() {
                    step.to_string()
                } else {
                    json_type(step).to_owned()
                }
            )),
        },
        (Some(Value::String(_)), None) | (None, Some(_)) => Err(format!(
            "`_meta` fields `{RUN_ID_META}` and `{STEP_META}` go together: the step is part of the key"
        )),
        (Some(run_id), _) => Err(format!(
            "`_meta` field `{RUN_ID_META}` must be a string, found {}",
            json_type(run_id)
        )),
    }
}

/// What a chat client sends of its own accord: Claude Code's tool-use id,
/// VS Code's conversation and request, Codex's thread and turn. A field
/// of the wrong type is ignored rather than refused: the client did not
/// send it as a key, and the call is then keyed as if it were absent.
fn client_keying(meta: &serde_json::Map<String, Value>) -> Result<Keying, String> {
    let text = |field: &str| match meta.get(field) {
        Some(Value::String(text)) if !text.is_empty() => Some(text.as_str()),
        _ => None,
    };
    if let Some(tool_use) = text(CLAUDE_CODE_TOOL_USE_META) {
        return Ok(Keying {
            call_id: Some(tool_use.to_owned()),
            run: None,
            client: Some("Claude Code"),
        });
    }
    if let (Some(conversation), Some(request)) =
        (text(VSCODE_CONVERSATION_META), text(VSCODE_REQUEST_META))
    {
        return Ok(Keying {
            call_id: None,
            run: Some((format!("vscode:{conversation}:{request}"), 0)),
            client: Some("VS Code"),
        });
    }
    if let Some((thread, turn)) = meta.get(CODEX_TURN_META).and_then(codex_turn) {
        return Ok(Keying {
            call_id: None,
            run: Some((format!("codex:{thread}:{turn}"), 0)),
            client: Some("Codex"),
        });
    }
    Ok(Keying::default())
}

/// Codex's thread (or session) and turn, from its turn metadata: an object,
/// or the object as JSON text.
fn codex_turn(value: &Value) -> Option<(String, String)> {
    let parsed;
    let object = match value {
        Value::Object(object) => object,
        Value::String(text) => {
            parsed = serde_json::from_str::<Value>(text).ok()?;
            parsed.as_object()?
        }
        _ => return None,
    };
    let text = |field: &str| object.get(field)?.as_str().filter(|t| !t.is_empty());
    let thread = text("thread_id").or_else(|| text("session_id"))?;
    Some((thread.to_owned(), text("turn_id")?.to_owned()))
}

/// The `Idempotency-Key` header's value, unquoted.
fn header_key(headers: &http::HeaderMap) -> Result<Option<String>, String> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(format!(
            "the request has more than one `{IDEMPOTENCY_KEY_HEADER}` header; send one"
        ));
    }
    let text = value
        .to_str()
        .map_err(|_| format!("the `{IDEMPOTENCY_KEY_HEADER}` header is not visible ASCII text"))?;
    Ok(Some(unquote(text.trim()).to_owned()))
}

/// `"abc"` → `abc` (a structured-field string, as the IETF draft sends the
/// key); anything else as it is. Keys are opaque tokens, so the escapes
/// `\"` and `\\` that a structured string may hold are left alone: they
/// make a different key, never a shared one.
fn unquote(text: &str) -> &str {
    text.strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text)
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map};

    use super::*;

    fn meta(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn parts(headers: &[(&str, &str)]) -> http::request::Parts {
        let mut request = http::Request::builder();
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn the_meta_key_comes_first() {
        let m = meta(json!({IDEMPOTENCY_KEY_META: "k1", RUN_ID_META: "run", STEP_META: 2}));
        let http = parts(&[("Idempotency-Key", "from-header")]);
        let keying = keying(&m, Some(&http)).unwrap();
        assert_eq!(keying.call_id.as_deref(), Some("k1"));
        assert_eq!(keying.run, None);
    }

    #[test]
    fn the_header_comes_before_run_and_step_and_may_be_quoted() {
        let m = meta(json!({RUN_ID_META: "run", STEP_META: 2}));
        let bare = parts(&[("idempotency-key", "8e03978e")]);
        assert_eq!(
            keying(&m, Some(&bare)).unwrap().call_id.as_deref(),
            Some("8e03978e")
        );
        let quoted = parts(&[("Idempotency-Key", "\"8e03978e\"")]);
        assert_eq!(
            keying(&m, Some(&quoted)).unwrap().call_id.as_deref(),
            Some("8e03978e")
        );
    }

    #[test]
    fn run_and_step_come_last() {
        let m = meta(json!({RUN_ID_META: "run-7", STEP_META: 3, "progressToken": "p1"}));
        let keying = keying(&m, Some(&parts(&[]))).unwrap();
        assert_eq!(keying.call_id, None);
        assert_eq!(keying.run, Some(("run-7".to_owned(), 3)));
    }

    #[test]
    fn the_progress_token_is_never_a_key() {
        let m = meta(json!({"progressToken": "p1"}));
        assert_eq!(keying(&m, None).unwrap(), Keying::default());
    }

    #[test]
    fn claude_codes_tool_use_id_is_a_call_id() {
        let m = meta(json!({CLAUDE_CODE_TOOL_USE_META: "toolu_01A", "progressToken": 3}));
        let keying = keying(&m, None).unwrap();
        assert_eq!(keying.call_id.as_deref(), Some("toolu_01A"));
        assert_eq!(keying.client, Some("Claude Code"));
    }

    #[test]
    fn vscodes_conversation_and_request_are_a_run() {
        let m = meta(json!({VSCODE_CONVERSATION_META: "c-1", VSCODE_REQUEST_META: "r-9"}));
        let keying = keying(&m, None).unwrap();
        assert_eq!(keying.run, Some(("vscode:c-1:r-9".to_owned(), 0)));
        assert_eq!(keying.client, Some("VS Code"));
        // One without the other keys nothing.
        let half = meta(json!({VSCODE_CONVERSATION_META: "c-1"}));
        assert!(!keying_of(half).is_keyed());
    }

    fn keying_of(m: Map<String, Value>) -> Keying {
        keying(&m, None).unwrap()
    }

    #[test]
    fn codexs_turn_metadata_is_a_run_as_an_object_or_as_text() {
        let object = json!({"session_id": "s", "thread_id": "t-1", "turn_id": "u-2"});
        let as_object = keying_of(meta(json!({ CODEX_TURN_META: object.clone() })));
        assert_eq!(as_object.run, Some(("codex:t-1:u-2".to_owned(), 0)));
        let as_text = keying_of(meta(json!({ CODEX_TURN_META: object.to_string() })));
        assert_eq!(as_text, as_object);
        let session_only = json!({"session_id": "s", "turn_id": "u-2"});
        assert_eq!(
            keying_of(meta(json!({ CODEX_TURN_META: session_only }))).run,
            Some(("codex:s:u-2".to_owned(), 0))
        );
        assert!(!keying_of(meta(json!({ CODEX_TURN_META: "not json" }))).is_keyed());
    }

    #[test]
    fn idems_own_fields_come_before_a_clients() {
        let m = meta(json!({
            RUN_ID_META: "run", STEP_META: 1,
            CLAUDE_CODE_TOOL_USE_META: "toolu_01A",
        }));
        let keying = keying(&m, None).unwrap();
        assert_eq!(keying.run, Some(("run".to_owned(), 1)));
        assert_eq!(keying.client, None);
    }

    #[test]
    fn unusable_fields_are_errors_not_fallthroughs() {
        let cases = [
            (
                json!({IDEMPOTENCY_KEY_META: 42}),
                "must be a string, found a number",
            ),
            (json!({RUN_ID_META: "run"}), "go together"),
            (json!({STEP_META: 1}), "go together"),
            (
                json!({RUN_ID_META: "run", STEP_META: -1}),
                "non-negative integer, found -1",
            ),
            (
                json!({RUN_ID_META: "run", STEP_META: "1"}),
                "found a string",
            ),
            (json!({RUN_ID_META: 7, STEP_META: 1}), "must be a string"),
        ];
        for (m, expected) in cases {
            let error = keying(&meta(m.clone()), None).unwrap_err();
            assert!(error.contains(expected), "{m}: {error}");
        }
        let two = parts(&[("Idempotency-Key", "a"), ("Idempotency-Key", "b")]);
        let error = keying(&Map::new(), Some(&two)).unwrap_err();
        assert!(error.contains("more than one"), "{error}");
    }
}
