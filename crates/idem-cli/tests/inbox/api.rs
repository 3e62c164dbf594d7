//! `idem serve`, the approval inbox, over plain HTTP: its JSON API as a bot
//! uses it, and its pages as a browser posts them (with the browser key
//! its script keeps: `planted.rs` has the browser without it) —
//! against real calls of an executor in this process, waiting on the same
//! store (SQLite, and the Redis and PostgreSQL servers of
//! `idem_testkit::servers` for the decisions that wake a waiting caller).
//! The browser itself is in `inbox_browser.rs`.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::serve::{catalog, hidden, listed, wait_on, Http, Scene, Serve, DANA, VIC};
use crate::support::tools::{
    delete_call, dispatcher, executor, tenant, the_duplicate_gets, timed_out_charge, App,
};
use crate::support::{schema, unique};

/// How long a waiting caller waits for a person.
const PATIENCE: Duration = Duration::from_secs(60);

crate::support::on_every_store_url![
    an_approval_through_the_api_runs_the_waiting_call_exactly_once,
    a_denial_through_the_api_needs_a_reason_and_reaches_the_waiting_caller,
];

/// A bot approves a call an agent is waiting on: the agent's tool runs
/// once, the audit names the bot and its note, a repeat runs nothing.
async fn an_approval_through_the_api_runs_the_waiting_call_exactly_once(url: &str) {
    let Scene {
        app,
        agent,
        serve,
        mut http,
        namespace,
    } = Scene::new(url, PATIENCE).await;
    let call_id = unique("call");

    let call = delete_call(&call_id, "eve");
    let context = tenant(&namespace);
    let waiting = wait_on(&agent, call.clone(), &namespace);
    let item = listed(&mut http, &serve, &namespace).await;
    assert_eq!(item["tool"], "delete_account");
    assert_eq!(item["class"], "irreversible");
    assert_eq!(item["waits_for"], "awaiting_approval");
    let key = item["key"].as_str().unwrap().to_owned();

    let shown = http
        .bot(&serve, &format!("/api/records/{key}"), None)
        .await
        .json();
    schema::check(&shown, "record_page");
    assert_eq!(shown["record"]["arguments"], json!({"customer": "eve"}));
    assert_eq!(
        shown["description"],
        "Delete a customer's account and all its data."
    );
    assert_eq!(shown["version"], item["version"]);
    assert_eq!(app.deletions(), 0, "nothing runs before a decision");

    let approved = http
        .bot(
            &serve,
            &format!("/api/records/{key}/approve"),
            Some(&json!({"version": item["version"], "note": "ticket OPS-7"})),
        )
        .await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    schema::check(&approved.json(), "decided");
    assert_eq!(approved.json()["done"], "approved");
    assert_eq!(approved.json()["by"], "bot");

    let ran = waiting.decided().await;
    assert_eq!(
        ran.result.expect("runs once approved").output,
        json!("deleted eve")
    );
    assert_eq!(app.deletions(), 1);

    // The same call again: answered from the record.
    let again = agent.dispatch_one(call, &context).await;
    assert!(again.result.unwrap().meta.deduplicated);
    assert_eq!(app.deletions(), 1, "the repeat runs nothing");

    let shown = http
        .bot(&serve, &format!("/api/records/{key}"), None)
        .await
        .json();
    assert_eq!(shown["record"]["status"], "succeeded");
    assert_eq!(shown["record"]["approval"]["approved_by"], "bot");
    let trail = shown["audit"].as_array().unwrap();
    let approval = trail
        .iter()
        .find(|e| e["action"] == "approved")
        .unwrap_or_else(|| panic!("no approval in the audit trail: {trail:?}"));
    assert_eq!(approval["by"], "bot");
    assert_eq!(approval["reason"], "ticket OPS-7");
    // Approving again: the version is gone.
    let twice = http
        .bot(
            &serve,
            &format!("/api/records/{key}/approve"),
            Some(&json!({"version": item["version"]})),
        )
        .await;
    schema::check(&twice.json()["error"], "api_error");
    assert_eq!(twice.json()["error"]["code"], "changed");
    twice.error_says(409, "it is now succeeded");
}

