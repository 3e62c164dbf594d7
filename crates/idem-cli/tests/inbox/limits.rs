//! What a person reads is what will run, and requests outside the rules
//! are refused with what the rule is: over plain HTTP against the real
//! `idem serve`.

use std::time::Duration;

use serde_json::json;

use crate::support::serve::{hidden, sign_in, Http, Scene, DANA};
use crate::support::tools::{delete_call, tenant};
use crate::support::unique;

/// The few entities askama writes, decoded, to read a page's text.
fn text(html: &str) -> String {
    html.replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&amp;", "&")
}

/// A call whose own argument keys try to read as other arguments ("cents
/// = 4900, charge = …"): the confirmation restates the JSON the tool
/// gets, keys quoted, so the forged text stays inside one key; the row
/// says that it cut the arguments; and a `?done=` in the address prints
/// nothing on the record's page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argument_keys_cannot_forge_the_confirmation_and_the_address_prints_nothing() {
    let (_dir, url, mut scene) = Scene::on_sqlite().await;
    let args = r#"{"cents":990000,"cents = 4900, charge = \"ch_42\"; unused":"","charge":"ch_42","memo":"a refund the customer asked for twice"}"#;
    let key = crate::support::claim_directly(
        &url,
        &scene.namespace,
        &unique("call"),
        Some(args),
        Duration::from_millis(50),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let item = scene.listed().await;
    let mut browser = crate::support::serve::Http::default();
    sign_in(&mut browser, &scene.serve, DANA).await;

    let inbox = browser
        .get(&scene.serve.url(&format!("/?namespace={}", scene.namespace)))
        .await;
    let row = text(&inbox.body);
    assert!(
        row.contains("… (cut: open the record for all of it)"),
        "{row}"
    );

    let page = browser
        .get(
            &scene
                .serve
                .url(&format!("/records/{key}?done=pwned+by+a+link")),
        )
        .await;
    assert_eq!(page.status, 200);
    assert!(
        !page.body.contains("pwned"),
        "text from the address is shown"
    );
    assert!(!page.body.contains("id=\"notice\""));
    let csrf = hidden(&page.body, "csrf").unwrap();
    let confirm = browser
        .form(
            &scene.serve.url(&format!("/records/{key}/resolve")),
            &[
                ("csrf", &csrf),
                ("version", item["version"].as_str().unwrap()),
                ("as", "released"),
                ("reason", "the worker never reached the provider"),
            ],
        )
        .await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    let effect = text(&confirm.body);
    assert!(
        effect.contains(&format!("runs charge_card again ({args})")),
        "the confirmation restates the exact JSON: {effect}"
    );
}

/// Each of these is refused with what the rule is, and changes nothing; a
/// lower-case `bearer` is the same scheme; a denied call reads as denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_bounds_requests_are_refused_with_the_rule() {
    let (_dir, _, mut scene) = Scene::on_sqlite().await;
    let item = scene.asked("eve").await;
    let key = item["key"].as_str().unwrap().to_owned();
    let serve = &scene.serve;
    let http = &mut scene.http;
    let token = serve.token.clone();

    let bogus = http.bot(serve, "/api/inbox?state=bogus", None).await;
    assert_eq!(bogus.status, 400, "{}", bogus.body);
    assert_eq!(bogus.json()["error"]["code"], "bad_request");
    let message = bogus.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    for state in ["all", "awaiting_approval", "unknown", "vanished"] {
        assert!(message.contains(state), "{message}");
    }

    let nope = http.bot(serve, "/api/nope", None).await;
    assert_eq!(nope.status, 404);
    assert_eq!(nope.json()["error"]["code"], "not_found");
    let lower = http
        .send(
            "GET",
            &serve.url("/api/inbox"),
            &[("authorization", &format!("bearer {token}"))],
            "",
        )
        .await;
    assert_eq!(lower.status, 200, "{}", lower.body);

    let deny = format!("/api/records/{key}/deny");
    let huge = json!({"version": item["version"], "reason": "x".repeat(300 * 1024)});
    let too_large = http.bot(serve, &deny, Some(&huge)).await;
    assert_eq!(too_large.status, 413, "{}", too_large.body);
    let long = json!({"version": item["version"], "reason": "x".repeat(5 * 1024)});
    let too_long = http.bot(serve, &deny, Some(&long)).await;
    too_long.error_says(422, "at most 4 KiB");
    assert_eq!(
        http.bot(serve, &format!("/api/records/{key}"), None)
            .await
            .json()["version"],
        item["version"],
        "nothing changed"
    );

    let mut browser = crate::support::serve::Http::default();
    sign_in(&mut browser, serve, DANA).await;
    let page = browser.get(&serve.url("/?state=bogus")).await;
    assert_eq!(page.status, 400);
    assert!(page.body.contains("awaiting_approval"));
    let record = browser.get(&serve.url(&format!("/records/{key}"))).await;
    let csrf = hidden(&record.body, "csrf").unwrap();
    let form = format!("csrf={csrf}&reason={}", "x".repeat(300 * 1024));
    let posted = browser
        .send(
            "POST",
            &serve.url(&format!("/records/{key}/deny")),
            &[("content-type", "application/x-www-form-urlencoded")],
            &form,
        )
        .await;
    assert_eq!(posted.status, 413);

    let denied = http
        .bot(
            serve,
            &deny,
            Some(&json!({"version": item["version"], "reason": "closed by support"})),
        )
        .await;
    assert_eq!(denied.status, 200, "{}", denied.body);
    let record = browser.get(&serve.url(&format!("/records/{key}"))).await;
    assert!(
        record
            .body
            .contains("id=\"state\">denied: it never ran</span>"),
        "{}",
        record.body
    );
}

