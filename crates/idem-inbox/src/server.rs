//! Serving: everything the options name checked first, then the store
//! opened, the listener bound, the background tasks started (the live
//! pages' look, the sign-in counts, the webhooks), and, on SIGTERM or
//! SIGINT, the drain.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::catalog::Catalog;
use idem_runtime::operator::Operator;

use crate::approvers::Approvers;
use crate::change::Changes;
use crate::cookies::Cookies;
use crate::session::Sessions;
use crate::signins::{self, SignIns};
use crate::state::App;
use crate::throttle::Throttle;
use crate::{live, notify, router, InboxError, InboxOptions};
use idem_net::health::Health;
use idem_net::hosts::AllowedHosts;
use idem_net::serve::Limits;
use idem_net::stop::{drain, Drained, Requests, StopSignals};
use idem_runtime::store::StoreExt;

/// Serve the inbox on the store `store` opens, until SIGTERM or SIGINT
/// (Ctrl-C): then it accepts no new connection, live streams end,
/// requests under way finish (for up to
/// [`shutdown_grace`](InboxOptions::shutdown_grace), or until a second
/// signal; those left are named on stderr), a webhook delivery under way
/// finishes its attempt, and the store is closed.
///
/// Everything the options name is checked before `store` is awaited, so
/// a refusal opens nothing; an error of `store` is returned as
/// [`InboxError::Store`]. Sign-ins and refusals are logged with
/// `tracing`; the address served is printed on stderr.
pub async fn run<E>(
    options: InboxOptions,
    store: impl Future<Output = Result<Operator, E>>,
) -> Result<(), InboxError>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let addr = options.listen;
    // How it is served is checked first: a refusal opens nothing.
    let tls = match &options.tls {
        Some(files) => Some(
            idem_net::server::server_config(&files.cert, &files.key).map_err(InboxError::Tls)?,
        ),
        None => None,
    };
    if tls.is_none() && !options.allow_plain_http && !addr.ip().is_loopback() {
        return Err(InboxError::PlainHttp { addr });
    }
    let origins: Vec<&str> = options.origin.iter().map(String::as_str).collect();
    // Checked before anything is opened; made again once the port is known.
    AllowedHosts::new(addr, &origins)?;
    let approvers = Approvers::load(&options.approvers)?;
    let endpoints = endpoints(&approvers, &options)?;
    let slack = slack_setup(&options)?;
    let catalog = match &options.tools {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| InboxError::Unreadable {
                what: "the tool catalog",
                path: path.clone(),
                source,
            })?;
            let catalog =
                Catalog::from_json(&text).map_err(|source| InboxError::InvalidCatalog {
                    path: path.clone(),
                    source,
                })?;
            Some(catalog)
        }
        None => None,
    };
    let operator = store.await.map_err(|e| InboxError::Store(e.into()))?;
    // The rules in force for every decision on the store, whichever
    // surface makes it (`idem approve`, the MCP chat, a program).
    approvers
        .rules()
        .publish(operator.store().as_ref())
        .await
        .map_err(|e| InboxError::Store(e.into()))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| InboxError::Listen { addr, source })?;
    let local = listener.local_addr()?;
    let hosts = AllowedHosts::new(local, &origins)?;
    let (changed, changes) = tokio::sync::watch::channel(Changes::default());
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let cookies = Cookies {
        secure: options.secure_cookies || tls.is_some(),
    };
    let store = operator.store().clone();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let inbox = options
        .origin
        .clone()
        .unwrap_or_else(|| format!("{scheme}://{local}"));
    let deliveries = Arc::new(notify::log::Log::default());
    let app = Arc::new(App {
        operator: operator.clone(),
        approvers: std::sync::RwLock::new(Arc::new(approvers)),
        sessions: Sessions::new(
            store.clone(),
            options.session_idle,
            options.session,
            cookies,
        ),
        signins: SignIns::new(store),
        cookies,
        throttle: Arc::new(Throttle::default()),
        catalog,
        overdue: options.overdue,
        proxy_header: options.trust_proxy_header.clone(),
        address_header: options.client_address_header.clone(),
        origin: options.origin.clone(),
        hosts,
        changes,
        recheck: (options.refresh * 5).clamp(Duration::from_secs(1), Duration::from_secs(5)),
        stopping,
        deliveries: deliveries.clone(),
        endpoints: endpoints.iter().map(|e| e.name.clone()).collect(),
        refusals: Default::default(),
        slack: match slack {
            Some((verifier, replies)) => Some(crate::slack::Slack {
                verifier,
                replies,
                client: idem_net::client::HttpClient::new(
                    idem_net::client::client_config().map_err(InboxError::Slack)?,
                ),
                inbox: inbox.clone(),
            }),
            None => None,
        },
    });
    let watcher = tokio::spawn(live::watch(app.clone(), changed, options.refresh));
    let reloader = tokio::spawn({
        let (app, path) = (app.clone(), options.approvers.clone());
        idem_net::stop::on_each_sighup(move || reload(&app, &path))
    });
    let counts = tokio::spawn({
        let app = app.clone();
        async move {
            let mut tick = tokio::time::interval(signins::WINDOW);
            loop {
                tick.tick().await;
                app.signins.flush(false).await;
                app.refusals.flush();
            }
        }
    });
    let expiry = tokio::spawn(crate::expiry::sweep(operator.clone(), options.refresh));
    let settings = notify::Settings {
        endpoints,
        inbox,
        every: options.refresh,
        overdue: options.overdue,
        retries: notify::Retries {
            attempts: options.notify_attempts,
            backoff: options.notify_backoff,
        },
        buttons: app.slack.is_some(),
    };
    let notifier = notify::Notifier::start(operator.clone(), settings, deliveries)
        .map_err(InboxError::Notify)?;
    eprintln!(
        "idem serve: the approval inbox is on {scheme}://{local}/ ({})",
        operator.store().describe()
    );
    // Listened for from here: a signal before this line ends the process.
    let mut signals = StopSignals::listen()?;
    let (stop_accepting, stopped_accepting) = tokio::sync::oneshot::channel::<()>();
    let stopped_accepting = async move {
        let _ = stopped_accepting.await;
    };
    let finishing = app.clone();
    // A page's live stream lasts as long as the page: not waited for (it
    // ends when the server stops).
    let health = health(&operator);
    let requests = Requests::default();
    let router = router::router(app).merge(health.router());
    let router = requests.track(router, |request| request.uri().path() != "/events");
    // Behind a proxy every connection comes from its address: no
    // per-address cap then.
    let behind_proxy =
        options.trust_proxy_header.is_some() || options.client_address_header.is_some();
    // Connections are bounded by the descriptors the process may open.
    idem_net::serve::raise_descriptor_limit();
    let limits = Limits {
        per_source: (!behind_proxy)
            .then_some(Limits::default().per_source)
            .flatten(),
        ..Limits::default()
    };
    // On a task of its own: it goes on accepting until told to stop, and
    // then closing connections, while the drain is waited for.
    let mut serving = match tls {
        Some(config) => {
            let listener = idem_net::server::TlsListener::new(listener, config)?;
            tokio::spawn(idem_net::serve::serve(
                listener,
                router,
                limits,
                stopped_accepting,
            ))
        }
        None => tokio::spawn(idem_net::serve::serve(
            idem_net::server::nodelay(listener),
            router,
            limits,
            stopped_accepting,
        )),
    };
    let served = tokio::select! {
        served = &mut serving => served.map_err(std::io::Error::other)?,
        signal = signals.next() => {
            let under_way = requests.list().len();
            eprintln!(
                "idem serve: {signal}: stopping: no new connections; waiting up to {}s for \
                 {under_way} request(s) under way (a second signal stops at once)",
                options.shutdown_grace.as_secs_f64()
            );
            // No new connection; live streams end, so that their
            // connections can close.
            health.stopping();
            let _ = stop_accepting.send(());
            let _ = stop.send(true);
            let finished = async {
                requests.finished().await;
                let _ = (&mut serving).await;
            };
            match drain(&mut signals, options.shutdown_grace, finished).await {
                Drained::Finished => eprintln!("idem serve: stopped: every request finished"),
                Drained::GraceRanOut | Drained::Signalled(_) => {
                    serving.abort();
                    eprintln!(
                        "idem serve: stopped with requests still under way: {}",
                        left(&requests)
                    );
                }
            }
            Ok(())
        }
    };
    watcher.abort();
    reloader.abort();
    counts.abort();
    expiry.abort();
    finishing.signins.flush(true).await;
    if let Some(notifier) = notifier {
        // A delivery under way finishes its attempt and records it: cut
        // off, it would be sent again by the next instance.
        notifier.stop(NOTIFY_STOP_WAIT).await;
    }
    operator.store().close().await;
    Ok(served?)
}