/// A denial without a reason is refused and changes nothing; with one,
/// the waiting caller gets it, and the tool never runs.
async fn a_denial_through_the_api_needs_a_reason_and_reaches_the_waiting_caller(url: &str) {
    let Scene {
        app,
        agent,
        serve,
        mut http,
        namespace,
    } = Scene::new(url, PATIENCE).await;
    let call = delete_call(&unique("call"), "eve");
    let waiting = wait_on(&agent, call, &namespace);
    let item = listed(&mut http, &serve, &namespace).await;
    let key = item["key"].as_str().unwrap().to_owned();
    let deny = serve.url(&format!("/api/records/{key}/deny"));

    for body in [
        json!({"version": item["version"]}),
        json!({"version": item["version"], "reason": "  "}),
    ] {
        let refused = http.api("POST", &deny, &serve.token, Some(&body)).await;
        refused.error_says(422, "needs a reason");
    }
    // Nothing changed: the same version is still waiting.
    assert_eq!(
        listed(&mut http, &serve, &namespace).await["version"],
        item["version"]
    );

    let reason = "accounts are closed by support, not by agents";
    let denied = http
        .api(
            "POST",
            &deny,
            &serve.token,
            Some(&json!({"version": item["version"], "reason": reason})),
        )
        .await;
    assert_eq!(denied.status, 200, "{}", denied.body);
    let result = waiting.decided().await.result;
    let error = result.expect_err("a denied call does not run");
    assert!(error.to_string().contains(reason), "{error}");
    assert_eq!(app.deletions(), 0);
}

/// An unknown charge resolved as succeeded through the API: the duplicate
/// gets that output, and the card is charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_charge_resolved_through_the_api_answers_its_duplicate() {
    let (_dir, url) = crate::support::sqlite();
    let app = App::default();
    let exec = executor(&url, &app, Duration::ZERO).await;
    let serve = Serve::start(&url, Some(&catalog()), &[]);
    let mut http = Http::default();
    let namespace = unique("tenant");
    let call_id = timed_out_charge(&exec, &app, &namespace).await;

    let item = listed(&mut http, &serve, &namespace).await;
    assert_eq!(item["waits_for"], "unknown");
    assert_eq!(item["class"], "non_idempotent_write");
    let key = item["key"].as_str().unwrap();
    let resolve = serve.url(&format!("/api/records/{key}/resolve"));

    let no_output = http
        .api("POST", &resolve, &serve.token, Some(&json!({"version": item["version"], "as": "succeeded", "reason": "the provider's dashboard shows it"})))
        .await;
    assert_eq!(no_output.status, 422, "{}", no_output.body);
    let resolved = http
        .api(
            "POST",
            &resolve,
            &serve.token,
            Some(&json!({
                "version": item["version"],
                "as": "succeeded",
                "output": {"charge_id": "ch_from_dashboard"},
                "reason": "the provider's dashboard shows it",
            })),
        )
        .await;
    assert_eq!(resolved.status, 200, "{}", resolved.body);
    assert_eq!(resolved.json()["record"]["status"], "succeeded");

    the_duplicate_gets("ch_from_dashboard", &exec, &app, &call_id, &namespace).await;
}

