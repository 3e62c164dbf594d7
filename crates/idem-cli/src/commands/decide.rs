//! `idem approve` and `idem deny`: a person's decision on a call awaiting
//! approval, recorded on the record with who and why, and checked against
//! the approval rules in force on the store (which the operator checks
//! again as it writes) and those of the approvers file when `--approvers`
//! names it.

use std::path::Path;

use idem_runtime::approval::{Approval, GivenApproval};
use idem_runtime::operator::{Approving, Operator};
use idem_runtime::record::Record;

use super::{find, print, refused, required, what, Output};
use crate::cli::{ApproveArgs, DenyArgs};
use crate::error::CliError;
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
    if let Some(edited) = &args.edit_args {
        if let Some(path) = &args.approvers {
            checked(path, &by, &record, Act::Approve)?;
        }
        return super::edit::approve_edited(operator, &record, edited, approval, out).await;
    }
    // The rules of the file, when given, and always those in force on the
    // store, which the operator checks again as it writes.
    let from_file = match &args.approvers {
        Some(path) => Some(checked(path, &by, &record, Act::Approve)?),
        None => None,
    };
    let in_force = match operator.rules_allow(&record, &by, Act::Approve).await {
        Ok(in_force) => in_force,
        Err(e) => return Err(refused(operator, e).await),
    };
    let given = record.approvals();
    if from_file.is_none() && in_force.is_none() && !given.is_empty() {
        // No rule to check, on a call that shows it is under one needing
        // several approvals.
        return Err(CliError::RulesNotChecked {
            key: short_key(key.as_str()).to_owned(),
            given: given.len(),
            by: visible(&names(&given)).into_owned(),
        });
    }
    let allowed = from_file.or(in_force);
    let required = allowed.as_ref().map_or(1, |a| a.required);
    let approving = match operator.add_approval(&record, approval, required).await {
        Ok(approving) => approving,
        Err(e) => return Err(refused(operator, e).await),
    };
    let line = match &approving {
        Approving::Recorded {
            record,
            given,
            required,
        } => {
            let allowed = allowed.unwrap_or_else(|| Allowed {
                rule: None,
                required: *required,
                others: "another approver".to_owned(),
            });
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
