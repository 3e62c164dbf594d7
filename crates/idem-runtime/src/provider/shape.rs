//! What the providers' message shapes share.
//!
//! The shapes differ in where the calls are and what they are called, not
//! in what a call is: a name, an id and arguments. What they share (a list
//! that must be an array, an item that must have a string field, arguments
//! sent as text or as JSON) is written once, here.

use serde_json::Value;

use crate::dispatch::call::{Arguments, DispatchError};
use crate::text::json_type;

/// One provider's shape: its name in errors and the list holding its calls.
pub(super) struct Shape {
    /// `"OpenAI"`, `"Anthropic"`, `"OpenAI Responses"`, `"genai"`.
    pub(super) provider: &'static str,
    /// The list the calls are items of: `tool_calls`, `content`, `output`.
    pub(super) list: &'static str,
}

impl Shape {
    /// The whole message is wrong.
    pub(super) fn malformed(&self, detail: impl Into<String>) -> DispatchError {
        DispatchError::Malformed {
            provider: self.provider,
            detail: detail.into(),
        }
    }

    /// Item `index` of the list is wrong; `what` follows `list[index]`.
    pub(super) fn item_error(&self, index: usize, what: impl std::fmt::Display) -> DispatchError {
        DispatchError::MalformedItem {
            provider: self.provider,
            index,
            detail: format!("{}[{index}]{what}", self.list),
        }
    }

    /// The list in `message`: `message` itself when it is an array, else
    /// its field named after the list, which must be there.
    pub(super) fn list_in<'v>(&self, message: &'v Value) -> Result<&'v Value, DispatchError> {
        if message.is_array() {
            return Ok(message);
        }
        message
            .get(self.list)
            .ok_or_else(|| self.malformed(format!("no `{}`", self.list)))
    }

    /// The list itself, which must be an array.
    pub(super) fn items<'v>(&self, list: &'v Value) -> Result<&'v [Value], DispatchError> {
        list.as_array().map(Vec::as_slice).ok_or_else(|| {
            self.malformed(format!(
                "`{}` is {}, not an array",
                self.list,
                json_type(list)
            ))
        })
    }

    /// The string `field` of `object`, part of item `index`; `at` names
    /// the part (`".function"`, `" (tool_use)"`) in the error.
    pub(super) fn required<'v>(
        &self,
        index: usize,
        at: &str,
        object: &'v Value,
        field: &str,
    ) -> Result<&'v str, DispatchError> {
        object
            .get(field)
            .and_then(Value::as_str)
            .ok_or_else(|| self.item_error(index, format_args!("{at} has no string `{field}`")))
    }
}

/// The optional string `field` of `object`.
pub(super) fn optional(object: &Value, field: &str) -> Option<String> {
    object.get(field).and_then(Value::as_str).map(str::to_owned)
}

/// Arguments sent as a JSON string (OpenAI), or, from compatible servers,
/// as the JSON itself; absent arguments are the empty text (no arguments).
pub(super) fn arguments(value: Option<&Value>) -> Arguments {
    match value {
        Some(Value::String(text)) => Arguments::Text(text.clone()),
        Some(other) => Arguments::Json(other.clone()),
        None => Arguments::Text(String::new()),
    }
}