/// No token, a viewer's token, a form instead of JSON, a key that is not
/// one: refused with what is wrong, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_refuses_strangers_viewers_and_malformed_requests() {
    let (_dir, _, mut scene) = Scene::on_sqlite().await;
    let item = scene.asked("eve").await;
    let Scene {
        app,
        serve,
        mut http,
        namespace,
        ..
    } = scene;
    let key = item["key"].as_str().unwrap();
    let approve = serve.url(&format!("/api/records/{key}/approve"));
    let body = json!({"version": item["version"]});

    let stranger = http
        .send(
            "POST",
            &approve,
            &[("content-type", "application/json")],
            &body.to_string(),
        )
        .await;
    assert_eq!(stranger.status, 401, "{}", stranger.body);
    assert_eq!(stranger.json()["error"]["code"], "unauthorized");
    let forged = http
        .api("POST", &approve, "idem_not-a-token", Some(&body))
        .await;
    assert_eq!(forged.status, 401);
    let viewer = http
        .api("POST", &approve, &serve.viewer_token, Some(&body))
        .await;
    assert_eq!(viewer.status, 403, "{}", viewer.body);
    assert_eq!(viewer.json()["error"]["code"], "forbidden");
    // A viewer may look.
    let looked = http
        .api("GET", &serve.url("/api/inbox"), &serve.viewer_token, None)
        .await;
    assert_eq!(looked.status, 200);
    let form = http
        .send(
            "POST",
            &approve,
            &[
                ("authorization", &format!("Bearer {}", serve.token)),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            "version=x",
        )
        .await;
    assert_eq!(form.status, 422, "a form is not JSON: {}", form.body);
    let no_version = http
        .api("POST", &approve, &serve.token, Some(&json!({})))
        .await;
    no_version.error_says(422, "version");
    let bad_key = http
        .bot(&serve, "/api/records/abc/approve", Some(&body))
        .await;
    assert_eq!(bad_key.status, 404);

    let still = listed(&mut http, &serve, &namespace).await;
    assert_eq!(still["version"], item["version"], "nothing changed");
    assert_eq!(app.deletions(), 0);
}

