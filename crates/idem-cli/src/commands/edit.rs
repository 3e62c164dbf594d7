//! `idem approve KEY --edit-args JSON`: approve a call awaiting approval
//! with other arguments. The edited call is a new call with its own key
//! and record, this approval one of those its rule needs; the original is
//! denied, naming it ([`Operator::edit_record`]).

use idem_runtime::approval::Approval;
use idem_runtime::dispatch::Arguments;
use idem_runtime::operator::{Approving, Operator};
use idem_runtime::record::Record;
use idem_runtime::text::visible;

use super::{print, refused, what, Output};
use crate::error::CliError;
use crate::render::short_key;

/// Edit the arguments of `record` to `edited` (JSON text) under
/// `approval`, and say what became of both calls.
pub(super) async fn approve_edited(
    operator: &Operator,
    record: &Record,
    edited: &str,
    approval: Approval,
    out: &Output,
) -> Result<(), CliError> {
    let by = approval.approver.clone();
    let done = match operator
        .edit_record(record, Arguments::Text(edited.to_owned()), approval)
        .await
    {
        Ok(done) => done,
        Err(e) => return Err(refused(operator, e).await),
    };
    let new = done.edited.record();
    let arguments = |r: &Record| visible(r.info.args.as_deref().unwrap_or_default()).into_owned();
    let decided = match &done.edited {
        Approving::Recorded {
            given, required, ..
        } => format!(
            "approval {given} of {required} recorded: it needs another approver too, then runs at the agent's next call of the original"
        ),
        _ => "approved, with exactly these arguments: it runs once, at the agent's next call of the original".to_owned(),
    };
    let line = format!(
        "edited {} ({}) by {}: denied; it never runs. The edited call is {}, {decided}\n  before: {}\n  after:  {}\n",
        short_key(record.key.as_str()),
        what(record),
        visible(&by),
        new.key,
        arguments(record),
        arguments(new),
    );
    print(operator, new, &line, out).await
}
