//! The names idem gives its fields in MCP messages: in the server's
//! capabilities, in `tools/list`, in a request's `_meta` beyond its key
//! (the key's fields are in `key.rs`), and in a result's `_meta`.

use idem_runtime::record::Reason;
use idem_runtime::text::json_type;
use serde_json::Value;

/// The server's entry in its capabilities' `experimental` map: the `_meta`
/// fields it reads a key from (`keyFields`), the header (`keyHeader`), and
/// what it does with a write that has none (`unkeyed`: `window`, with
/// `windowSeconds`, or `refuse`), and the field it reads a call's reason
/// from (`reasonField`).
pub const CAPABILITY: &str = "io.idem";

/// The `_meta` field of a listed tool that names its class
/// (`non_idempotent_write`, …).
pub const CLASS_META: &str = "io.idem/class";

/// The `_meta` field of a listed tool that says how its calls are keyed
/// when they carry no key of idem's: `none` (a read), `natural` or
/// `custom` (by the tool), `window` (the same arguments within
/// [`WINDOW_SECONDS_META`] are one effect, until a call with other
/// arguments) or `key-required` (refused without a key).
pub const KEYING_META: &str = "io.idem/keying";

/// The `_meta` field of a listed tool keyed by a window: its length in
/// seconds.
pub const WINDOW_SECONDS_META: &str = "io.idem/windowSeconds";

/// The `_meta` field of a listed tool that has the optional argument that
/// marks a deliberate repeat: its name ([`REPEAT_ARGUMENT`](crate::REPEAT_ARGUMENT)).
pub const REPEAT_ARGUMENT_META: &str = "io.idem/repeatArgument";

/// The `_meta` field of an error result with the error for programs:
/// `{"code", "message", …}` (the text content is written for the model).
pub const ERROR_META: &str = "io.idem/error";

/// The `_meta` field of a `tools/call` result that says whether the answer
/// is an earlier call's recorded result (`true`) or this call's (`false`):
/// for tracing, since the content is the same either way.
pub const DEDUPLICATED_META: &str = "io.idem/deduplicated";

/// The `_meta` field of a successful `tools/call` result that holds the
/// idempotency key the call is recorded under (64 hex digits), to find
/// its record. Absent for reads, which are not recorded.
pub const KEY_META: &str = "io.idem/key";

/// The `_meta` field of a `tools/call` request that says why the call is
/// made, in the caller's words: a string, typically the model's own text
/// that led to the call. It is recorded with the call (by the claim that
/// creates its record) and shown, escaped, to whoever decides on it: on
/// the inbox's row and record page, by `idem show`, in an approval asked
/// in the chat. Never part of the key; cut beyond
/// [`Reason::MAX_BYTES`].
pub const REASON_META: &str = "io.idem/reason";

/// The call's reason from its `_meta` ([`REASON_META`]): `None` when absent
/// or blank; an error when it is not a string, like every unusable field
/// of idem's (the client meant to send one).
pub(crate) fn reason(meta: &serde_json::Map<String, Value>) -> Result<Option<Reason>, String> {
    match meta.get(REASON_META) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Reason::new(text.as_str())),
        Some(other) => Err(format!(
            "`_meta` field `{REASON_META}` must be a string, found {}",
            json_type(other)
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_reason_is_a_string_or_nothing() {
        let meta = |v: Value| v.as_object().unwrap().clone();
        let given = reason(&meta(json!({ REASON_META: "the user asked" }))).unwrap();
        assert_eq!(given.unwrap().as_str(), "the user asked");
        assert_eq!(reason(&meta(json!({}))).unwrap(), None);
        assert_eq!(reason(&meta(json!({ REASON_META: " " }))).unwrap(), None);
        let error = reason(&meta(json!({ REASON_META: 7 }))).unwrap_err();
        assert!(
            error.contains("must be a string, found a number"),
            "{error}"
        );
    }
}
