//! The HTML pages: sign-in, the inbox, a record's decision page, the
//! confirmation that restates a decision's effect, and messages. Templates
//! are in `idem-inbox/templates/` (askama: checked when the crate is compiled,
//! every value HTML-escaped).

use std::sync::Arc;

#[path = "pages_edit.rs"]
mod edit;

use askama::Template;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use idem_runtime::key::IdempotencyKey;

use super::cookies::same_token;
use super::decide::Refused;
use super::decide::{self, Asked, FormFields};
use super::listing::{items, InboxFilter, Listed};
use super::view::{Detail, Item, Trail, Waits};
use crate::quiet::refused;
use crate::role::Role;
use crate::state::{App, NotLetIn, NotThisBrowser, User};
use idem_runtime::store::StoreExt;

/// Who is signed in, as the page header shows it.
pub(super) struct UserView {
    pub(super) name: String,
    pub(super) role: &'static str,
    pub(super) csrf: String,
}

impl UserView {
    pub(super) fn of(user: &User) -> UserView {
        UserView {
            name: super::view::shown(&user.identity.name),
            role: user.identity.role.as_str(),
            csrf: user.session.csrf.clone(),
        }
    }
}

#[derive(Template)]
#[template(path = "inbox.html")]
struct InboxPage {
    user: Option<UserView>,
    items: Vec<Item>,
    states: Vec<(&'static str, &'static str)>,
    filter: InboxFilter,
    tools: Vec<String>,
    overdue: String,
    corrupt: usize,
    query: String,
    /// The link to the next page (older items), if there is one.
    older: Option<String>,
    /// The link to the first page, on a later page.
    newest: Option<String>,
}

#[derive(Template)]
#[template(path = "rows.html")]
struct Rows {
    items: Vec<Item>,
}

#[derive(Template)]
#[template(path = "record.html")]
struct RecordPage {
    user: Option<UserView>,
    title: String,
    key: String,
    detail: Option<Detail>,
    trail: Vec<Trail>,
    notice: Option<String>,
    error: Option<String>,
    csrf: String,
    can_decide: bool,
    form: Shown,
}

#[derive(Template)]
#[template(path = "confirm.html")]
struct ConfirmPage {
    user: Option<UserView>,
    key: String,
    action: String,
    effect: String,
    csrf: String,
    form: Shown,
}

#[derive(Template)]
#[template(path = "message.html")]
struct MessagePage {
    user: Option<UserView>,
    title: String,
    message: String,
    back: &'static str,
    back_label: &'static str,
}

/// A form's fields as they are put back in a page (re-shown after an
/// error, carried through the confirmation).
#[derive(Debug, Clone, Default)]
struct Shown {
    version: String,
    note: String,
    reason: String,
    resolution: String,
    output: String,
    ttl: String,
    /// An edit's arguments, as typed (JSON text).
    arguments: String,
}

impl Shown {
    fn of(form: &Asked<String>) -> Shown {
        Shown {
            version: form.version.clone(),
            note: form.note.clone().unwrap_or_default(),
            reason: form.reason.clone().unwrap_or_default(),
            resolution: form.resolution.clone().unwrap_or_default(),
            output: form.output.clone().unwrap_or_default(),
            ttl: form.ttl.clone().unwrap_or_default(),
            arguments: match &form.arguments {
                Some(serde_json::Value::String(text)) => text.clone(),
                _ => String::new(),
            },
        }
    }
}

