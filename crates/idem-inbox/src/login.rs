//! Signing in and out: the sign-in form (with its own CSRF cookie, and
//! like every post checked for coming from the inbox's own origin, so a
//! form elsewhere cannot sign a person in as someone else), the password
//! check with its throttle, and the sign-out, which ends the session on
//! every instance. Each outcome is in the audit log (`signins.rs`).

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use idem_runtime::text::visible;

use super::cookies::{random_token, same_token, LOGIN};
use super::pages::{csrf_refused, html, not_this_browser, render, UserView};
use super::throttle::NotNow;
use crate::quiet::refused;
use crate::state::{App, NotThisBrowser};

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    user: Option<UserView>,
    error: Option<String>,
    csrf: String,
    name: String,
    /// Whether deciding needs the script (plain HTTP, no trusted proxy):
    /// the page says so to a browser without it.
    needs_script: bool,
}

/// `GET /login`.
pub(super) async fn login_form(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Ok(Some(_)) = app.page_user(&headers).await {
        return Redirect::to("/").into_response();
    }
    login_page(&app, &headers, StatusCode::OK, None, "")
}

fn login_page(
    app: &App,
    headers: &HeaderMap,
    status: StatusCode,
    error: Option<String>,
    name: &str,
) -> Response {
    let csrf = random_token();
    let page = LoginPage {
        user: None,
        error,
        csrf: csrf.clone(),
        name: super::view::shown(name),
        needs_script: app.plantable(headers) && app.proxy_header.is_none(),
    };
    let mut response = html(status, render(&page), None);
    if let Ok(cookie) = app.cookies.set(LOGIN, &csrf, 3600).parse() {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
}

/// The sign-in form's fields.
#[derive(Debug, serde::Deserialize)]
pub(super) struct LoginFields {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    password: String,
    /// The browser key the inbox's script made for this sign-in, if it
    /// ran: the session is bound to it ([`crate::state::App::same_browser`]).
    #[serde(default)]
    browser: String,
}

/// `POST /login`: the CSRF token, then the throttle's turn
/// ([`super::throttle`]), then the password check off the async threads,
/// with its permit; a new session on success. Every outcome is logged
/// and audited with the name and the address it came from.
pub(super) async fn login(
    State(app): State<Arc<App>>,
    ConnectInfo(from): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(fields): Form<LoginFields>,
) -> Response {
    let source = app.source(from, &headers);
    let from = app.address(from, &headers);
    let expected = app.cookies.get(&headers, LOGIN).unwrap_or("");
    if expected.is_empty() || !same_token(expected, &fields.csrf) {
        return login_page(
            &app,
            &headers,
            StatusCode::FORBIDDEN,
            Some("The sign-in form expired; sign in again.".into()),
            &fields.name,
        );
    }
    // Bounded: the name is a key of the throttle's table.
    let name: String = fields.name.trim().chars().take(256).collect();
    let listed = app.approvers().has_password(&name);
    let mut turn = match app.throttle.turn(&name, listed, &source).await {
        Ok(turn) => turn,
        Err(not_now) => {
            let (status, text) = match not_now {
                NotNow::TooMany(_) => {
                    (StatusCode::TOO_MANY_REQUESTS, "Too many sign-ins from here")
                }
                NotNow::Busy(_) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The inbox is busy checking other sign-ins",
                ),
            };
            refused!(app.refusals, name = %visible(&name), %from, "sign-in not checked: {text}");
            let why = format!("not checked: {}", text.to_lowercase());
            app.signins.failed(&name, &from, &why).await;
            let wait = not_now.retry_after();
            let mut response = login_page(
                &app,
                &headers,
                status,
                Some(format!("{text}: wait {wait} s and try again.")),
                &name,
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(wait));
            return response;
        }
    };
    let checked = match turn.unchecked() {
        // A name that is not listed, past its lane's bound: answered as a
        // wrong password, in the time a check takes.
        Some(typical) => {
            tokio::time::sleep(typical).await;
            None
        }
        None => {
            let started = std::time::Instant::now();
            let app = app.clone();
            let (name, password) = (name.clone(), fields.password);
            let mut check = turn.permit();
            let checked = tokio::task::spawn_blocking(move || {
                app.approvers()
                    .check_password(&name, &password, &mut check.scratch)
            })
            .await
            .ok()
            .flatten();
            turn.took(started.elapsed());
            checked
        }
    };
    let Some(identity) = checked else {
        // Consumes the turn: the name's next attempt need not wait for
        // the audit's write.
        turn.failed();
        refused!(app.refusals, name = %visible(&name), %from, listed, "sign-in failed");
        app.signins
            .failed(&name, &from, "wrong name or password")
            .await;
        return login_page(
            &app,
            &headers,
            StatusCode::UNAUTHORIZED,
            Some("Wrong name or password.".into()),
            &name,
        );
    };
    turn.succeeded();
    // A new session, whatever the browser had: an id planted before
    // sign-in never becomes a signed-in one, and a session it had ends.
    if let Ok(Some(old)) = app.cookie_session(&headers).await {
        let _ = app.sessions.end(&old).await;
    }
    let started = match app.sessions.start(&identity.name, &fields.browser).await {
        Ok((cookie, session)) => match app.signins.signed_in(&identity.name, &from).await {
            Ok(()) => Ok(cookie),
            // Not audited: not signed in.
            Err(e) => {
                let _ = app.sessions.end(&session).await;
                Err(e)
            }
        },
        Err(e) => Err(e),
    };
    let cookie = match started {
        Ok(cookie) => cookie,
        Err(e) => {
            tracing::warn!(name = %visible(&identity.name), %from, "sign-in not recorded: {e}");
            return super::pages::store_down(None);
        }
    };
    tracing::info!(name = %visible(&identity.name), %from, "signed in");
    let mut response = Redirect::to("/").into_response();
    for value in [cookie, app.cookies.clear(LOGIN)] {
        if let Ok(value) = value.parse() {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

/// The sign-out form's fields.
#[derive(Debug, serde::Deserialize)]
pub(super) struct SignOut {
    #[serde(default)]
    csrf: String,
    /// The browser key the inbox's script adds.
    #[serde(default)]
    browser: String,
}

/// `POST /logout`: the session ends on every instance, and the audit
/// log says so. A session that is not this browser's (a browser key
/// that is not its own: planted) is not this browser's to end: its
/// cookie is cleared here, and that is all. Without a key the session
/// ends (a browser without the script must be able to sign out).
pub(super) async fn logout(
    State(app): State<Arc<App>>,
    ConnectInfo(from): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(form): Form<SignOut>,
) -> Response {
    let from = app.address(from, &headers);
    if let Ok(Some(user)) = app.page_user(&headers).await {
        if !same_token(&user.session.csrf, &form.csrf) {
            return csrf_refused(Some(&user));
        }
        let why = app.same_browser(&user, &form.browser, &headers);
        if why == Err(NotThisBrowser::Other) {
            return not_this_browser(&app, NotThisBrowser::Other, "/logout", &headers);
        }
        let name = &user.identity.name;
        if let Err(e) = app.sessions.end(&user.session).await {
            tracing::warn!(name = %visible(name), %from, "sign-out failed: {e}");
            return super::pages::store_down(None);
        }
        if let Err(e) = app.signins.signed_out(name, &from).await {
            tracing::warn!(name = %visible(name), %from, "a sign-out was not audited: {e}");
        }
        tracing::info!(name = %visible(name), %from, "signed out");
    }
    let mut response = Redirect::to("/login").into_response();
    if let Ok(value) = app.sessions.cleared().parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// The header the inbox's script sends this browser's key in when it
/// asks [`browser`] whether the page's session is this browser's.
pub(super) const BROWSER_HEADER: &str = "idem-browser";

/// `GET /session/browser`, asked by the inbox's script as a page loads,
/// with this browser's key in [`BROWSER_HEADER`]: 204 when the page's
/// session may decide from this browser; else 403 and the text to show
/// (a planted session's cookie cleared, as a decision would), so that a
/// page drawn for someone else's session says so before anyone clicks.
/// 401 when not signed in. Nothing else is read or changed.
pub(super) async fn browser(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let user = match app.page_user(&headers).await {
        Ok(Some(user)) => user,
        Ok(None) => return StatusCode::UNAUTHORIZED.into_response(),
        Err(refused) => return super::pages::not_let_in(refused),
    };
    let key = headers
        .get(BROWSER_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Err(why) = app.same_browser(&user, key, &headers) else {
        return StatusCode::NO_CONTENT.into_response();
    };
    let text = match why {
        // The script asked, so it runs: what it lacks is a kept key.
        NotThisBrowser::Missing => {
            "Decisions from this page would be refused: this browser keeps no key for its \
             session (the session was started before the inbox kept one, or this browser's \
             site data was cleared or is not kept). Sign out and sign in again."
        }
        NotThisBrowser::Other => why.words(true).1,
    };
    let mut response = (StatusCode::FORBIDDEN, text).into_response();
    app.clear_planted(why, "/", response.headers_mut());
    response
}
