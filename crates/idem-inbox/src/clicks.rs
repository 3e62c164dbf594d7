//! Approve where you are told: the Approve and Deny buttons of the Slack
//! messages (`notify::body`) come back as Slack's interactivity request,
//! `POST /slack/actions` (form-encoded `payload=` JSON), and decide in
//! place.
//!
//! In this order, each step refusing with nothing decided: the request
//! is Slack's and new (`slack::verify`: signature, five-minute window, no
//! replay — before anything else is read, and before any store work);
//! the Slack user who clicked is an approver of the approvers file
//! (`slack = "U…"`); the button names a record that still has the
//! arguments it was shown with (the button carries the key and the
//! digest of the arguments' fingerprint). Then the decision is made as
//! that approver through the same path as the page and the API
//! (`decide`), so the rules — required approvals, no self-approval, who
//! may decide, conditions — apply to the person who clicked; and the
//! message is replaced by the outcome through the payload's
//! `response_url` (`slack::reply`: Slack's hooks only).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use idem_runtime::key::IdempotencyKey;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::decide::{self, Decision, Refused};
use crate::notify::body::{arguments_digest, slack_message, APPROVE, DENY};
use crate::notify::event::decided_now;
use crate::quiet::refused;
use crate::slack::reply;
use crate::slack::verify::Unverified;
use crate::slack::Slack;
use crate::state::App;
use crate::view::Seen;
use idem_runtime::store::StoreExt;

/// The parts of Slack's `block_actions` payload read.
#[derive(Debug, Deserialize)]
struct Payload {
    #[serde(rename = "type")]
    kind: String,
    user: SlackUser,
    #[serde(default)]
    actions: Vec<Action>,
    #[serde(default)]
    response_url: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SlackUser {
    id: String,
}

#[derive(Debug, Deserialize)]
struct Action {
    action_id: String,
    #[serde(default)]
    value: Option<String>,
}

/// The form Slack posts.
#[derive(Debug, Deserialize)]
struct Form {
    payload: String,
}

fn answer(status: StatusCode, value: Value) -> Response {
    (status, axum::Json(value)).into_response()
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    answer(
        status,
        json!({ "error": { "code": code, "message": message } }),
    )
}

/// `POST /slack/actions`: a click on a Slack message's button.
pub(crate) async fn actions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(slack) = &app.slack else {
        return error(
            StatusCode::NOT_FOUND,
            "not_found",
            "Slack's buttons are not set up here (idem serve --slack-signing-secret-file).",
        );
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if let Err(why) = slack.verifier.check(&headers, &body, now) {
        refused!(app.refusals, why = ?why, "refused a Slack request");
        let status = match why {
            Unverified::Replayed => StatusCode::CONFLICT,
            Unverified::Busy => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::UNAUTHORIZED,
        };
        return error(status, "unverified", why.message());
    }
    let payload = serde_urlencoded::from_bytes::<Form>(&body)
        .ok()
        .and_then(|form| serde_json::from_str::<Payload>(&form.payload).ok());
    let Some(payload) = payload.filter(|p| p.kind == "block_actions") else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid",
            "Expected Slack's block_actions payload. Nothing was changed.",
        );
    };
    let Some((action, value)) = payload.actions.iter().find_map(|a| {
        let act = match a.action_id.as_str() {
            APPROVE => Act::Approve,
            DENY => Act::Deny,
            _ => return None,
        };
        Some((act, a.value.clone().unwrap_or_default()))
    }) else {
        // The link button's click comes here too: nothing to do.
        return answer(StatusCode::OK, json!({ "done": "nothing" }));
    };
    let reply_to = payload
        .response_url
        .as_deref()
        .and_then(|url| slack.replies.allows(url));
    let outcome = decide_clicked(&app, slack, &payload.user.id, action, &value).await;
    match outcome {
        Ok((done, by, message)) => {
            if let Some(uri) = reply_to {
                tokio::spawn(reply::post(slack.client.clone(), uri, message));
            }
            answer(StatusCode::OK, json!({ "done": done, "by": by }))
        }
        Err(refusal) => {
            let said = refusal.message();
            if let Some(uri) = reply_to {
                // Only the person who clicked sees why; the message stays.
                let ephemeral = json!({
                    "response_type": "ephemeral",
                    "replace_original": false,
                    "text": crate::notify::body::mrkdwn(&said),
                });
                tokio::spawn(reply::post(slack.client.clone(), uri, ephemeral));
            }
            error(refusal.status(), refusal.code(), &said)
        }
    }
}

