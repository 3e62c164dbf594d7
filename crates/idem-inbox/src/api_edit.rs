//! `POST /api/records/{key}/edit`: approve a call awaiting approval with
//! other arguments ([`Operator::edit_record`]): the edited call is a new
//! call with its own key, the original is denied, naming it. The body:
//! `version` (required), `arguments` (a JSON object, required), `note`.
//!
//! [`Operator::edit_record`]: idem_runtime::operator::Operator::edit_record

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use idem_runtime::approval::Approval;
use idem_runtime::dispatch::Arguments;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::operator::json::RecordJson;
use idem_runtime::operator::{Approving, OperatorError};

use super::super::approvers::Identity;
use super::super::decide::{self, Asked, Decision, Refused};
use super::{json, refused};
use crate::state::App;

/// Edit the call under `key` as `who` asked.
pub(super) async fn edit(
    app: &Arc<App>,
    key: &IdempotencyKey,
    asked: Asked,
    who: Identity,
) -> Response {
    if who.role != crate::role::Role::Approver {
        return refused(&Refused::Forbidden);
    }
    let Some(arguments) = asked.arguments.clone() else {
        return refused(&Refused::Invalid(
            "An edit needs `arguments`: the JSON object the call runs with instead. Nothing was changed.".into(),
        ));
    };
    let note = match asked.decision("approve") {
        Ok(Decision::Approve { note }) => note,
        Ok(_) => None,
        Err(e) => return refused(&e),
    };
    let seen = match asked.seen() {
        Ok(seen) => seen,
        Err(e) => return refused(&e),
    };
    let decision = Decision::Approve { note: note.clone() };
    let record = match decide::current(&app.operator, key, &seen, &decision).await {
        Ok(record) => record,
        Err(e) => return refused(&e),
    };
    let mut approval = Approval::granted_by(who.name.clone());
    if let Some(note) = note {
        approval = approval.with_note(note);
    }
    let edited = match app
        .operator
        .edit_record(&record, Arguments::Json(arguments), approval)
        .await
    {
        Ok(edited) => edited,
        Err(e) => return refused(&refusal(e)),
    };
    let now = super::now_or(app, record.created_at).await;
    let (done, approvals) = match &edited.edited {
        Approving::Recorded {
            given, required, ..
        } => (
            format!("edited; approval {given} of {required} recorded on the edited call"),
            Some(serde_json::json!({ "given": given, "required": required })),
        ),
        _ => ("edited; the edited call is approved".to_owned(), None),
    };
    let as_json = |r| serde_json::to_value(RecordJson::new(r, now)).unwrap_or_default();
    json(
        StatusCode::OK,
        &serde_json::json!({
            "done": done,
            "by": who.name,
            "approvals": approvals,
            "record": as_json(&edited.original),
            "edited": as_json(edited.edited.record()),
        }),
    )
}

/// The operator's refusal of an edit as the API and the pages say it.
pub(crate) fn refusal(e: OperatorError) -> Refused {
    let said = e.to_string();
    match e {
        OperatorError::Rule(_) => Refused::Rule(said),
        OperatorError::EditedArguments { .. } | OperatorError::NotEditable { .. } => {
            Refused::Invalid(said)
        }
        OperatorError::Changed { .. } => Refused::Changed(said),
        OperatorError::Store(_) => Refused::Store(said),
        _ => Refused::NotApplicable(said),
    }
}