/// Sign in with a form as a browser would: the CSRF
/// token is required on every post, a wrong password is refused and
/// delays (never refuses) the next attempt, a viewer cannot decide, a stale version is refused
/// with what changed. Every page carries the headers that keep it out of
/// frames and caches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_need_a_session_and_its_csrf_token_to_decide() {
    let (dir, _, mut scene) = Scene::on_sqlite().await;
    let item = scene.asked("eve").await;
    let Scene {
        app,
        serve,
        http: mut bot,
        namespace,
        ..
    } = scene;
    let key = item["key"].as_str().unwrap().to_owned();

    let mut browser = Http::default();
    let inbox = browser.get(&serve.url("/")).await;
    assert_eq!(inbox.status, 303, "not signed in: to the sign-in page");
    assert_eq!(inbox.header("location"), ["/login"]);

    // A wrong password, then the right one at once: slowed down.
    let login = browser.get(&serve.url("/login")).await;
    assert!(login.header("x-frame-options") == ["DENY"]);
    assert!(login.header("content-security-policy")[0].contains("frame-ancestors 'none'"));
    let csrf = hidden(&login.body, "csrf").unwrap();
    let wrong = browser.log_in(&serve, &csrf, (DANA.0, "guess")).await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert!(wrong.body.contains("Wrong name or password."));
    assert!(!browser.cookies.contains_key("idem_session"));
    let csrf = hidden(&wrong.body, "csrf").unwrap();
    let started = std::time::Instant::now();
    let signed_in = browser.log_in(&serve, &csrf, DANA).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    assert!(
        started.elapsed() >= Duration::from_millis(90),
        "the right password waits its turn after a failure, and is not refused"
    );
    let cookie = &signed_in.header("set-cookie")[0];
    assert!(
        cookie.starts_with("idem_session=")
            && cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );

    let inbox = browser.get(&serve.url("/")).await;
    assert_eq!(inbox.status, 200);
    assert!(
        inbox.body.contains(&format!("/records/{key}")),
        "the inbox lists the call"
    );
    assert_eq!(inbox.header("cache-control"), ["no-store"]);
    // Nothing of where the store is, or of the approvers' secrets.
    let page = browser.get(&serve.url(&format!("/records/{key}"))).await;
    for secret in [
        dir.path().to_str().unwrap(),
        "argon2",
        &serve.token,
        "sha256:",
    ] {
        assert!(
            !inbox.body.contains(secret) && !page.body.contains(secret),
            "a page shows {secret}"
        );
    }
    let csrf = hidden(&page.body, "csrf").unwrap();
    let version = hidden(&page.body, "version").unwrap();
    assert_eq!(version, item["version"].as_str().unwrap());
    let approve = serve.url(&format!("/records/{key}/approve"));

    // Without the CSRF token, and with another one: refused.
    for token in ["", "forged"] {
        let refused = browser
            .form(
                &approve,
                &[("csrf", token), ("version", &version), ("confirmed", "yes")],
            )
            .await;
        assert_eq!(refused.status, 403, "{}", refused.body);
        assert!(refused.body.contains("security token"));
    }
    // A version that is not the record's: refused, with what changed.
    let stale = browser
        .form(
            &approve,
            &[
                ("csrf", &csrf),
                ("version", "1-awaiting_approval-0"),
                ("confirmed", "yes"),
            ],
        )
        .await;
    assert_eq!(stale.status, 409, "{}", stale.body);
    assert!(stale.body.contains("asked again since you opened it"));
    // First the confirmation, restating the effect; nothing yet.
    let confirm = browser
        .form(&approve, &[("csrf", &csrf), ("version", &version)])
        .await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    assert!(
        confirm.body.contains(
            "delete_account will run once, with exactly these arguments: {&#34;customer&#34;:&#34;eve&#34;}"
        ),
        "{}",
        confirm.body
    );
    assert_eq!(
        listed(&mut bot, &serve, &namespace).await["version"],
        item["version"]
    );

    // A viewer signs in and tries.
    let mut viewer = Http::default();
    let login = viewer.get(&serve.url("/login")).await;
    let csrf_v = hidden(&login.body, "csrf").unwrap();
    let in_v = viewer.log_in(&serve, &csrf_v, VIC).await;
    assert_eq!(in_v.status, 303, "{}", in_v.body);
    let page_v = viewer.get(&serve.url(&format!("/records/{key}"))).await;
    assert!(page_v.body.contains("signed in as a viewer"));
    let csrf_v = hidden(&page_v.body, "csrf").unwrap();
    let tried = viewer
        .form(
            &approve,
            &[
                ("csrf", &csrf_v),
                ("version", &version),
                ("confirmed", "yes"),
            ],
        )
        .await;
    assert_eq!(tried.status, 403, "{}", tried.body);
    assert_eq!(
        listed(&mut bot, &serve, &namespace).await["version"],
        item["version"],
        "nothing changed"
    );

    // Confirmed, by the approver.
    let done = browser
        .form(
            &approve,
            &[
                ("csrf", &csrf),
                ("version", &version),
                ("note", "checked with the owner"),
                ("confirmed", "yes"),
            ],
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let after = browser.get(&serve.url(&format!("/records/{key}"))).await;
    assert!(after.body.contains("Done: approved."), "{}", after.body);
    assert!(
        after
            .body
            .contains("approved, waiting for its call to run it"),
        "{}",
        after.body
    );
    assert!(after.body.contains("checked with the owner"));
    assert_eq!(
        app.deletions(),
        0,
        "it runs when its call comes back, not before"
    );

    // Signed out: the session is gone.
    let out = browser
        .form(&serve.url("/logout"), &[("csrf", &csrf)])
        .await;
    assert_eq!(out.status, 303);
    assert_eq!(browser.get(&serve.url("/")).await.status, 303);
}