/// `/api/inbox` names a namespace as the record has it (JSON escapes the
/// characters a screen would misread), so its own filter finds it: a
/// name with a right-to-left override, listed and then asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_lists_names_its_own_filter_finds() {
    let (_dir, url, mut scene) = Scene::on_sqlite().await;
    let namespace = format!("{}\u{202e}lanif", unique("tenant"));
    crate::support::claim_directly(
        &url,
        &namespace,
        &unique("call"),
        Some("{}"),
        Duration::from_millis(50),
    )
    .await;
    let query: String = url::form_urlencoded::byte_serialize(namespace.as_bytes()).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let item = loop {
        let reply = scene
            .http
            .bot(&scene.serve, &format!("/api/inbox?namespace={query}"), None)
            .await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(!reply.body.contains('\u{202e}'), "escaped in the JSON text");
        if let Some(item) = reply.json()["items"].as_array().and_then(|i| i.first()) {
            break item.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not found by its own name"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(item["namespace"], json!(namespace));
    assert_eq!(item["tool"], "charge_card");
}

/// Record text that tries to be markup or to reorder the page is shown as
/// text: the arguments, and the reason the model gave for the call (given
/// through the Rust API), with markup, a right-to-left override, a
/// zero-width space, an ANSI escape, variation selectors, the Braille
/// blank and a combining mark on a digit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_text_is_shown_escaped() {
    let (_dir, _, mut scene) = Scene::on_sqlite().await;
    let customer = "<script>alert(1)</script>\u{202e}evil";
    // Issue 50's invisible characters, after an id they would hide in.
    let reason =
        "<img src=x onerror=alert(2)>\u{202e}yes\u{200b}\x1b[2J ch_42\u{e0100}\u{fe0f}\u{180b}\u{2800}\u{301}";
    let _ = scene
        .agent
        .dispatch_one(
            delete_call(&unique("call"), customer),
            &tenant(&scene.namespace).reason(reason),
        )
        .await;
    let item = scene.listed().await;
    assert_eq!(item["reason"], reason, "the API keeps the text itself");
    let Scene {
        serve,
        http: mut bot,
        namespace,
        ..
    } = scene;
    let key = item["key"].as_str().unwrap();
    let mut browser = Http::default();
    crate::support::serve::sign_in(&mut browser, &serve, DANA).await;
    for path in [
        format!("/records/{key}"),
        format!("/?namespace={namespace}"),
    ] {
        let page = browser.get(&serve.url(&path)).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(
            !page.body.contains("<script>alert"),
            "{path}: raw markup from a record"
        );
        assert!(
            !page.body.contains('\u{202e}'),
            "{path}: a raw bidirectional override"
        );
        assert!(
            page.body
                .contains("&#60;script&#62;alert(1)&#60;/script&#62;\\u{202e}evil"),
            "{path}: {}",
            page.body
        );
        assert!(
            !page.body.contains("<img")
                && !page.body.contains([
                    '\u{200b}',
                    '\x1b',
                    '\u{e0100}',
                    '\u{fe0f}',
                    '\u{180b}',
                    '\u{2800}',
                    '\u{301}'
                ]),
            "{path}: the reason raw"
        );
        assert!(
            page.body
                .contains("&#60;img src=x onerror=alert(2)&#62;\\u{202e}yes\\u{200b}\\u{1b}[2J ch_42\\u{e0100}\\u{fe0f}\\u{180b}"),
            "{path}: the reason escaped: {}",
            page.body
        );
    }
    let api = bot.bot(&serve, &format!("/api/records/{key}"), None).await;
    assert!(!api.body.contains(['\u{202e}', '\u{200b}', '\x1b']));
    assert_eq!(
        api.json()["record"]["arguments"]["customer"],
        customer,
        "JSON keeps the text itself"
    );
    assert_eq!(api.json()["record"]["reason"], reason);
}
