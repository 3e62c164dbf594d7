//! `GET /deliveries`: the webhook delivery log, for approvers (a viewer
//! may look at records, not at where the inbox sends them). Every value
//! is escaped: record text through `view::shown`, HTML by the template.

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::notify::log::{Happened, Totals};
use super::pages::{self, SignedIn, UserView};
use super::view::shown;
use crate::role::Role;
use crate::state::App;

/// One line, as shown.
struct Row {
    at: String,
    endpoint: String,
    kind: &'static str,
    event: String,
    tool: String,
    key: String,
    short: String,
    result: String,
    class: &'static str,
}

#[derive(Template)]
#[template(path = "deliveries.html")]
struct DeliveriesPage {
    user: Option<UserView>,
    endpoints: Vec<String>,
    lines: Vec<Row>,
    totals: Totals,
}

/// `GET /deliveries`.
pub(super) async fn page(State(app): State<Arc<App>>, SignedIn(user): SignedIn) -> Response {
    if user.identity.role != Role::Approver {
        return pages::message(
            StatusCode::FORBIDDEN,
            Some(&user),
            "Approvers only",
            "The delivery log is for approvers; a viewer may look at the inbox and its records.",
        );
    }
    let (lines, totals) = app.deliveries.read();
    let lines = lines
        .into_iter()
        .map(|line| {
            let (result, class) = match &line.happened {
                Happened::Delivered { status, attempt } => {
                    (format!("delivered: {status} on attempt {attempt}"), "ok")
                }
                Happened::Retrying { attempt, error } => (
                    format!("attempt {attempt} failed ({}); trying again", shown(error)),
                    "retrying",
                ),
                Happened::Failed { attempt, error } => (
                    format!("given up after {attempt} attempt(s): {}", shown(error)),
                    "failed",
                ),
            };
            let again = match line.again {
                true => " (taken over from an instance that stopped mid-delivery)",
                false => "",
            };
            Row {
                at: line.at.rfc3339(),
                endpoint: shown(&line.endpoint),
                kind: line.kind,
                event: line.event,
                tool: shown(&line.tool),
                short: line.key.chars().take(12).collect(),
                key: line.key,
                result: format!("{result}{again}"),
                class,
            }
        })
        .collect();
    let page = DeliveriesPage {
        user: Some(UserView::of(&user)),
        endpoints: app.endpoints.clone(),
        lines,
        totals,
    };
    pages::html(StatusCode::OK, pages::render(&page), Some(&user))
}
