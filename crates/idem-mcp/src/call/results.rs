//! The answers a call ends with that idem writes itself: a refusal before
//! dispatch, a cancelled request, a panicked tool, and the `_meta` every
//! result carries.

use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, MetaObject};
use serde_json::{json, Value};

use crate::answer::{self, Hints};
use crate::meta::{DEDUPLICATED_META, ERROR_META, KEY_META};
use crate::policy::REPEAT_ARGUMENT;
use idem_runtime::{ErrorCode, IdemError};

pub(super) fn result_meta(deduplicated: bool, key: Option<&str>) -> MetaObject {
    let mut meta = MetaObject::new();
    meta.insert(DEDUPLICATED_META.to_owned(), deduplicated.into());
    if let Some(key) = key {
        meta.insert(KEY_META.to_owned(), key.into());
    }
    meta
}

/// An `isError` result whose text is `text`, with the error for programs
/// (`{"code", "message", …}`) in `_meta`.
pub(super) fn error_result(
    text: String,
    error: Value,
    deduplicated: bool,
    key: Option<&str>,
) -> CallToolResult {
    let mut meta = result_meta(deduplicated, key);
    meta.insert(ERROR_META.to_owned(), error);
    CallToolResult::error(vec![ContentBlock::text(text)]).with_meta(Some(meta))
}

/// A call refused before it was dispatched.
pub(super) fn refused(text: String, code: ErrorCode, message: &str) -> CallToolResponse {
    error_result(
        text,
        json!({ "code": code, "message": message }),
        false,
        None,
    )
    .into()
}

/// The refusal of a call whose key fields (or the caller's identity, which
/// names its namespace) are unusable.
pub(super) fn bad_key_fields(name: &str, problem: &str) -> CallToolResponse {
    refused(
        answer::bad_key_fields(name, problem),
        ErrorCode::InvalidKey,
        problem,
    )
}

/// The refusal of a call whose [`REPEAT_ARGUMENT`] is not a whole number,
/// in the words of invalid arguments.
pub(super) fn bad_repeat(name: &str, value: &Value) -> CallToolResponse {
    let problem = format!("`{REPEAT_ARGUMENT}` must be a whole number from 1 (found {value})");
    let error = IdemError::InvalidArguments {
        tool: name.to_owned(),
        detail: problem.clone(),
    };
    refused(
        answer::error(name, &error, Hints::default()),
        ErrorCode::InvalidArguments,
        &problem,
    )
}

/// The answer to a request the client cancelled. rmcp does not send it
/// (MCP says a cancelled request gets no response); it is there for
/// servers that do.
pub(super) fn cancelled(name: &str) -> CallToolResult {
    error_result(
        format!(
            "The request for `{name}` was cancelled. If it had started, it goes on and its \
             outcome is recorded: call again with the same arguments to receive it."
        ),
        json!({ "code": "cancelled", "message": "the request was cancelled" }),
        false,
        None,
    )
}

/// The answer when the tool panicked. Whether its effect happened is
/// unknown; its record stays in flight and the lease decides, as if the
/// process had crashed.
pub(super) fn panicked(name: &str, error: tokio::task::JoinError) -> CallToolResult {
    error_result(
        format!(
            "`{name}` stopped without finishing, so whether it took effect is unknown. Do not \
             call it again; tell the user it needs checking."
        ),
        json!({ "code": "panicked", "message": error.to_string() }),
        false,
        None,
    )
}
