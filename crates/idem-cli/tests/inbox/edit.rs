//! `POST /api/records/{key}/edit` on `idem serve`: a bot approves a call
//! with other arguments; the edited call is a new record, approved, the
//! original is denied naming it and never runs; a viewer, a missing or
//! hostile `arguments` are refused with nothing changed.

use idem::prelude::*;
use serde_json::json;

use crate::support::serve::{listed, Scene};
use crate::support::tools::{delete_call, tenant};
use crate::support::unique;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_through_the_api_is_a_new_call_and_the_original_never_runs() {
    let (_dir, _, scene) = Scene::on_sqlite().await;
    let (app, agent, namespace) = (scene.app, scene.agent, scene.namespace);
    let (serve, mut http) = (scene.serve, scene.http);
    let call = delete_call(&unique("call"), "mallory");
    let first = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
    assert!(matches!(
        first.result,
        Err(IdemError::ApprovalPending { .. })
    ));
    let item = listed(&mut http, &serve, &namespace).await;
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

    // The model's retry of the original: denied, told of the edit.
    let again = agent.dispatch_one(call, &tenant(&namespace)).await;
    let Err(IdemError::ApprovalDenied { reason, .. }) = &again.result else {
        panic!("the original is denied: {:?}", again.result)
    };
    assert!(reason.starts_with("bot edited the arguments"), "{reason}");
    assert!(reason.contains(to), "{reason}");
    assert_eq!(app.deletions(), 0);
    // The same edit again: the original no longer waits.
    let twice = http.api("POST", &edit, &serve.token, Some(&eve)).await;
    assert_eq!(twice.status, 409, "{}", twice.body);
}
