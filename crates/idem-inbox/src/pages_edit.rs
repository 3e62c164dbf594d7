//! `POST /records/{key}/edit`: the record page's edit, then approve. The
//! person types the arguments the call runs with instead; the
//! confirmation restates both argument sets, escaped; once confirmed,
//! [`Operator::edit_record`] makes the edited call, with this approval,
//! and denies the call as made. The page then shows the edited call.
//!
//! [`Operator::edit_record`]: idem_runtime::operator::Operator::edit_record

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use idem_runtime::approval::Approval;
use idem_runtime::dispatch::Arguments;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::operator::Approving;
use serde_json::Value;

use super::{html, record_page, render, ConfirmPage, Shown, UserView};
use crate::api::edit_refused;
use crate::decide::{self, Asked, Decision, FormFields, Refused};
use crate::state::{App, User};
use crate::view::{arguments_in_words, shown};

/// Confirm the edit, or make it once confirmed; refused: the record's
/// page says why, with what the person typed still in its fields.
pub(super) async fn edit(
    app: &App,
    user: &User,
    key: IdempotencyKey,
    form: FormFields,
) -> Response {
    let typed = Shown::of(&form.asked);
    match confirmed(app, user, &key, form, &typed).await {
        Ok(response) => response,
        Err(refused) => {
            let (status, error) = (refused.status(), Some(refused.message()));
            record_page(app, user, &key, status, None, error, typed).await
        }
    }
}

async fn confirmed(
    app: &App,
    user: &User,
    key: &IdempotencyKey,
    form: FormFields,
    typed: &Shown,
) -> Result<Response, Refused> {
    let is_confirmed = form.confirmed.as_deref() == Some("yes");
    let text = match &form.asked.arguments {
        Some(Value::String(text)) if !text.trim().is_empty() => text.clone(),
        _ => {
            return Err(Refused::Invalid(
                "An edit needs the arguments the call runs with instead, as a JSON object. Nothing was changed.".into(),
            ))
        }
    };
    // What the edited arguments read as, for the confirmation; the
    // operator checks them whole (an object, the size, the same as the
    // call's) when the edit is made.
    let after: Value = serde_json::from_str(&text).map_err(|e| {
        Refused::Invalid(format!(
            "The arguments are not JSON ({e}): write them as a JSON object, such as {{\"cents\": 1500}}. Nothing was changed."
        ))
    })?;
    let asked = Asked::from_form(form.asked)?;
    let note = match asked.decision("approve")? {
        Decision::Approve { note } => note,
        _ => None,
    };
    let seen = asked.seen()?;
    let decision = Decision::Approve { note: note.clone() };
    let record = decide::current(&app.operator, key, &seen, &decision).await?;
    let approvers = app.approvers();
    decide::allowed(approvers.rules(), &record, &decision, &user.identity)?;
    if !is_confirmed {
        let tool = shown(&record.tool);
        let page = ConfirmPage {
            user: Some(UserView::of(user)),
            key: key.as_str().to_owned(),
            action: "edit".into(),
            effect: format!(
                "The call as made is denied and never runs: {tool} with {}. A new call takes its place, with your approval: {tool} with exactly these arguments: {}. It runs once, at the agent's next call, when its rule needs no other approver.",
                arguments_in_words(&record),
                shown(&after.to_string()),
            ),
            csrf: user.session.csrf.clone(),
            form: typed.clone(),
        };
        return Ok(html(StatusCode::OK, render(&page), Some(user)));
    }
    let mut approval = Approval::granted_by(user.identity.name.clone());
    if let Some(note) = note {
        approval = approval.with_note(note);
    }
    let edited = app
        .operator
        .edit_record(&record, Arguments::Text(text), approval)
        .await
        .map_err(edit_refused)?;
    let new = edited.edited.record();
    let done = match &edited.edited {
        Approving::Recorded {
            given, required, ..
        } => format!(
            "Done: edited. This is the edited call, with approval {given} of {required}: it runs once another approver approves it too. The call as made was denied."
        ),
        _ => "Done: edited. This is the edited call, approved: the agent's next call runs it, once. The call as made was denied.".to_owned(),
    };
    app.sessions.notify(&user.session, new.key.as_str(), done);
    Ok(Redirect::to(&format!("/records/{}", new.key.as_str())).into_response())
}
