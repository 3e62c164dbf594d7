//! Signing in and out: the sign-in form (with its own CSRF cookie, and
//! like every post checked for coming from the inbox's own origin, so a
//! form elsewhere cannot sign a person in as someone else), the password
//! check with its throttle, and the sign-out, which ends the session on
//! the server.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use idem_runtime::text::visible;

use super::pages::{csrf_refused, html, render, UserView};
use super::session::{self, same_token};
use super::throttle::NotNow;
use super::App;

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    user: Option<UserView>,
    error: Option<String>,
    csrf: String,
    name: String,
}

/// `GET /login`.
pub(super) async fn login_form(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Ok(Some(_)) = app.page_user(&headers) {
        return Redirect::to("/").into_response();
    }
    login_page(&app, StatusCode::OK, None, "")
}

fn login_page(app: &App, status: StatusCode, error: Option<String>, name: &str) -> Response {
    let csrf = session::random_token();
    let page = LoginPage {
        user: None,
        error,
        csrf: csrf.clone(),
        name: super::view::shown(name),
    };
    let mut response = html(status, render(&page), None);
    if let Ok(cookie) = app
        .sessions
        .cookie(session::LOGIN_COOKIE, &csrf, Some(3600))
        .parse()
    {
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
}

/// `POST /login`: the CSRF token, then the throttle's turn
/// ([`super::throttle`]), then the password check off the async threads,
/// with its permit; a new session on success. Every outcome is logged
/// with the name and the address it came from.
pub(super) async fn login(
    State(app): State<Arc<App>>,
    ConnectInfo(from): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Form(fields): Form<LoginFields>,
) -> Response {
    let expected = headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(|c| session::cookie_value(c, session::LOGIN_COOKIE))
        .unwrap_or("");
    if expected.is_empty() || !same_token(expected, &fields.csrf) {
        return login_page(
            &app,
            StatusCode::FORBIDDEN,
            Some("The sign-in form expired; sign in again.".into()),
            &fields.name,
        );
    }
    // Bounded: the name is a key of the throttle's table.
    let name: String = fields.name.trim().chars().take(256).collect();
    let listed = app.approvers.has_password(&name);
    let mut turn = match app.throttle.turn(&name, listed).await {
        Ok(turn) => turn,
        Err(not_now) => {
            let (status, text) = match not_now {
                NotNow::TooMany(_) => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many sign-ins at once for this name",
                ),
                NotNow::Busy(_) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The inbox is busy checking other sign-ins",
                ),
            };
            tracing::warn!(name = %visible(&name), %from, "sign-in not checked: {text}");
            let wait = not_now.retry_after();
            let mut response = login_page(
                &app,
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
                app.approvers
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
        turn.failed();
        tracing::warn!(name = %visible(&name), %from, listed, "sign-in failed");
        return login_page(
            &app,
            StatusCode::UNAUTHORIZED,
            Some("Wrong name or password.".into()),
            &name,
        );
    };
    turn.succeeded();
    tracing::info!(name = %visible(&identity.name), %from, "signed in");
    // A new session, whatever the browser had: an id planted before
    // sign-in never becomes a signed-in one.
    if let Some(old) = app.cookie_session(&headers) {
        app.sessions.end(&old);
    }
    let (cookie, _) = app.sessions.start(&identity.name);
    let mut response = Redirect::to("/").into_response();
    for value in [
        cookie,
        app.sessions.cookie(session::LOGIN_COOKIE, "", Some(0)),
    ] {
        if let Ok(value) = value.parse() {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

/// The CSRF field of a form.
#[derive(Debug, serde::Deserialize)]
pub(super) struct CsrfOnly {
    #[serde(default)]
    csrf: String,
}

/// `POST /logout`.
pub(super) async fn logout(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Form(form): Form<CsrfOnly>,
) -> Response {
    if let Ok(Some(user)) = app.page_user(&headers) {
        if !same_token(&user.session.csrf, &form.csrf) {
            return csrf_refused(Some(&user));
        }
        app.sessions.end(&user.session);
        tracing::info!(name = %visible(&user.identity.name), "signed out");
    }
    let mut response = Redirect::to("/login").into_response();
    if let Ok(value) = app.sessions.cleared().parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}
