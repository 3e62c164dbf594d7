//! `idem approve` and `idem deny`: a person's decision on a call awaiting
//! approval, recorded on the record with who and why, and checked against
//! the approval rules of the approvers file when `--approvers` names it.

use std::path::Path;

use idem_runtime::approval::{Approval, GivenApproval};
use idem_runtime::operator::{Approving, Operator};
use idem_runtime::record::Record;

use super::{find, now, refused, required, Output};
use crate::cli::{ApproveArgs, DenyArgs};
use crate::error::CliError;
use crate::render::json::RecordJson;
use crate::render::short_key;
use idem_inbox::approvers::Approvers;
use idem_inbox::rules::{Act, Allowed};
use idem_inbox::Role;
use idem_runtime::text::visible;

/// `idem approve`: record the approval; the next call with the key runs
/// once it has the approvals its rule needs.
pub(super) async fn approve(
    operator: &Operator,
    args: &ApproveArgs,
    out: &Output,
) -> Result<(), CliError> {
    let by = required("--by", &args.by)?;
    let mut approval = Approval::granted_by(by.clone());
    if let Some(note) = &args.note {
        approval = approval.with_note(required("--note", note)?);
    }
    let key = find(operator, &args.key).await?;
    let record = operator.show(&key).await.map_err(CliError::from)?;
    let approving = match &args.approvers {
        Some(path) => {
            let allowed = checked(path, &by, &record, Act::Approve)?;
            operator
                .add_approval(&record, approval, allowed.required)
                .await
                .map(|approving| (approving, Some(allowed)))
        }
        None => {
            // Without the file no rule can be checked: the store's
            // operator approves as before, except a call that shows it is
            // under a rule needing several approvals.
            let given = record.approvals();
            if !given.is_empty() {
                return Err(CliError::RulesNotChecked {
                    key: short_key(key.as_str()).to_owned(),
                    given: given.len(),
                    by: visible(&names(&given)).into_owned(),
                });
            }
            operator
                .approve_record(&record, approval)
                .await
                .map(|r| (Approving::Granted(r), None))
        }
    };
    let (approving, allowed) = match approving {
        Ok(done) => done,
        Err(e) => return Err(refused(operator, e).await),
    };
    let line = match &approving {
        Approving::Recorded {
            record,
            given,
            required,
        } => {
            let allowed = allowed.expect("only a rule asks for several approvals");
            format!(
                "approval {given} of {required} recorded for {} ({}) by {} under rule “{}”: nothing runs until {} approves too (approved so far by {})\n",
                short_key(key.as_str()),
                what(record),
                visible(&by),
                visible(allowed.rule.as_deref().unwrap_or_default()),
                visible(&allowed.others),
                visible(&names(&record.approvals())),
            )
        }
        approving => {
            let record = approving.record();
            // Say what exactly was approved: only these arguments ever run
            // under the approval.
            let arguments = match &record.info.args {
                Some(args) => visible(args).into_owned(),
                None => format!("(not stored; fingerprint {})", record.fingerprint),
            };
            format!(
                "approved {} ({}) by {}: the next call with its key and exactly these arguments runs it once: {arguments}\n",
                short_key(key.as_str()),
                what(record),
                visible(&by)
            )
        }
    };
    print(operator, approving.record(), &line, out).await
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
    let record = operator.show(&key).await.map_err(CliError::from)?;
    if let Some(path) = &args.approvers {
        checked(path, &by, &record, Act::Deny)?;
    }
    let record = match operator.deny_record(&record, &by, &reason).await {
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

/// What the approvers file at `path` says of `by` making `act` on
/// `record`: refused unless `by` is an approver in it whom the rule that
/// applies lets decide.
fn checked(path: &Path, by: &str, record: &Record, act: Act) -> Result<Allowed, CliError> {
    let approvers = Approvers::load(path)?;
    match approvers.identity(by) {
        Some(identity) if identity.role == Role::Approver => {}
        _ => {
            return Err(CliError::NotAnApprover {
                name: visible(by).into_owned(),
                path: path.to_owned(),
            })
        }
    }
    Ok(approvers.rules().allows(record, by, act)?)
}

/// Who gave these approvals: `dana, erin`.
fn names(given: &[GivenApproval]) -> String {
    given
        .iter()
        .map(|g| g.approval.approver.as_str())
        .collect::<Vec<_>>()
        .join(", ")
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