/// Approve or Deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    Approve,
    Deny,
}

/// Why a click decided nothing.
enum Refusal {
    /// The Slack user is no approver of the file.
    Unknown(String),
    /// The button's value is not a key and a digest.
    Malformed,
    /// The record's arguments are not the ones the button was shown with.
    OtherArguments,
    /// What the page and the API refuse.
    Decide(Refused),
}

impl Refusal {
    fn status(&self) -> StatusCode {
        match self {
            Refusal::Unknown(_) => StatusCode::FORBIDDEN,
            Refusal::Malformed => StatusCode::BAD_REQUEST,
            Refusal::OtherArguments => StatusCode::CONFLICT,
            Refusal::Decide(refused) => refused.status(),
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Refusal::Unknown(_) => "unknown_slack_user",
            Refusal::Malformed => "invalid",
            Refusal::OtherArguments => "other_arguments",
            Refusal::Decide(refused) => refused.code(),
        }
    }

    fn message(&self) -> String {
        match self {
            Refusal::Unknown(id) => format!(
                "Your Slack account ({}) is not linked to an approver: an approvers file entry needs slack = \"{}\". Nothing was changed.",
                crate::view::shown(id),
                crate::view::shown(id)
            ),
            Refusal::Malformed => "The button names no record. Nothing was changed.".to_owned(),
            Refusal::OtherArguments => "The call under this key has other arguments than the message showed. Nothing was changed; open it in the inbox.".to_owned(),
            Refusal::Decide(refused) => refused.message(),
        }
    }
}

/// Decide what `user` clicked: what was done, by whom, and the message
/// that replaces the one clicked.
async fn decide_clicked(
    app: &App,
    slack: &Slack,
    user: &str,
    act: Act,
    value: &str,
) -> Result<(String, String, Value), Refusal> {
    let approvers = app.approvers();
    let who = approvers
        .slack_user(user)
        .ok_or_else(|| Refusal::Unknown(user.to_owned()))?;
    let (key, digest) = value.split_once(':').ok_or(Refusal::Malformed)?;
    let key = IdempotencyKey::parse(key).map_err(|_| Refusal::Malformed)?;
    let record = app
        .operator
        .store()
        .get(&key)
        .await
        .map_err(|e| Refusal::Decide(decide::store(e)))?
        .ok_or_else(|| {
            Refusal::Decide(Refused::NotApplicable(
                "There is no record under this key now (released, deleted or expired).".into(),
            ))
        })?;
    if arguments_digest(record.fingerprint.as_str()) != digest {
        return Err(Refusal::OtherArguments);
    }
    let decision = match act {
        Act::Approve => Decision::Approve {
            note: Some(format!("in Slack, as {user}")),
        },
        Act::Deny => Decision::Deny {
            reason: format!("Denied in Slack by {}.", who.name),
        },
    };
    let record = decide::current(&app.operator, &key, &Seen::of(&record), &decision)
        .await
        .map_err(Refusal::Decide)?;
    let decided = decide::decide(&app.operator, approvers.rules(), &record, &decision, &who)
        .await
        .map_err(Refusal::Decide)?;
    let after = decided.record.as_ref().unwrap_or(&record);
    let state = match (act, decided.approvals) {
        (Act::Deny, _) => "denied",
        (Act::Approve, Some((given, required))) if given < required => "approval_added",
        (Act::Approve, _) => "approved",
    };
    let reason = match &decision {
        Decision::Deny { reason } => Some(reason.clone()),
        _ => None,
    };
    let at = app
        .operator
        .store()
        .now()
        .await
        .unwrap_or(record.created_at);
    let event = decided_now(after, state, &who.name, reason, at, Some(approvers.rules()));
    let link = format!("{}/records/{}", slack.inbox, event.key);
    let mut message = slack_message(&event, &link, true);
    message["replace_original"] = json!(true);
    Ok((decided.done, who.name, message))
}
