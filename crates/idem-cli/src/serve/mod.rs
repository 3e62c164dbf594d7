//! `idem serve`: the approval inbox, a web page over the store for the
//! people who decide (a finance lead approving a refund, a support lead an
//! account deletion), and the same decisions as a JSON API under `/api/`
//! for bots. `docs/inbox.md` documents both.
//!
//! The parts: `approvers` (who may sign in, and with which role),
//! `rules` (the approval rules of that file: who may decide what, how many
//! approvals a call needs),
//! `session` (sessions kept in the store, shared by every instance on
//! it), `cookies` (cookie names and attributes, CSRF tokens, same-origin
//! posts), `throttle` (bounded work before sign-in), `login`, `signins`
//! (sign-ins in the audit log, failures bounded), `view`
//! (what a record looks like in words), `decide` (a decision, checked
//! against the version the person saw, made through the operator API),
//! `pages` (the HTML), `api` (the JSON), `live` (server-sent events when
//! the inbox changes), `notify` (webhooks when a call begins to wait, is
//! overdue or is decided) and `deliveries` (their log, for approvers).
//!
//! Every decision goes through [`idem_runtime::operator::Operator`], fenced
//! on the record as it was shown: a record that changed in between is
//! refused with what changed, and nothing is written.

// Helpers return `Result<_, Response>`: the error *is* the page to send,
// built once per request; boxing it would only add an allocation.
#![allow(clippy::result_large_err)]

mod api;
pub(crate) mod approvers;
mod cookies;
mod decide;
mod deliveries;
mod listing;
mod live;
mod login;
pub(crate) mod notify;
mod pages;
pub(crate) mod rules;
pub(crate) mod session;
pub(crate) mod signins;
mod throttle;
mod view;

use std::future::IntoFuture;
use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue};
use axum::response::Response;
use axum::routing::{any, get, post};
use axum::Router;
use idem_runtime::catalog::Catalog;
use idem_runtime::operator::Operator;

use crate::cli::{ApproverArgs, ApproverCommand, ServeArgs};
use crate::error::CliError;
use approvers::{Approvers, Identity};
use cookies::Cookies;
use idem_runtime::store::StoreError;
use idem_runtime::store::StoreExt;
use session::{Session, Sessions};
use signins::SignIns;
use throttle::Throttle;

/// What every request handler shares.
pub(crate) struct App {
    operator: Operator,
    approvers: Approvers,
    sessions: Sessions,
    signins: SignIns,
    cookies: Cookies,
    throttle: Arc<Throttle>,
    catalog: Option<Catalog>,
    overdue: Duration,
    proxy_header: Option<HeaderName>,
    /// The header a reverse proxy names the client's address in
    /// (`--client-address-header`), for the audit log.
    address_header: Option<HeaderName>,
    /// The origin posts must come from (`--origin`); `None`: the request's
    /// own host.
    origin: Option<String>,
    /// What the inbox's last look found changed ([`live::watch`]).
    changes: tokio::sync::watch::Receiver<live::Changes>,
    /// How often an open live stream reads its session again.
    recheck: Duration,
    /// Becomes `true` when the server is stopping: live streams end.
    stopping: tokio::sync::watch::Receiver<bool>,
    /// The webhooks' delivery log.
    deliveries: Arc<notify::log::Log>,
    /// The webhooks' endpoints, by name.
    endpoints: Vec<String>,
}

/// Someone signed in on a page: who, their session, and the cookie to set
/// when the session was just made (a trusted proxy's first request).
pub(crate) struct User {
    identity: Identity,
    session: Session,
    set_cookie: Option<String>,
}

