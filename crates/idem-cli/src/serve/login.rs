//! Signing in and out: the sign-in form (with its own CSRF cookie, so a
//! form from another site cannot sign a person in), the password check
//! with its throttle, and the sign-out.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;

use super::pages::{csrf_refused, html, render, UserView};
use super::session::{self, same_token};
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

/// `POST /login`.
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
    if let Some(wait) = app.throttle.wait(&name, from.ip()) {
        return login_page(
            &app,
            StatusCode::TOO_MANY_REQUESTS,
            Some(format!(
                "Too many failed sign-ins for this name: wait {} s and try again.",
                wait.as_secs().max(1)
            )),
            &name,
        );
    }
    let checked = {
        let app = app.clone();
        let (name, password) = (name.clone(), fields.password);
        tokio::task::spawn_blocking(move || app.approvers.check_password(&name, &password))
            .await
            .ok()
            .flatten()
    };
    let Some(identity) = checked else {
        app.throttle.failed(&name, from.ip());
        return login_page(
            &app,
            StatusCode::UNAUTHORIZED,
            Some("Wrong name or password.".into()),
            &name,
        );
    };
    app.throttle.succeeded(&name, from.ip());
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
    }
    let mut response = Redirect::to("/login").into_response();
    if let Ok(value) = app.sessions.end().parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}
