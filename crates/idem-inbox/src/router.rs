//! The routes, and what every response passes through: requests only
//! for the names the inbox is served under, posts only from the inbox's
//! own origin, no request with a cookie planted beside the
//! inbox's own, and the headers that keep pages from being
//! framed, cached or mixed with another site's scripts.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{any, get, post};
use axum::Router;

use crate::quiet::refused;
use crate::state::{App, MAX_BODY};
use crate::{api, clicks, cookies, deliveries, live, login, pages};

/// The routes.
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(pages::inbox))
        .route("/inbox/rows", get(pages::rows))
        .route("/login", get(login::login_form).post(login::login))
        .route("/logout", post(login::logout))
        .route("/session/browser", get(login::browser))
        .route("/records/{key}", get(pages::record))
        .route("/records/{key}/version", get(pages::version))
        .route("/records/{key}/{action}", post(pages::decide))
        .route("/events", get(live::events))
        .route("/deliveries", get(deliveries::page))
        .route("/static/inbox.css", get(pages::css))
        .route("/static/inbox.js", get(pages::js))
        .route("/api/inbox", get(api::inbox))
        .route("/api/records/{key}", get(api::record))
        .route("/api/records/{key}/{action}", post(api::decide))
        .route("/api/{*rest}", any(api::not_found))
        .route("/slack/actions", post(clicks::actions))
        .fallback(pages::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            own_origin,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            one_cookie_each,
        ))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            known_host,
        ))
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(app)
}

/// Every post must come from the inbox's own pages (or from a program):
/// see [`cookies::same_origin`].
async fn own_origin(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if cookies::same_origin(request.method(), request.headers(), app.origin.as_deref()) {
        return next.run(request).await;
    }
    refused!(
        app.refusals,
        path = %request.uri().path(),
        origin = ?request.headers().get(header::ORIGIN),
        "refused a post from another origin"
    );
    pages::message(
        StatusCode::FORBIDDEN,
        None,
        "Refused",
        "This form was sent from a page that is not the inbox's own. Nothing was changed.",
    )
}

/// A request is answered only under the names the inbox is served
/// under ([`idem_net::hosts`]): a page that rebinds its own name to the
/// inbox's address gets 403 before any cookie, header or form is read,
/// the trusted proxy's header included. The probes (`/healthz`,
/// `/readyz`) are routed outside this check: a balancer may probe by
/// address.
async fn known_host(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    // HTTP/2 names the host in the URI (`:authority`), not in `Host`.
    let host = match request.headers().get(header::HOST) {
        Some(value) => value.to_str().ok(),
        None => request.uri().authority().map(|a| a.as_str()),
    };
    if app.hosts.allows(host) {
        return next.run(request).await;
    }
    refused!(
        app.refusals,
        path = %request.uri().path(),
        host = ?request.headers().get(header::HOST),
        "refused a request for a name the inbox is not served under"
    );
    pages::message(
        StatusCode::FORBIDDEN,
        None,
        "Refused",
        "The inbox is not served under the name this request was sent to. Nothing was read \
         or changed. (To serve it under another name, start it with --origin.)",
    )
}

/// A request that carries an inbox cookie twice is refused whole, and
/// the cookie cleared along its path: one of the two was planted by a
/// page of another origin on the same host (see [`crate::cookies`]), and
/// which one is this browser's own cannot be told. Acting on either could
/// make one person's click another's decision.
async fn one_cookie_each(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let Some(name) = app.cookies.planted(request.headers()) else {
        return next.run(request).await;
    };
    refused!(
        app.refusals,
        path = %request.uri().path(),
        cookie = %name,
        "refused a request carrying a cookie twice"
    );
    let mut response = pages::message(
        StatusCode::BAD_REQUEST,
        None,
        "Signed out",
        "This browser sent the inbox's cookie twice: a page of another site on this host set one. \
         Nothing was done, and you are signed out here; sign in again.",
    );
    for value in app.cookies.clear_along(&name, request.uri().path()) {
        if let Ok(value) = HeaderValue::from_str(&value) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

/// Headers on every response: nothing is framed (no clickjacking of the
/// approve button), no script or style from elsewhere, no referrer to
/// other sites, no caching of pages that show records.
async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name: HeaderName, value: &'static str| {
        headers
            .entry(name)
            .or_insert(HeaderValue::from_static(value));
    };
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    // Not `no-referrer`: with it, browsers send `Origin: null` on the
    // inbox's own posts, and those are then refused (`own_origin`).
    set(headers, header::REFERRER_POLICY, "same-origin");
    set(headers, header::CACHE_CONTROL, "no-store");
    if response.status().is_client_error() {
        // A refusal may come before the body was read (another origin, not
        // signed in): hyper then drops the connection, so the answer says
        // so, and the next request does not meet a closed socket.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