impl App {
    /// The person a page request comes from, from the trusted proxy's
    /// header or the session cookie; `None`: not signed in. A store that
    /// cannot be read is an error page: nobody is signed in unchecked.
    async fn page_user(&self, headers: &HeaderMap) -> Result<Option<User>, Response> {
        let from_cookie = match self.cookie_session(headers).await {
            Ok(session) => session,
            Err(e) => {
                tracing::warn!("a session could not be read: {e}");
                return Err(store_down(None));
            }
        };
        if let Some(name) = &self.proxy_header {
            let Some(vouched) = headers.get(name).and_then(|v| v.to_str().ok()) else {
                return Err(pages::message(
                    axum::http::StatusCode::UNAUTHORIZED,
                    None,
                    "Not signed in",
                    "The proxy in front of the inbox did not say who you are.",
                ));
            };
            let Some(identity) = self.approvers.identity(vouched.trim()) else {
                return Err(not_listed(vouched));
            };
            return Ok(Some(match from_cookie {
                Some(session) if session.name == identity.name => User {
                    identity,
                    session,
                    set_cookie: None,
                },
                _ => {
                    let (cookie, session) = match self.sessions.start(&identity.name).await {
                        Ok(started) => started,
                        Err(e) => {
                            tracing::warn!("a session could not be started: {e}");
                            return Err(store_down(None));
                        }
                    };
                    User {
                        identity,
                        session,
                        set_cookie: Some(cookie),
                    }
                }
            }));
        }
        Ok(from_cookie.and_then(|session| {
            self.approvers.identity(&session.name).map(|identity| User {
                identity,
                session,
                set_cookie: None,
            })
        }))
    }

    /// The live session the request's cookie names, if any.
    async fn cookie_session(&self, headers: &HeaderMap) -> Result<Option<Session>, StoreError> {
        match self.cookies.get(headers, cookies::SESSION) {
            Some(value) => self.sessions.verify(value).await,
            None => Ok(None),
        }
    }

    /// Where a request came from, for the audit log: the peer, and the
    /// client a trusted proxy names (`--client-address-header`).
    fn address(&self, peer: SocketAddr, headers: &HeaderMap) -> String {
        let forwarded = self
            .address_header
            .as_ref()
            .and_then(|name| headers.get(name))
            .and_then(|v| v.to_str().ok());
        signins::address(peer, forwarded)
    }

    /// The bot (or person) an API request comes from: a bearer token, or
    /// the trusted proxy's header.
    fn api_user(&self, headers: &HeaderMap) -> Option<Identity> {
        if let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer)
        {
            return self.approvers.check_token(token);
        }
        let name = self.proxy_header.as_ref()?;
        let vouched = headers.get(name)?.to_str().ok()?;
        self.approvers.identity(vouched.trim())
    }
}

/// The token of an `Authorization: Bearer TOKEN` value; the scheme's
/// name is case-insensitive (RFC 7235).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
        .filter(|t| !t.is_empty())
}

/// The page for a store that cannot be read or written: nothing was
/// done, and nobody is let in unchecked.
fn store_down(user: Option<&User>) -> Response {
    pages::message(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        user,
        "The store cannot be reached",
        "The inbox could not read or write its store. Nothing was changed; try again in a moment.",
    )
}

fn not_listed(name: &str) -> Response {
    pages::message(
        axum::http::StatusCode::FORBIDDEN,
        None,
        "Not an approver",
        &format!(
            "{} is not in the approvers file, so it may not use the inbox.",
            view::shown(name)
        ),
    )
}

/// The routes.
fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(pages::inbox))
        .route("/inbox/rows", get(pages::rows))
        .route("/login", get(login::login_form).post(login::login))
        .route("/logout", post(login::logout))
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
        .fallback(pages::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            own_origin,
        ))
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(app)
}

/// The largest request body read (a form, a JSON decision); a larger one
/// is refused with 413.
pub(crate) const MAX_BODY: usize = 256 * 1024;

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
    tracing::warn!(
        path = %request.uri().path(),
        origin = ?request.headers().get(header::ORIGIN),
        "refused a post from another origin"
    );
    pages::message(
        axum::http::StatusCode::FORBIDDEN,
        None,
        "Refused",
        "This form was sent from a page that is not the inbox's own. Nothing was changed.",
    )
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

