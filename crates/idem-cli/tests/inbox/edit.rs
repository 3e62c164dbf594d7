//! Edit, then approve, on `idem serve`: through the JSON API
//! (`POST /api/records/{key}/edit`), a bot approves a call with other
//! arguments; on the record page, dana does, through the form and its
//! confirmation. The edited call is a new record, the original is denied
//! naming it and never runs: the agent's retry runs the edited call once.
//! A viewer, a missing or hostile `arguments` are refused with nothing
//! changed, and arguments that carry markup are shown escaped.

use serde_json::json;

use crate::support::serve::{hidden, listed, sign_in, waiting_call, Http, Scene, DANA};
use crate::support::tools::tenant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_through_the_api_is_a_new_call_and_the_original_never_runs() {
    let (_dir, _, scene) = Scene::on_sqlite().await;
    let (app, agent, namespace) = (scene.app, scene.agent, scene.namespace);
    let (serve, mut http) = (scene.serve, scene.http);
    let (call, item) =
        waiting_call(&agent, &mut http, &serve, &tenant(&namespace), "mallory").await;
    let key = item["key"].as_str().unwrap().to_owned();
    let edit = serve.url(&format!("/api/records/{key}/edit"));
    let body =
        |arguments: serde_json::Value| json!({"version": item["version"], "arguments": arguments});

    let eve = body(json!({"customer": "eve"}));
    let viewer = http
        .api("POST", &edit, &serve.viewer_token, Some(&eve))
        .await;
    assert_eq!(viewer.status, 403, "{}", viewer.body);
    let none = json!({"version": item["version"]});
    let none = http.api("POST", &edit, &serve.token, Some(&none)).await;
    none.error_says(422, "An edit needs `arguments`");
    let huge = json!({"customer": "x".repeat(70 * 1024)});
    for (bad, says) in [
        (json!([1]), "must be a JSON object, found an array"),
        (json!({"customer": "mallory"}), "approve it instead"),
        (huge, "the limit is 65536 bytes"),
    ] {
        let refused = http
            .api("POST", &edit, &serve.token, Some(&body(bad)))
            .await;
        refused.error_says(422, says);
    }
    let still = listed(&mut http, &serve, &namespace).await;
    assert_eq!(still["version"], item["version"], "nothing changed");

    let edited = http.api("POST", &edit, &serve.token, Some(&eve)).await;
    assert_eq!(edited.status, 200, "{}", edited.body);
    let edited = edited.json();
    assert_eq!(edited["done"], "edited; the edited call is approved");
    assert_eq!(edited["record"]["status"], "failed");
    let to = edited["record"]["steps"]["idem:edited"]["key"]
        .as_str()
        .unwrap();
    assert_eq!(edited["edited"]["key"], to);
    assert_eq!(edited["edited"]["status"], "approved");
    assert_eq!(edited["edited"]["arguments"], json!({"customer": "eve"}));

    // The model's retry of the original runs the edited call, once.
    for _ in 0..2 {
        let again = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
        let called = again.result.as_ref().expect("the edited call ran");
        assert_eq!(called.output, json!("deleted eve"));
        assert_eq!(called.meta.edited.as_ref().unwrap().by, "bot");
    }
    assert_eq!(app.deletions(), 1);
    // The same edit again: the original no longer waits.
    let twice = http.api("POST", &edit, &serve.token, Some(&eve)).await;
    assert_eq!(twice.status, 409, "{}", twice.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_on_the_record_page_is_confirmed_then_runs_the_edited_call_once() {
    let (_dir, _, scene) = Scene::on_sqlite().await;
    let (app, agent, namespace) = (scene.app, scene.agent, scene.namespace);
    let (serve, mut http) = (scene.serve, scene.http);
    // A customer name that would close the form's textarea if it were
    // written raw.
    let hostile = "</textarea><script>alert(1)</script>\u{202e}";
    let (call, item) = waiting_call(&agent, &mut http, &serve, &tenant(&namespace), hostile).await;
    let key = item["key"].as_str().unwrap().to_owned();
    let mut browser = Http::default();
    sign_in(&mut browser, &serve, DANA).await;
    let record = serve.url(&format!("/records/{key}"));
    let page = browser.get(&record).await;
    page.says(200, "Edit the arguments, then approve");
    // The form holds the arguments as JSON, escaped for the page and with
    // the invisible override written as a JSON escape.
    assert!(
        page.body.contains(
            r#"&#34;&#60;/textarea&#62;&#60;script&#62;alert(1)&#60;/script&#62;\u202e&#34;"#
        ),
        "{}",
        page.body
    );
    assert!(!page.body.contains("<script>alert"), "{}", page.body);
    let csrf = hidden(&page.body, "csrf").unwrap();
    let version = hidden(&page.body, "version").unwrap();
    let edit = serve.url(&format!("/records/{key}/edit"));

    // Not JSON: refused, nothing changed, what dana typed kept.
    let bad = browser
        .form(
            &edit,
            &[
                ("csrf", &csrf),
                ("version", &version),
                ("arguments", r#"{"customer": NaN}"#),
            ],
        )
        .await;
    bad.says(422, "The arguments are not JSON");
    bad.says(422, "{&#34;customer&#34;: NaN}");
    // Asked to confirm, with both argument sets restated; nothing yet.
    let eve = r#"{"customer": "eve"}"#;
    let fields = [
        ("csrf", csrf.as_str()),
        ("version", &version),
        ("arguments", eve),
    ];
    let confirm = browser.form(&edit, &fields).await;
    confirm.says(200, "The call as made is denied and never runs: delete_account with {&#34;customer&#34;:&#34;&#60;/textarea&#62;");
    confirm.says(
        200,
        "delete_account with exactly these arguments: {&#34;customer&#34;:&#34;eve&#34;}",
    );
    assert_eq!(
        hidden(&confirm.body, "arguments").as_deref(),
        Some("{&#34;customer&#34;: &#34;eve&#34;}")
    );
    let still = listed(&mut http, &serve, &namespace).await;
    assert_eq!(still["version"], item["version"], "nothing changed");

    // Confirmed: the edited call's page, approved by dana.
    let confirmed = [fields.as_slice(), &[("confirmed", "yes")]].concat();
    let done = browser.form(&edit, &confirmed).await;
    assert_eq!(done.status, 303, "{}", done.body);
    let to = done.header("location")[0].clone();
    assert_ne!(to, format!("/records/{key}"));
    let new = browser.get(&serve.url(&to)).await;
    new.says(200, "Done: edited. This is the edited call, approved");
    let original = browser.get(&record).await;
    original.says(
        200,
        "dana edited the arguments of this call: it never runs.",
    );
    assert!(
        original.body.contains(&format!(r#"<a href="{to}">"#)),
        "{}",
        original.body
    );

    // The agent's retry of the original: the edited call runs, once.
    for _ in 0..2 {
        let again = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
        let called = again.result.as_ref().expect("the edited call ran");
        assert_eq!(called.output, json!("deleted eve"));
    }
    assert_eq!(app.deletions(), 1);
}