/// An HTML response, with the session cookie when one was just made.
pub(super) fn html(status: StatusCode, body: String, user: Option<&User>) -> Response {
    let mut response = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response();
    if let Some(cookie) = user.and_then(|u| u.set_cookie.as_deref()) {
        if let Ok(value) = cookie.parse() {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

pub(super) fn render(template: &impl Template) -> String {
    template.render().unwrap_or_else(|e| {
        format!(
            "<p>The page could not be drawn: {}</p>",
            askama::filters::escape(e.to_string(), askama::filters::Html)
                .map(|s| s.to_string())
                .unwrap_or_default()
        )
    })
}

/// A page that says one thing.
pub(super) fn message(
    status: StatusCode,
    user: Option<&User>,
    title: &str,
    text: &str,
) -> Response {
    let page = MessagePage {
        user: user.map(UserView::of),
        title: title.to_owned(),
        message: text.to_owned(),
        back: "/",
        back_label: "Back to the inbox",
    };
    html(status, render(&page), user)
}

/// The page for a store that cannot be read or written: nothing was
/// done, and nobody is let in unchecked.
pub(crate) fn store_down(user: Option<&User>) -> Response {
    message(
        StatusCode::SERVICE_UNAVAILABLE,
        user,
        "The store cannot be reached",
        "The inbox could not read or write its store. Nothing was changed; try again in a moment.",
    )
}

fn not_listed(name: &str) -> Response {
    message(
        StatusCode::FORBIDDEN,
        None,
        "Not an approver",
        &format!(
            "{} is not in the approvers file, so it may not use the inbox.",
            super::view::shown(name)
        ),
    )
}

/// The page for a request [`NotLetIn`].
pub(crate) fn not_let_in(refused: NotLetIn) -> Response {
    match refused {
        NotLetIn::StoreDown => store_down(None),
        NotLetIn::NoProxyName => message(
            StatusCode::UNAUTHORIZED,
            None,
            "Not signed in",
            "The proxy in front of the inbox did not say who you are.",
        ),
        NotLetIn::NotListed(name) => not_listed(&name),
    }
}

/// The signed-in user, or the response to send instead (to the sign-in
/// page).
pub(super) async fn signed_in(app: &App, headers: &HeaderMap) -> Result<User, Response> {
    match app.page_user(headers).await.map_err(not_let_in)? {
        Some(user) => Ok(user),
        None => Err(Redirect::to("/login").into_response()),
    }
}

/// The signed-in user of a page only they may see: as an extractor,
/// [`signed_in`], anyone else sent to the sign-in page (or told why not).
pub(super) struct SignedIn(pub(super) User);

impl FromRequestParts<Arc<App>> for SignedIn {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<App>) -> Result<Self, Response> {
        signed_in(app, &parts.headers).await.map(SignedIn)
    }
}

/// `GET /`.
pub(super) async fn inbox(
    State(app): State<Arc<App>>,
    Query(filter): Query<InboxFilter>,
    SignedIn(user): SignedIn,
) -> Response {
    let Listed {
        items,
        corrupt,
        next,
    } = match items(&app, &filter).await {
        Ok(found) => found,
        Err(e) => {
            return message(
                e.status(),
                Some(&user),
                "The inbox could not be read",
                &e.message(),
            )
        }
    };
    let mut tools: Vec<String> = match &app.catalog {
        Some(c) => c
            .tools
            .iter()
            .map(|t| super::view::shown(&t.name))
            .collect(),
        None => items.iter().map(|i| i.tool.clone()).collect(),
    };
    tools.sort();
    tools.dedup();
    let page = InboxPage {
        user: Some(UserView::of(&user)),
        query: filter.query(),
        older: next.map(|next| format!("/{}", filter.query_after(&next))),
        newest: (!filter.after.is_empty()).then(|| format!("/{}", filter.query_after(""))),
        items,
        states: vec![
            ("all", "anything"),
            ("awaiting_approval", "an approval"),
            ("unknown", "an unknown outcome"),
            ("vanished", "a vanished worker"),
        ],
        filter: InboxFilter {
            state: match filter.state.as_str() {
                "" => "all".to_owned(),
                s => s.to_owned(),
            },
            ..filter
        },
        tools,
        overdue: crate::view::age(
            idem_runtime::clock::Timestamp(0).plus(app.overdue),
            idem_runtime::clock::Timestamp(0),
        ),
        corrupt,
    };
    html(StatusCode::OK, render(&page), Some(&user))
}

/// `GET /inbox/rows`: the inbox's rows alone, for the page to refresh.
pub(super) async fn rows(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Query(filter): Query<InboxFilter>,
) -> Response {
    let user = match signed_in(&app, &headers).await {
        Ok(user) => user,
        Err(_) => return StatusCode::UNAUTHORIZED.into_response(),
    };
    match items(&app, &filter).await {
        Ok(listed) => html(
            StatusCode::OK,
            render(&Rows {
                items: listed.items,
            }),
            Some(&user),
        ),
        Err(e) => e.status().into_response(),
    }
}

pub(super) fn csrf_refused(user: Option<&User>) -> Response {
    message(
        StatusCode::FORBIDDEN,
        user,
        "Refused",
        "The form's security token is missing or stale: open the page again and repeat. Nothing was changed.",
    )
}

/// The page for a post whose session is [`NotThisBrowser`]'s (at
/// `path`): nothing done; a planted session's cookie cleared along the
/// path, and no name shown (it is not this person's).
pub(crate) fn not_this_browser(
    app: &App,
    why: NotThisBrowser,
    path: &str,
    headers: &HeaderMap,
) -> Response {
    let (title, text) = why.words(app.plantable(headers));
    let mut response = message(StatusCode::FORBIDDEN, None, title, text);
    app.clear_planted(why, path, response.headers_mut());
    response
}

fn parse_key(given: &str) -> Option<IdempotencyKey> {
    IdempotencyKey::parse(given.trim()).ok()
}

/// The page for an address that names no record's key: `why`.
fn no_such_record(user: &User, why: &str) -> Response {
    message(StatusCode::NOT_FOUND, Some(user), "No such record", why)
}

/// `GET /records/{key}`.
pub(super) async fn record(
    State(app): State<Arc<App>>,
    Path(key): Path<String>,
    SignedIn(user): SignedIn,
) -> Response {
    let Some(key) = parse_key(&key) else {
        return no_such_record(&user, "That is not a record's key (64 hexadecimal digits).");
    };
    // Only the server's own words: nothing of the address is shown.
    let notice = app.sessions.take_notice(&user.session, key.as_str());
    record_page(
        &app,
        &user,
        &key,
        StatusCode::OK,
        notice,
        None,
        Shown::default(),
    )
    .await
}

async fn record_page(
    app: &App,
    user: &User,
    key: &IdempotencyKey,
    status: StatusCode,
    notice: Option<String>,
    error: Option<String>,
    form: Shown,
) -> Response {
    let (record, now, trail) = match decide::read(&app.operator, key).await {
        Ok(read) => read,
        Err(e) => {
            return message(
                e.status(),
                Some(user),
                "The record could not be read",
                &e.message(),
            )
        }
    };
    let trail: Vec<Trail> = trail.iter().map(|e| Trail::of(e, now)).collect();
    let detail = record.as_ref().map(|r| {
        let required = app
            .approvers()
            .rules()
            .for_record(r)
            .map(|rule| rule.required);
        Detail::of(r, app.catalog.as_ref(), now, required)
    });
    let title = detail
        .as_ref()
        .map_or("No record".to_owned(), |d| d.tool.clone());
    let form = Shown {
        version: detail
            .as_ref()
            .map(|d| d.version.clone())
            .unwrap_or_default(),
        ..form
    };
    let page = RecordPage {
        user: Some(UserView::of(user)),
        title,
        key: key.as_str().to_owned(),
        detail,
        trail,
        notice,
        error,
        csrf: user.session.csrf.clone(),
        can_decide: user.identity.role == Role::Approver,
        form,
    };
    html(status, render(&page), Some(user))
}

/// `GET /records/{key}/version`: the version of the record now, for the
/// page to tell that it changed (`gone` when there is none).
pub(super) async fn version(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Response {
    if signed_in(&app, &headers).await.is_err() {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Some(key) = parse_key(&key) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match app.operator.store().get(&key).await {
        Ok(Some(record)) => super::view::Seen::of(&record).token().into_response(),
        Ok(None) => "gone".into_response(),
        Err(e) => decide::store(e).status().into_response(),
    }
}

/// `POST /records/{key}/{approve|deny|resolve}`: first the confirmation
/// restating the effect, then (with `confirmed=yes`) the decision.
pub(super) async fn decide(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    uri: axum::http::Uri,
    Path((key, action)): Path<(String, String)>,
    Form(form): Form<FormFields>,
) -> Response {
    let user = match signed_in(&app, &headers).await {
        Ok(user) => user,
        Err(_) => {
            return message(
                StatusCode::UNAUTHORIZED,
                None,
                "Not signed in",
                "Sign in to decide. Nothing was changed.",
            )
        }
    };
    if !same_token(&user.session.csrf, &form.csrf) {
        return csrf_refused(Some(&user));
    }
    if let Err(why) = app.same_browser(&user, &form.browser, &headers) {
        let name = idem_runtime::text::visible(&user.identity.name);
        refused!(app.refusals, path = %uri.path(), %name, ?why, "refused a decision: the session is not this browser's");
        return not_this_browser(&app, why, uri.path(), &headers);
    }
    let Some(key) = parse_key(&key) else {
        return no_such_record(&user, "That is not a record's key. Nothing was changed.");
    };
    if !matches!(action.as_str(), "approve" | "deny" | "resolve" | "edit") {
        return not_found().await;
    }
    if user.identity.role != Role::Approver {
        return message(
            StatusCode::FORBIDDEN,
            Some(&user),
            "Refused",
            &Refused::Forbidden.message(),
        );
    }
    if action == "edit" {
        return edit::edit(&app, &user, key, form).await;
    }
    let key_shown = key.clone();
    match decide_confirmed(&app, &user, key, action, form).await {
        Ok(response) => response,
        Err((refused, form)) => {
            record_page(
                &app,
                &user,
                &key_shown,
                refused.status(),
                None,
                Some(refused.message()),
                form,
            )
            .await
        }
    }
}

/// The confirmation, or the decision once confirmed; refused: why, and
/// the fields to show again.
async fn decide_confirmed(
    app: &App,
    user: &User,
    key: IdempotencyKey,
    action: String,
    form: FormFields,
) -> Result<Response, (Refused, Shown)> {
    let shown = Shown::of(&form.asked);
    let confirmed = form.confirmed.as_deref() == Some("yes");
    let checked = Asked::from_form(form.asked).and_then(|asked| {
        let decision = asked.decision(&action)?;
        Ok((asked.seen()?, decision))
    });
    let (seen, decision) = checked.map_err(|refused| (refused, shown.clone()))?;
    // Refused, the record's page shows it as it is now, with what the
    // person typed still in its fields (sent only if they send it again).
    let record = decide::current(&app.operator, &key, &seen, &decision)
        .await
        .map_err(|refused| (refused, shown.clone()))?;
    // Refused by a rule before the confirmation, not after it.
    let approvers = app.approvers();
    let rules = approvers.rules();
    let allowed = decide::allowed(rules, &record, &decision, &user.identity)
        .map_err(|refused| (refused, shown.clone()))?;
    if !confirmed {
        let page = ConfirmPage {
            user: Some(UserView::of(user)),
            key: key.as_str().to_owned(),
            action,
            effect: decide::effect(&decision, &record, allowed.as_ref()),
            csrf: user.session.csrf.clone(),
            form: shown,
        };
        return Ok(html(StatusCode::OK, render(&page), Some(user)));
    }
    let decided = decide::decide(&app.operator, rules, &record, &decision, &user.identity)
        .await
        .map_err(|refused| (refused, shown))?;
    app.sessions.notify(
        &user.session,
        key.as_str(),
        format!("Done: {}.", decided.done),
    );
    Ok(Redirect::to(&format!("/records/{}", key.as_str())).into_response())
}

/// Anything else.
pub(super) async fn not_found() -> Response {
    message(
        StatusCode::NOT_FOUND,
        None,
        "Not found",
        "There is no such page.",
    )
}

/// `GET /static/inbox.css`.
pub(super) async fn css() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../static/inbox.css"),
    )
        .into_response()
}

/// `GET /static/inbox.js`.
pub(super) async fn js() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("../static/inbox.js"),
    )
        .into_response()
}
