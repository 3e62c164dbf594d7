//! The JSON API under `/api/`, for bots (a chat-ops integration, a
//! ticketing system): the same inbox, records and decisions as the pages,
//! authenticated by an API token (`Authorization: Bearer …`) or the
//! trusted proxy's header. Decisions take JSON bodies only
//! (`Content-Type: application/json`), which a page on another site cannot
//! send without the browser asking first, so no CSRF token is needed; and
//! there is no confirmation step: the bot's request is the confirmation.
//! `docs/inbox.md` documents every field.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use serde_json::{json, Value};

use super::approvers::Identity;
use super::decide::{self, Asked, Refused};
use super::listing::{items, InboxFilter};
use super::view::{class_meaning, class_of, Item, Seen};
use crate::state::App;

#[path = "api_edit.rs"]
mod edit;

pub(crate) use edit::refusal as edit_refused;
use idem_runtime::operator::json::{AuditEventJson, RecordJson};
use idem_runtime::store::StoreExt;
use idem_runtime::text::json_safe;

/// JSON with the record text's controls written as escapes
/// ([`json_safe`]), like `idem --json`.
fn json(status: StatusCode, value: &Value) -> Response {
    let text = json_safe(&value.to_string()).into_owned();
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        text,
    )
        .into_response()
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    json(
        status,
        &json!({ "error": { "code": code, "message": message } }),
    )
}

fn refused(refused: &Refused) -> Response {
    error(refused.status(), refused.code(), &refused.message())
}

/// The approver an API token names: as an extractor, a request without
/// a valid token is refused (401) before its handler runs.
pub(super) struct ApiUser(Identity);

impl FromRequestParts<Arc<App>> for ApiUser {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Response> {
        app.api_user(&parts.headers).map(ApiUser).ok_or_else(|| {
            error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Send an API token as `Authorization: Bearer TOKEN` (idem approver token NAME makes one).",
            )
        })
    }
}

fn item_json(item: &Item) -> Value {
    json!({
        "key": item.key,
        // The names themselves, which `?tool=` and `?namespace=` find;
        // `json` escapes what a screen would misread.
        "tool": item.raw_tool,
        "class": item.class,
        "namespace": Some(&item.raw_namespace).filter(|n| !n.is_empty()),
        "call_id": item.call.call_id,
        "run_id": item.call.run_id,
        "step": item.call.step,
        "reason": item.call.reason.as_ref().map(|r| r.as_str()),
        "waits_for": item.waits.as_str(),
        "waiting_since": item.since,
        "overdue": item.overdue,
        "version": item.version,
    })
}

/// `GET /api/inbox?state=&tool=&namespace=&after=`: a page of 50 items,
/// newest call first, and `next`, the `after` of the next page (`null` on
/// the last).
pub(super) async fn inbox(
    State(app): State<Arc<App>>,
    Query(filter): Query<InboxFilter>,
    _: ApiUser,
) -> Response {
    match items(&app, &filter).await {
        Ok(listed) => json(
            StatusCode::OK,
            &json!({
                "items": listed.items.iter().map(item_json).collect::<Vec<_>>(),
                "corrupt": listed.corrupt,
                "next": listed.next,
            }),
        ),
        Err(e) => refused(&e),
    }
}

fn parse_key(given: &str) -> Result<IdempotencyKey, Response> {
    IdempotencyKey::parse(given.trim()).map_err(|_| {
        error(
            StatusCode::NOT_FOUND,
            "not_found",
            "Not a record's key (64 hexadecimal digits).",
        )
    })
}