/// Slack's buttons, if a signing secret is given: the verifier and where
/// outcomes may be posted.
fn slack_setup(
    options: &InboxOptions,
) -> Result<Option<(crate::slack::verify::Verifier, crate::slack::reply::Replies)>, InboxError> {
    use crate::slack::{reply::Replies, verify::Verifier};
    let (file, env) = (
        options.slack_signing_secret_file.as_deref(),
        options.slack_signing_secret_env.as_deref(),
    );
    if file.is_none() && env.is_none() {
        return match options.slack_test_response_base {
            Some(_) => Err(InboxError::Slack(
                "--slack-test-response-base needs a Slack signing secret".to_owned(),
            )),
            None => Ok(None),
        };
    }
    let verifier = Verifier::read(file, env).map_err(InboxError::Slack)?;
    let replies = match &options.slack_test_response_base {
        Some(base) => Replies::for_tests(base).map_err(InboxError::Slack)?,
        None => Replies::Slack,
    };
    Ok(Some((verifier, replies)))
}

/// How long a stopping server waits for a webhook delivery under way.
const NOTIFY_STOP_WAIT: Duration = Duration::from_secs(12);

/// The webhooks of the approvers file's `[[notify]]` tables and of
/// `--notify`, checked, their secrets read.
fn endpoints(
    approvers: &Approvers,
    options: &InboxOptions,
) -> Result<Vec<notify::endpoint::Endpoint>, InboxError> {
    use notify::endpoint::{Endpoint, NotifyEntry, SecretSource};
    let dir = options
        .approvers
        .parent()
        .map(std::path::Path::to_owned)
        .unwrap_or_default();
    let invalid = |problem: String| InboxError::InvalidApprovers {
        path: options.approvers.clone(),
        problem,
    };
    let mut endpoints = Vec::new();
    for entry in approvers.notify() {
        endpoints.push(Endpoint::of(entry.clone(), &dir).map_err(invalid)?);
    }
    if let Some(url) = &options.notify {
        let secret = SecretSource {
            file: options.notify_secret_file.clone(),
            env: options.notify_secret_env.clone(),
        };
        let entry = NotifyEntry::command_line(url, options.notify_format, secret);
        // A relative --notify-secret-file is read from where idem runs.
        endpoints.push(Endpoint::of(entry, std::path::Path::new("")).map_err(InboxError::Notify)?);
    }
    let mut ids = std::collections::HashSet::new();
    for endpoint in &endpoints {
        if !ids.insert(endpoint.id.clone()) {
            return Err(InboxError::Notify(format!(
                "notify endpoint {}: its URL is given twice (one endpoint is told once)",
                endpoint.name
            )));
        }
    }
    Ok(endpoints)
}