/// `idem serve`.
pub(crate) async fn run(url: &str, args: &ServeArgs) -> Result<(), CliError> {
    let addr = args.listen;
    // How it is served is checked first: a refusal opens nothing.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            Some(idem_mcp::tls::server_config(cert, key).map_err(CliError::Tls)?)
        }
        _ => None,
    };
    if tls.is_none() && !args.allow_plain_http && !addr.ip().is_loopback() {
        return Err(CliError::PlainHttp { addr });
    }
    let approvers = Approvers::load(&args.approvers)?;
    let endpoints = endpoints(&approvers, args)?;
    let catalog = match &args.tools {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| CliError::Unreadable {
                what: "the tool catalog",
                path: path.clone(),
                source,
            })?;
            let catalog = Catalog::from_json(&text).map_err(|source| CliError::InvalidCatalog {
                path: path.clone(),
                source,
            })?;
            Some(catalog)
        }
        None => None,
    };
    let operator = crate::store::open(url).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| CliError::Listen { addr, source })?;
    let local = listener.local_addr()?;
    let (changed, changes) = tokio::sync::watch::channel(live::Changes::default());
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let cookies = Cookies {
        secure: args.secure_cookies || tls.is_some(),
    };
    let store = operator.store().clone();
    let deliveries = Arc::new(notify::log::Log::default());
    let app = Arc::new(App {
        operator: operator.clone(),
        approvers,
        sessions: Sessions::new(store.clone(), args.session_idle, args.session, cookies),
        signins: SignIns::new(store),
        cookies,
        throttle: Arc::new(Throttle::default()),
        catalog,
        overdue: args.overdue,
        proxy_header: args.trust_proxy_header.clone(),
        address_header: args.client_address_header.clone(),
        origin: args.origin.clone(),
        changes,
        recheck: (args.refresh * 5).clamp(Duration::from_secs(1), Duration::from_secs(5)),
        stopping,
        deliveries: deliveries.clone(),
        endpoints: endpoints.iter().map(|e| e.name.clone()).collect(),
    });
    // Sign-ins and refusals, on stderr (`RUST_LOG` is not read: the
    // inbox's own events only).
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .try_init();
    let watcher = tokio::spawn(live::watch(app.clone(), changed, args.refresh));
    let counts = tokio::spawn({
        let app = app.clone();
        async move {
            let mut tick = tokio::time::interval(signins::WINDOW);
            loop {
                tick.tick().await;
                app.signins.flush(false).await;
            }
        }
    });
    let scheme = if tls.is_some() { "https" } else { "http" };
    let settings = notify::Settings {
        endpoints,
        inbox: args
            .origin
            .clone()
            .unwrap_or_else(|| format!("{scheme}://{local}")),
        every: args.refresh,
        overdue: args.overdue,
        retries: notify::Retries {
            attempts: args.notify_attempts,
            backoff: args.notify_backoff,
        },
    };
    let notifier = notify::Notifier::start(operator.clone(), settings, deliveries)
        .map_err(CliError::Notify)?;
    eprintln!(
        "idem serve: the approval inbox is on {scheme}://{local}/ ({})",
        operator.store().describe()
    );
    let stopping_now = async move {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!("idem serve: stopping (Ctrl-C again to stop at once)");
        // Live streams end, so that their connections can close.
        let _ = stop.send(true);
    };
    let finishing = app.clone();
    let service = router(app).into_make_service_with_connect_info::<SocketAddr>();
    let serving: std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<()>> + Send>> =
        match tls {
            Some(config) => {
                use axum::serve::ListenerExt as _;
                // `tap_io` so that handlers read the peer's address as
                // over plain TCP (`ConnectInfo<SocketAddr>`).
                let listener = idem_mcp::tls::TlsListener::new(listener, config)?.tap_io(|_| {});
                Box::pin(
                    axum::serve(listener, service)
                        .with_graceful_shutdown(stopping_now)
                        .into_future(),
                )
            }
            None => Box::pin(
                axum::serve(listener, service)
                    .with_graceful_shutdown(stopping_now)
                    .into_future(),
            ),
        };
    tokio::pin!(serving);
    let served = tokio::select! {
        served = &mut serving => served,
        // A second Ctrl-C, or requests that do not finish: stop anyway.
        () = stopped_waiting() => Ok(()),
    };
    watcher.abort();
    counts.abort();
    finishing.signins.flush(true).await;
    if let Some(notifier) = notifier {
        // A delivery under way finishes its attempt and records it: cut
        // off, it would be sent again by the next instance.
        notifier.stop(NOTIFY_STOP_WAIT).await;
    }
    operator.store().close().await;
    Ok(served?)
}