/// `GET /api/records/{key}`: the record (as `idem show --json` prints
/// it), its version, class and the tool's description, and its audit
/// trail.
pub(super) async fn record(
    State(app): State<Arc<App>>,
    Path(key): Path<String>,
    _: ApiUser,
) -> Response {
    let key = match parse_key(&key) {
        Ok(key) => key,
        Err(response) => return response,
    };
    let (record, now, trail) = match decide::read(&app.operator, &key).await {
        Ok(read) => read,
        Err(e) => return refused(&e),
    };
    let trail: Vec<Value> = trail
        .iter()
        .map(|e| serde_json::to_value(AuditEventJson::new(e)).unwrap_or(Value::Null))
        .collect();
    let Some(record) = record else {
        return json(
            StatusCode::NOT_FOUND,
            &json!({
                "error": { "code": "not_found", "message": "There is no record under this key now (released, deleted or expired); its audit trail is here." },
                "audit": trail,
            }),
        );
    };
    let class = class_of(&record, app.catalog.as_ref());
    json(
        StatusCode::OK,
        &json!({
            "record": serde_json::to_value(RecordJson::new(&record, now)).unwrap_or(Value::Null),
            "version": Seen::of(&record).token(),
            "class": class.map(|c| c.as_str()),
            "class_meaning": class.map(class_meaning),
            "description": app.catalog.as_ref().and_then(|c| c.tool(&record.tool)).map(|t| t.description.clone()),
            "audit": trail,
        }),
    )
}

/// `POST /api/records/{key}/{approve|deny|resolve|edit}` with a JSON
/// body: `version` (required) and `note`, `reason`, `as`, `output`,
/// `arguments` (edit).
pub(super) async fn decide(
    State(app): State<Arc<App>>,
    Path((key, action)): Path<(String, String)>,
    ApiUser(who): ApiUser,
    body: Result<Json<Asked>, JsonRejection>,
) -> Response {
    let key = match parse_key(&key) {
        Ok(key) => key,
        Err(response) => return response,
    };
    let Json(asked) = match body {
        Ok(body) => body,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                &format!(
                    "The body is larger than {} KiB. Nothing was changed.",
                    crate::state::MAX_BODY / 1024
                ),
            )
        }
        Err(e) => {
            return error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid",
                &format!("The body must be a JSON object sent as application/json ({}). Nothing was changed.", e.body_text()),
            )
        }
    };
    if action == "edit" {
        return edit::edit(&app, &key, asked, who).await;
    }
    if !matches!(action.as_str(), "approve" | "deny" | "resolve") {
        return not_found().await;
    }
    let checked = asked.decision(&action).and_then(|d| Ok((asked.seen()?, d)));
    let (seen, decision) = match checked {
        Ok(checked) => checked,
        Err(e) => return refused(&e),
    };
    if who.role != crate::role::Role::Approver {
        return refused(&Refused::Forbidden);
    }
    let record = match decide::current(&app.operator, &key, &seen, &decision).await {
        Ok(record) => record,
        Err(e) => return refused(&e),
    };
    let approvers = app.approvers();
    let rules = approvers.rules();
    match decide::decide(&app.operator, rules, &record, &decision, &who).await {
        Ok(decided) => {
            let now = now_or(&app, record.created_at).await;
            let approvals = decided.approvals.map(|(given, required)| {
                let by: Vec<String> = decided
                    .record
                    .iter()
                    .flat_map(|r| r.approvals())
                    .map(|g| g.approval.approver)
                    .collect();
                json!({ "given": given, "required": required, "by": by })
            });
            json(
                StatusCode::OK,
                &json!({
                    "done": decided.done,
                    "by": who.name,
                    "approvals": approvals,
                    "record": decided.record.map(|r| serde_json::to_value(RecordJson::new(&r, now)).unwrap_or(Value::Null)),
                }),
            )
        }
        Err(e) => refused(&e),
    }
}

/// The store's time, `fallback` when it cannot be read: for the records
/// an answer shows.
async fn now_or(app: &App, fallback: Timestamp) -> Timestamp {
    app.operator.store().now().await.unwrap_or(fallback)
}

/// Any other path under `/api/`: a JSON 404, as a program expects.
pub(super) async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "No such API path: see docs/inbox.md for /api/inbox and /api/records/KEY.",
    )
}