/// Read the approvers file at `path` again (on SIGHUP), and put it in
/// place at once (who may sign in, their passwords and tokens, the rules);
/// a file that cannot be read or is not valid keeps the one loaded, and
/// says why on stderr. The webhooks stay those of the start. The rules are
/// published to the store again, for every surface that decides.
fn reload(app: &App, path: &std::path::Path) {
    match Approvers::load(path) {
        Ok(approvers) => {
            let approvers = Arc::new(approvers);
            *app.approvers.write().unwrap_or_else(|p| p.into_inner()) = approvers.clone();
            let store = app.operator.store().clone();
            tokio::spawn(async move {
                if let Err(e) = approvers.rules().publish(store.as_ref()).await {
                    eprintln!("idem serve: SIGHUP: the approval rules could not be published to the store: {e}");
                }
            });
            eprintln!(
                "idem serve: SIGHUP: reloaded the approvers file {}",
                path.display()
            );
        }
        Err(e) => eprintln!(
            "idem serve: SIGHUP: the approvers file was not reloaded, the one loaded before \
             stays: {e}"
        ),
    }
}

/// `/readyz`'s check: the store answers.
fn health(operator: &Operator) -> Health {
    let store = operator.store().clone();
    Health::default().check("store", move || {
        let store = store.clone();
        async move {
            store.now().await.map(|_| ()).map_err(|e| {
                tracing::warn!("readiness: the store does not answer: {e}");
                "not answering"
            })
        }
    })
}

/// The requests under way, for a person: `GET /api/inbox, POST /login`
/// (or `none`, when what was left is a connection closing).
fn left(requests: &Requests) -> String {
    let left = requests.list();
    if left.is_empty() {
        return "none (connections still closing)".to_owned();
    }
    left.iter()
        .map(|what| idem_runtime::text::visible(what).into_owned())
        .collect::<Vec<_>>()
        .join(", ")
}
