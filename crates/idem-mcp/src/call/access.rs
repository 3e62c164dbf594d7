//! The access line of each `tools/call` (target `idem::access`, level
//! INFO): who called which tool, with which key and class, how it ended,
//! whether it was answered from a record, and how long it took. Written
//! once the call is answered; its fields never hold arguments, results or
//! credentials.

use std::sync::Arc;

use rmcp::model::{CallToolResponse, MetaObject};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::Tools;
use crate::flight::{Caller, Entry};
use crate::meta::{CLASS_META, DEDUPLICATED_META, ERROR_META, KEY_META};

impl<S: Send + Sync + 'static> Tools<S> {
    /// Count the call of `name` as under way ([`crate::CallsInFlight`]),
    /// with who calls and the tool's class for its access line; refused
    /// once the server stops taking calls.
    pub(super) fn enter(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Arc<Entry>, ErrorData> {
        let class = self
            .get(name)
            .and_then(|tool| tool.meta.as_ref())
            .and_then(|meta| meta.get(CLASS_META))
            .and_then(Value::as_str)
            .unwrap_or("-");
        let caller = Caller {
            principal: self.principal.as_ref().and_then(|f| f(context)),
            class: class.to_owned(),
        };
        self.in_flight.enter(name, caller)
    }
}

/// Write the access line of `entry`'s call, answered `response`.
pub(crate) fn log(entry: &Entry, response: &Result<CallToolResponse, ErrorData>) {
    let (outcome, meta) = match response {
        Ok(CallToolResponse::Complete(result)) => {
            let outcome = match result.is_error {
                Some(true) => error_code(result.meta.as_ref()).unwrap_or("tool_error"),
                _ => "ok",
            };
            (outcome, result.meta.as_ref())
        }
        Ok(_) => ("task", None),
        Err(_) => ("refused", None),
    };
    let key = meta.and_then(|m| m.get(KEY_META)).and_then(Value::as_str);
    let deduplicated = meta
        .and_then(|m| m.get(DEDUPLICATED_META))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let called = entry.call();
    tracing::info!(
        target: "idem::access",
        principal = called.caller.principal.as_deref().unwrap_or("-"),
        tool = %idem_runtime::text::visible(&called.tool),
        key = key.unwrap_or("-"),
        class = %called.caller.class,
        outcome,
        deduplicated,
        ms = called.since.elapsed().as_millis() as u64,
        "call"
    );
}

/// The `code` of a result's `io.idem/error`.
fn error_code(meta: Option<&MetaObject>) -> Option<&str> {
    meta?.get(ERROR_META)?.get("code")?.as_str()
}
