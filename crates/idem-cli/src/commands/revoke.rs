//! `idem approver revoke NAME`: end every session of an approver, on
//! every `idem serve` of the store at once (`idem_inbox::session` says how),
//! and record it in the audit log.

use idem_runtime::audit::AuditEvent;
use idem_runtime::key::CanonicalArgs;
use idem_runtime::operator::{Operator, OperatorError};
use idem_runtime::record::AuditAction;
use serde::Serialize;

use super::{required, Output};
use crate::cli::RevokeArgs;
use crate::error::CliError;
use idem_inbox::{session, signins};
use idem_runtime::store::StoreExt;

/// What `idem approver revoke --json` prints.
#[derive(Debug, Serialize)]
struct RevokedJson<'a> {
    /// Whose sessions ended.
    revoked: &'a str,
    /// Sessions started until then (RFC 3339, the store's clock) are over.
    before: String,
    /// Who revoked them.
    by: &'a str,
}

/// `idem approver revoke NAME --by OPERATOR [--reason TEXT]`.
pub(super) async fn run(
    operator: &Operator,
    args: &RevokeArgs,
    out: &Output,
) -> Result<(), CliError> {
    let name = args.name.trim();
    if name.is_empty() || name.contains(idem_runtime::text::needs_escape) {
        return Err(CliError::ApproverName);
    }
    let by = required("--by", &args.by)?;
    let store = operator.store();
    let before = session::revoke(&**store, name)
        .await
        .map_err(OperatorError::Store)?;
    let mut reason = format!("every session of {name}");
    if let Some(why) = args
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|w| !w.is_empty())
    {
        reason.push_str(": ");
        reason.push_str(why);
    }
    let event = AuditEvent {
        seq: None,
        at: before,
        by: by.clone(),
        action: AuditAction::SessionsRevoked,
        reason: Some(reason),
        key: signins::name_key(name),
        tool: signins::INBOX_TOOL.to_owned(),
        namespace: None,
        fingerprint: CanonicalArgs::from_value(&serde_json::json!({ "revoked": name }))
            .expect("an object")
            .fingerprint,
        before: None,
        after: None,
    };
    store
        .append_audit(&event)
        .await
        .map_err(OperatorError::Store)?;
    if out.json {
        return out.json(&RevokedJson {
            revoked: name,
            before: before.rfc3339(),
            by: &by,
        });
    }
    out.text(&format!(
        "ended every session of {} on every idem serve of this store (signed in until {}); \
         they may sign in again: to keep them out, remove them from the approvers file\n",
        idem_runtime::text::visible(name),
        before.rfc3339()
    ))
}
