//! Where the key of one `tools/call` comes from, in the documented order.
//!
//! 1. `_meta` [`IDEMPOTENCY_KEY_META`]: the client's key.
//! 2. The HTTP [`IDEMPOTENCY_KEY_HEADER`] header, on the streamable HTTP
//!    transport (rmcp puts the request's `http::request::Parts` in the
//!    request context's extensions).
//! 3. `_meta` [`RUN_ID_META`] and [`STEP_META`]: the run and step, which
//!    the executor hashes with the tool's name and arguments.
//! 4. Nothing here: the tool's own derivation (natural or custom key)
//!    decides, and a write with the default derivation is refused.
//!
//! The JSON-RPC request id and the progress token are never read: both
//! are new on every retry, so a key made of them would deduplicate nothing.
//!
//! 1 and 2 become the call's call id (the `call` source of `docs/keys.md`),
//! 3 its run context (the `step` source); the executor derives the key, so
//! the key is namespaced and versioned as on every other route.

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

/// What one call is keyed by, before the executor derives the key.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Keying {
    /// From `_meta` or the header: the executor's call id.
    pub(crate) call_id: Option<String>,
    /// From `_meta` run id and step.
    pub(crate) run: Option<(String, u64)>,
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
            run: None,
        });
    }
    if let Some(parts) = http {
        if let Some(key) = header_key(&parts.headers)? {
            return Ok(Keying {
                call_id: Some(key),
                run: None,
            });
        }
    }
    match (meta.get(RUN_ID_META), meta.get(STEP_META)) {
        (None, None) => Ok(Keying::default()),
        (Some(Value::String(run_id)), Some(step)) => match step.as_u64() {
            Some(step) => Ok(Keying {
                call_id: None,
                run: Some((run_id.clone(), step)),
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

/// "a string", "a number", … for messages.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
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
