//! A resolution is kept for a time, as every outcome is, and the inbox
//! says how long before anything is done: the tool's TTL, or the time the
//! person chooses ("keep for") on the page and in the API.

use std::time::Duration;

use idem::prelude::*;
use serde_json::json;

use crate::support::serve::{catalog, hidden, listed, sign_in, Http, Reply, Serve, DANA};
use crate::support::tools::{charge_card, executor, ns, App, Charge};
use crate::support::unique;

/// A charge whose outcome is unknown, listed in the inbox: the served
/// inbox and the item.
async fn an_unknown_charge(url: &str) -> (App, Serve, serde_json::Value) {
    let app = App::default();
    let exec = executor(url, &app, Duration::ZERO).await;
    let serve = Serve::start(url, Some(&catalog()), &[]);
    let namespace = unique("tenant");
    app.payments
        .hang_next
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let error = exec
        .call(
            charge_card,
            Charge {
                customer: "ada".into(),
                cents: 4900,
            },
        )
        .call_id(unique("call"))
        .namespace(ns(&namespace))
        .await
        .unwrap_err();
    assert!(matches!(error, IdemError::OutcomeUnknown { .. }), "{error}");
    let item = listed(&mut Http::default(), &serve, &namespace).await;
    assert_eq!(item["waits_for"], "unknown");
    (app, serve, item)
}

/// On the page: the confirmation says how long the resolution is kept
/// (the tool's TTL, or the time chosen), the record then says until when,
/// and a time idem cannot read is refused with what to write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolution_says_how_long_it_is_kept_and_keeps_the_time_chosen() {
    let (_dir, url) = crate::support::sqlite();
    let (_app, serve, item) = an_unknown_charge(&url).await;
    let key = item["key"].as_str().unwrap();
    let mut browser = Http::default();
    sign_in(&mut browser, &serve, DANA).await;
    let page = browser.get(&serve.url(&format!("/records/{key}"))).await;
    assert!(
        page.body.contains("empty: the tool's TTL, 24 hours"),
        "{}",
        page.body
    );
    let csrf = hidden(&page.body, "csrf").unwrap();
    let version = hidden(&page.body, "version").unwrap();
    let resolve = serve.url(&format!("/records/{key}/resolve"));
    let fields = |ttl: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("version", version.clone()),
            ("as", "succeeded".to_owned()),
            ("output", r#"{"charge_id":"ch_from_dashboard"}"#.to_owned()),
            ("reason", "the dashboard shows it".to_owned()),
            ("ttl", ttl.to_owned()),
        ]
    };
    let by_default = post(&mut browser, &resolve, &fields("")).await;
    by_default.says(200, "It is kept for 24 hours (the tool&#39;s TTL; choose another with “keep for”); after that, a call with this key runs charge_card again.");
    let unreadable = post(&mut browser, &resolve, &fields("soon")).await;
    unreadable.says(422, "such as 30d, 12w or 8h");

    let chosen = post(&mut browser, &resolve, &fields("90d")).await;
    chosen.says(200, "It is kept for 90 days (as you chose)");
    let mut confirmed = fields("90d");
    confirmed.push(("confirmed", "yes".to_owned()));
    let done = post(&mut browser, &resolve, &confirmed).await;
    assert_eq!(done.status, 303, "{}", done.body);

    let record = Http::default()
        .api(
            "GET",
            &serve.url(&format!("/api/records/{key}")),
            &serve.token,
            None,
        )
        .await
        .json();
    assert_eq!(record["record"]["status"], "succeeded");
    let expires = record["record"]["expires_at"].as_str().unwrap();
    let expires = days_from_now(expires);
    assert!((89.9..90.1).contains(&expires), "kept {expires} days");
    let page = browser.get(&serve.url(&format!("/records/{key}"))).await;
    assert!(
        page.body
            .contains("after that, a call with this key runs the tool again"),
        "{}",
        page.body
    );
}

/// The API takes `ttl` too, and refuses it for a release (which keeps
/// nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_keeps_a_resolution_for_the_time_asked() {
    let (_dir, url) = crate::support::sqlite();
    let (_app, serve, item) = an_unknown_charge(&url).await;
    let key = item["key"].as_str().unwrap();
    let resolve = serve.url(&format!("/api/records/{key}/resolve"));
    let mut http = Http::default();
    let released = http
        .api("POST", &resolve, &serve.token, Some(&json!({"version": item["version"], "as": "released", "reason": "never sent", "ttl": "30d"})))
        .await;
    released.says(422, "A release keeps no record");
    let failed = http
        .api("POST", &resolve, &serve.token, Some(&json!({"version": item["version"], "as": "failed", "reason": "the provider refused it", "ttl": "2w"})))
        .await;
    assert_eq!(failed.status, 200, "{}", failed.body);
    let expires = failed.json()["record"]["expires_at"]
        .as_str()
        .unwrap()
        .to_owned();
    let days = days_from_now(&expires);
    assert!((13.9..14.1).contains(&days), "kept {days} days");
}

/// Post the form `fields` to `url`.
async fn post(browser: &mut Http, url: &str, fields: &[(&'static str, String)]) -> Reply {
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    browser.form(url, &fields).await
}

/// Days from now to an RFC 3339 time.
fn days_from_now(at: &str) -> f64 {
    let at: jiff::Timestamp = at.parse().expect("an RFC 3339 time");
    (at.as_millisecond() - jiff::Timestamp::now().as_millisecond()) as f64 / 86_400_000.0
}