/// Behind an authenticating proxy: the header names the approver (who must
/// be in the file), the page still needs its CSRF token, and the decision
/// records the proxy's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxy_header_names_the_approver() {
    let (_dir, url) = crate::support::sqlite();
    let app = App::default();
    let agent = dispatcher(&url, &app, Duration::ZERO).await;
    let serve = Serve::start(
        &url,
        None,
        &[
            "--trust-proxy-header",
            "X-Forwarded-User",
            "--overdue",
            "1s",
        ],
    );
    let namespace = unique("tenant");
    let _ = agent
        .dispatch_one(delete_call(&unique("call"), "eve"), &tenant(&namespace))
        .await;
    let mut http = Http::default();
    let item = listed(&mut http, &serve, &namespace).await;
    let key = item["key"].as_str().unwrap();
    assert_eq!(item["overdue"], false);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let item = listed(&mut http, &serve, &namespace).await;
    assert_eq!(item["overdue"], true, "waiting longer than --overdue 1s");

    let nobody = http.get(&serve.url("/")).await;
    assert_eq!(nobody.status, 401, "{}", nobody.body);
    let stranger = http
        .send(
            "GET",
            &serve.url("/"),
            &[("x-forwarded-user", "mallory")],
            "",
        )
        .await;
    assert_eq!(stranger.status, 403);
    assert!(stranger.body.contains("not in the approvers file"));

    let as_dana = [("x-forwarded-user", DANA.0)];
    let page = http
        .send("GET", &serve.url(&format!("/records/{key}")), &as_dana, "")
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page
        .body
        .contains("Signed in as <strong id=\"signed-in-as\">dana</strong>"));
    let inbox = http.send("GET", &serve.url("/"), &as_dana, "").await;
    assert!(inbox.body.contains("longer than 1s is marked overdue"));
    assert!(inbox
        .body
        .contains("<strong class=\"overdue-label\">overdue</strong>"));
    let csrf = hidden(&page.body, "csrf").unwrap();
    let body = format!(
        "csrf={}&version={}&confirmed=yes",
        crate::support::http::encode(&csrf),
        crate::support::http::encode(item["version"].as_str().unwrap())
    );
    let form = ("content-type", "application/x-www-form-urlencoded");
    let approve = serve.url(&format!("/records/{key}/approve"));
    // Another proxied name cannot use dana's session and its token.
    let mut borrowed = Http::default();
    borrowed.cookies = http.cookies.clone();
    let vic = borrowed
        .send(
            "POST",
            &approve,
            &[("x-forwarded-user", VIC.0), form],
            &body,
        )
        .await;
    assert_eq!(vic.status, 403, "{}", vic.body);
    let done = http
        .send("POST", &approve, &[as_dana[0], form], &body)
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let shown = http
        .send(
            "GET",
            &serve.url(&format!("/api/records/{key}")),
            &as_dana,
            "",
        )
        .await
        .json();
    assert_eq!(shown["record"]["approval"]["approved_by"], "dana");
}

/// A call whose worker vanished mid-call (its lease ran out with no
/// outcome) waits in the inbox as `vanished`; released through the API,
/// its record is gone, and its page and the API still show the audit trail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_workers_call_released_keeps_its_audit_trail() {
    let (_dir, url, mut scene) = Scene::on_sqlite().await;
    let call_id = unique("call");
    let key = crate::support::claim_directly(
        &url,
        &scene.namespace,
        &call_id,
        Some(r#"{"cents":4900,"customer":"ada"}"#),
        Duration::from_millis(50),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let item = scene.listed().await;
    assert_eq!(item["key"], key.as_str());
    assert_eq!(item["waits_for"], "vanished");
    // Approving is not what it waits for.
    let approve = scene
        .http
        .bot(
            &scene.serve,
            &format!("/api/records/{key}/approve"),
            Some(&json!({"version": item["version"]})),
        )
        .await;
    assert_eq!(approve.status, 409, "{}", approve.body);
    assert_eq!(approve.json()["error"]["code"], "not_applicable");

    let reason = "the worker's host was replaced before it charged anything";
    let released = scene
        .http
        .bot(
            &scene.serve,
            &format!("/api/records/{key}/resolve"),
            Some(&json!({"version": item["version"], "as": "released", "reason": reason})),
        )
        .await;
    assert_eq!(released.status, 200, "{}", released.body);
    schema::check(&released.json(), "decided");
    assert_eq!(released.json()["done"], "released");
    assert_eq!(released.json()["record"], Value::Null);

    let gone = scene
        .http
        .bot(&scene.serve, &format!("/api/records/{key}"), None)
        .await;
    assert_eq!(gone.status, 404, "{}", gone.body);
    let event = &gone.json()["audit"][0];
    schema::check(event, "event");
    assert_eq!(event["action"], "released");
    assert_eq!(event["by"], "bot");
    assert_eq!(event["reason"], reason);
    assert_eq!(event["before"], "in_flight");

    let mut browser = Http::default();
    crate::support::serve::sign_in(&mut browser, &scene.serve, DANA).await;
    let page = browser
        .get(&scene.serve.url(&format!("/records/{key}")))
        .await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("There is no record under key"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("released</strong> by <span class=\"by\">bot</span>"),
        "{}",
        page.body
    );
}
