//! DNS rebinding against `idem serve`: a page whose own name resolves to
//! the inbox's address makes the browser send that name as `Host` (and
//! as the page's `Origin`). Only the names the inbox is served under are
//! answered (its listen address, the loopback names, `--origin`'s);
//! every other `Host` gets 403 before a cookie, a form or a trusted
//! proxy's header is read. The probes answer under any name.

use std::time::Duration;

use serde_json::json;

use crate::support::http::encode;
use crate::support::serve::{hidden, Http, Reply, Scene, Serve, DANA};
use crate::support::tools::{dispatcher, App};

/// GET `url` with `Host: host`.
async fn get_under(http: &mut Http, url: &str, host: &str) -> Reply {
    http.send("GET", url, &[("host", host)], "").await
}

/// A sign-in form posted as a rebinding page would send it: `Host` and
/// `Origin` both the page's name, at the inbox's port.
async fn sign_in_under(http: &mut Http, serve: &Serve, name: &str) -> u16 {
    let port = serve.base.rsplit(':').next().unwrap();
    let host = format!("{name}:{port}");
    let form = get_under(http, &serve.url("/login"), &host).await;
    let csrf = hidden(&form.body, "csrf").unwrap_or_default();
    let origin = format!("http://{host}");
    let body = format!("csrf={csrf}&name=dana&password={}", encode(DANA.1));
    let headers = [
        ("host", host.as_str()),
        ("origin", origin.as_str()),
        ("content-type", "application/x-www-form-urlencoded"),
    ];
    http.send("POST", &serve.url("/login"), &headers, &body)
        .await
        .status
}

/// Signing in under a rebinding name is refused; under `localhost`, or
/// the name `--origin` gives, it works; the probes answer any name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebinding_host_is_refused_and_the_served_names_are_not() {
    let (_dir, url) = crate::support::sqlite();
    let _agent = dispatcher(&url, &App::default(), Duration::ZERO).await;
    let serve = Serve::start(&url, None, &[]);
    let mut http = Http::default();
    assert_eq!(sign_in_under(&mut http, &serve, "evil.example").await, 403);
    assert!(!http.cookies.contains_key("idem_session"), "not signed in");
    let page = get_under(&mut http, &serve.url("/login"), "evil.example").await;
    page.says(403, "not served under the name");
    assert!(!page.body.contains("evil.example"), "{}", page.body);
    let probe = get_under(&mut http, &serve.url("/healthz"), "10.1.2.3").await;
    assert_eq!(probe.status, 200, "{}", probe.body);

    assert_eq!(sign_in_under(&mut http, &serve, "localhost").await, 303);
    // Behind a reverse proxy that keeps the browser's `Host`.
    let proxied = Serve::start(&url, None, &["--origin", "http://inbox.test:8080"]);
    let mut other = Http::default();
    let named = get_under(&mut other, &proxied.url("/login"), "inbox.test:8080").await;
    assert_eq!(named.status, 200, "--origin's name: {}", named.body);
}

/// Behind an authenticating proxy (`--trust-proxy-header`), its header
/// is honoured only under a served name: a rebinding page that adds
/// `X-Forwarded-User: dana` approves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_header_under_a_rebinding_host_approves_nothing() {
    let (_dir, url) = crate::support::sqlite();
    let trusting = ["--trust-proxy-header", "X-Forwarded-User"];
    let mut scene = Scene::with_args(&url, Duration::ZERO, &trusting).await;
    let item = scene.asked("eve").await;
    let approve = scene.serve.url(&format!(
        "/api/records/{}/approve",
        item["key"].as_str().unwrap()
    ));
    let body = json!({"version": item["version"]}).to_string();
    let json = ("content-type", "application/json");
    let as_dana = ("x-forwarded-user", DANA.0);
    let rebound = scene
        .http
        .send(
            "POST",
            &approve,
            &[("host", "rebind.test"), as_dana, json],
            &body,
        )
        .await;
    assert_eq!(rebound.status, 403, "{}", rebound.body);
    let still = scene.listed().await;
    assert_eq!(still["version"], item["version"], "nothing changed");

    let proxied = [as_dana, json];
    let done = scene.http.send("POST", &approve, &proxied, &body).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert_eq!(done.json()["by"], DANA.0);
}