/// How long a stopping server waits for a webhook delivery under way.
const NOTIFY_STOP_WAIT: Duration = Duration::from_secs(12);

/// The webhooks of the approvers file's `[[notify]]` tables and of
/// `--notify`, checked, their secrets read.
fn endpoints(
    approvers: &Approvers,
    args: &ServeArgs,
) -> Result<Vec<notify::endpoint::Endpoint>, CliError> {
    use notify::endpoint::{Endpoint, NotifyEntry, SecretSource};
    let dir = args
        .approvers
        .parent()
        .map(std::path::Path::to_owned)
        .unwrap_or_default();
    let invalid = |problem: String| CliError::InvalidApprovers {
        path: args.approvers.clone(),
        problem,
    };
    let mut endpoints = Vec::new();
    for entry in approvers.notify() {
        endpoints.push(Endpoint::of(entry.clone(), &dir).map_err(invalid)?);
    }
    if let Some(url) = &args.notify {
        let secret = SecretSource {
            file: args.notify_secret_file.clone(),
            env: args.notify_secret_env.clone(),
        };
        let entry = NotifyEntry::command_line(url, args.notify_format, secret);
        // A relative --notify-secret-file is read from where idem runs.
        endpoints.push(Endpoint::of(entry, std::path::Path::new("")).map_err(CliError::Notify)?);
    }
    let mut ids = std::collections::HashSet::new();
    for endpoint in &endpoints {
        if !ids.insert(endpoint.id.clone()) {
            return Err(CliError::Notify(format!(
                "notify endpoint {}: its URL is given twice (one endpoint is told once)",
                endpoint.name
            )));
        }
    }
    Ok(endpoints)
}

/// How long a stopping server waits for its requests to finish.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// Completes on a second Ctrl-C, or [`STOP_WAIT`] after the first.
async fn stopped_waiting() {
    let _ = tokio::signal::ctrl_c().await;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = tokio::time::sleep(STOP_WAIT) => {}
    }
}

/// The fewest characters `idem approver password` takes.
const MIN_PASSWORD: usize = 12;

/// `idem approver password|token NAME`: the entry to paste into the
/// approvers file.
pub(crate) fn approver(args: &ApproverArgs) -> Result<(), CliError> {
    let (entry, secret) = match &args.command {
        ApproverCommand::Password(a) | ApproverCommand::Token(a) => (a, &args.command),
        ApproverCommand::Revoke(_) => unreachable!("`idem approver revoke` opens the store"),
    };
    let role = entry.role;
    let name = entry.name.trim();
    if name.is_empty()
        || name.contains(idem_runtime::text::needs_escape)
        || name.contains(['"', '\\'])
    {
        return Err(CliError::ApproverName);
    }
    let line = match secret {
        ApproverCommand::Password(_) => {
            let mut password = String::new();
            std::io::stdin().lock().read_line(&mut password)?;
            let password = password.trim_end_matches(['\r', '\n']);
            if password.chars().count() < MIN_PASSWORD {
                return Err(CliError::ShortPassword { min: MIN_PASSWORD });
            }
            let hash = approvers::hash_password(password).map_err(CliError::HashPassword)?;
            format!("password = \"{hash}\"")
        }
        ApproverCommand::Revoke(_) => unreachable!("handled above"),
        ApproverCommand::Token(_) => {
            let token = approvers::new_token();
            eprintln!("API token for {name} (shown once; send it as `Authorization: Bearer TOKEN`):\n{token}");
            format!("tokens = [\"{}\"]", approvers::token_entry(&token))
        }
    };
    println!(
        "[[approver]]\nname = \"{name}\"\nrole = \"{}\"\n{line}\n",
        role.as_str()
    );
    Ok(())
}
