//! `idem approve` and `idem deny`: a person's decision on a call awaiting
//! approval, recorded on the record with who and why.

use idem_runtime::approval::Approval;
use idem_runtime::operator::Operator;
use idem_runtime::record::Record;

use super::{find, now, refused, required, Output};
use crate::cli::{ApproveArgs, DenyArgs};
use crate::error::CliError;
use crate::render::json::RecordJson;
use crate::render::short_key;
use idem_runtime::text::visible;

/// `idem approve`: record the approval; the next call with the key runs.
pub(super) async fn approve(
    operator: &Operator,
    args: &ApproveArgs,
    out: &Output,
) -> Result<(), CliError> {
    let by = required("--by", &args.by)?;
    let mut approval = Approval::granted_by(by);
    if let Some(note) = &args.note {
        approval = approval.with_note(required("--note", note)?);
    }
    let key = find(operator, &args.key).await?;
    let record = match operator.approve(&key, approval).await {
        Ok(record) => record,
        Err(e) => return Err(refused(operator, e).await),
    };
    // Say what exactly was approved: only these arguments ever run under
    // the approval.
    let arguments = match &record.info.args {
        Some(args) => visible(args).into_owned(),
        None => format!("(not stored; fingerprint {})", record.fingerprint),
    };
    let line = format!(
        "approved {} ({}) by {}: the next call with its key and exactly these arguments runs it once: {arguments}\n",
        short_key(key.as_str()),
        what(&record),
        visible(args.by.trim())
    );
    print(operator, &record, &line, out).await
}

/// `idem deny`: complete the call as denied, with the reason.
pub(super) async fn deny(
    operator: &Operator,
    args: &DenyArgs,
    out: &Output,
) -> Result<(), CliError> {
    let by = required("--by", &args.by)?;
    let reason = required("--reason", &args.reason)?;
    let key = find(operator, &args.key).await?;
    let record = match operator.deny(&key, &by, &reason).await {
        Ok(record) => record,
        Err(e) => return Err(refused(operator, e).await),
    };
    let line = format!(
        "denied {} ({}) by {}: it never runs, and every call with its key gets the reason\n",
        short_key(key.as_str()),
        what(&record),
        visible(&by),
    );
    print(operator, &record, &line, out).await
}

/// The tool and namespace of a record, to say what was acted on (escaped,
/// as all record text shown to a person).
pub(super) fn what(record: &Record) -> String {
    let what = match &record.info.namespace {
        Some(ns) => format!("{}, namespace {ns}", record.tool),
        None => record.tool.clone(),
    };
    visible(&what).into_owned()
}

/// The record as changed (`--json`), or `line`.
pub(super) async fn print(
    operator: &Operator,
    record: &Record,
    line: &str,
    out: &Output,
) -> Result<(), CliError> {
    if out.json {
        out.json(&RecordJson::new(record, now(operator).await?))
    } else {
        out.text(line)
    }
}
