//! Two `idem serve` on one store, as behind a load balancer: a sign-in on
//! one is a sign-in on the other; signing out on one, or
//! `idem approver revoke`, ends the session on both at once, whatever
//! copy of the cookie is left; the session id is new at sign-in; a
//! restart signs nobody out; one two-person rule holds across both; and
//! sign-ins, failures, sign-outs and revocations are in `idem log`.
//! On SQLite (one file, two processes) everywhere, and on the kit's
//! Redis and PostgreSQL servers.

use std::time::Duration;

use idem::prelude::*;
use serde_json::{json, Value};

use crate::support::http::encode;
use crate::support::serve::{
    approver_entry, catalog, hidden, listed, sign_in, Http, Reply, Serve, VIC,
};
use crate::support::tools::{delete_call, dispatcher, tenant, App};
use crate::support::{unique, Idem};

crate::support::on_every_store_url![
    a_session_is_shared_by_two_instances_and_ends_on_both_at_once,
    a_two_person_rule_holds_across_two_instances,
];

/// The password of the approver each test adds under a name of its own
/// (the server stores are shared by the binary's tests, and a revocation
/// is per name).
const PASSWORD: &str = "a password of this test only";

/// `idem serve` on `url` with an approver of its own (returned), and a
/// second instance beside it: the same store, the same approvers file.
async fn two_instances(
    url: &str,
    rules: &str,
    bots: &[&str],
    extra: &[&str],
) -> (String, Serve, Serve) {
    // The store must exist before `idem serve` opens it.
    let app = App::default();
    let _agent = dispatcher(url, &app, Duration::ZERO).await;
    let name = unique("dana");
    let mut file = approver_entry(&name, PASSWORD);
    file.push_str(rules);
    let a = Serve::with_rules(url, Some(&catalog()), extra, bots, &file);
    let b = a.another();
    (name, a, b)
}

/// Whether `http`'s cookie signs `name` in on `serve`.
async fn signed_in_as(http: &mut Http, serve: &Serve, name: &str) -> bool {
    let page = http.get(&serve.url("/")).await;
    match page.status {
        200 => page
            .body
            .contains(&format!("<strong id=\"signed-in-as\">{name}</strong>")),
        303 => {
            assert_eq!(page.header("location"), ["/login"]);
            false
        }
        other => panic!("GET / answered {other}: {}", page.body),
    }
}

/// A browser with a copy of `http`'s cookies.
fn copy_of(http: &Http) -> Http {
    let mut copy = Http::default();
    copy.cookies = http.cookies.clone();
    copy
}

/// Sign in on A, the cookie works on B; sign out on A, a copy of it is
/// refused on B at once; `idem approver revoke NAME` ends NAME's sessions
/// on both (vic's stay); NAME may sign in again; and the audit log has
/// each step, with the address.
async fn a_session_is_shared_by_two_instances_and_ends_on_both_at_once(url: &str) {
    let (dana, a, mut b) = two_instances(url, "", &[], &[]).await;
    let who = (dana.as_str(), PASSWORD);

    // An id planted before sign-in is not the one signed in.
    let mut browser = Http::default();
    browser
        .cookies
        .insert("idem_session".into(), "planted-by-someone".into());
    sign_in(&mut browser, &a, who).await;
    assert_ne!(browser.cookies["idem_session"], "planted-by-someone");
    let mut planted = Http::default();
    planted
        .cookies
        .insert("idem_session".into(), "planted-by-someone".into());
    assert!(!signed_in_as(&mut planted, &b, &dana).await);

    let mut copy = copy_of(&browser);
    assert!(signed_in_as(&mut copy, &b, &dana).await, "A's sign-in on B");
    // The session's CSRF token is the same on both: a form from A's page
    // may be posted to B.
    let csrf_a = hidden(&browser.get(&a.url("/")).await.body, "csrf").unwrap();
    let csrf_b = hidden(&copy.get(&b.url("/")).await.body, "csrf").unwrap();
    assert_eq!(csrf_a, csrf_b);
    assert!(
        !csrf_a.contains(&browser.cookies["idem_session"]),
        "the token is not the cookie"
    );
    // A restart of B signs nobody out.
    tokio::task::block_in_place(|| b.restart());
    assert!(signed_in_as(&mut copy, &b, &dana).await, "after a restart");

    let out = browser.form(&a.url("/logout"), &[("csrf", &csrf_a)]).await;
    assert_eq!(out.status, 303, "{}", out.body);
    assert!(
        !signed_in_as(&mut copy, &b, &dana).await,
        "ended on B at once"
    );
    assert!(!signed_in_as(&mut copy, &a, &dana).await, "and on A");
    assert_eq!(copy.get(&b.url("/events")).await.status, 401);
    assert_eq!(copy.get(&b.url("/inbox/rows")).await.status, 401);

    // A wrong password, on B, with an address header B does not trust.
    let wrong = wrong_password(&mut browser, &b, &dana).await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);

    // dana on A and on B, vic on B; then her sessions are revoked.
    let mut on_a = Http::default();
    sign_in(&mut on_a, &a, who).await;
    let mut on_b = Http::default();
    sign_in(&mut on_b, &b, who).await;
    let mut vic = Http::default();
    sign_in(&mut vic, &b, VIC).await;
    let ops = unique("ops");
    let idem = Idem::new(url);
    let revoked = idem
        .run(&[
            "approver",
            "revoke",
            &dana,
            "--by",
            &ops,
            "--reason",
            "laptop lost",
        ])
        .await;
    revoked.says(&format!("ended every session of {dana}"));
    for serve in [&a, &b] {
        for http in [&mut on_a, &mut on_b] {
            assert!(
                !signed_in_as(http, serve, &dana).await,
                "revoked everywhere"
            );
        }
        assert!(
            signed_in_as(&mut vic, serve, VIC.0).await,
            "vic's session stays"
        );
    }
    // A revocation is not a ban: she may sign in again.
    let mut again = Http::default();
    sign_in(&mut again, &b, who).await;
    assert!(signed_in_as(&mut copy_of(&again), &a, &dana).await);

    // The audit log says all of it, about no record.
    let log = idem.run(&["--json", "log", "--limit", "0"]).await.json();
    let events: Vec<(String, String, String)> = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["tool"] == "idem:inbox")
        .filter(|e| e["by"] == dana.as_str() || e["by"] == ops.as_str())
        .map(|e| {
            assert_eq!((&e["before"], &e["after"]), (&Value::Null, &Value::Null));
            let text = |f: &str| e[f].as_str().unwrap_or_default().to_owned();
            (text("action"), text("by"), text("reason"))
        })
        .collect();
    let from = "from 127.0.0.1".to_owned();
    let expected = [
        ("signed_in", dana.clone(), from.clone()),
        ("signed_out", dana.clone(), from.clone()),
        (
            "sign_in_failed",
            dana.clone(),
            format!("wrong name or password, {from}"),
        ),
        ("signed_in", dana.clone(), from.clone()),
        ("signed_in", dana.clone(), from.clone()),
        (
            "sessions_revoked",
            ops.clone(),
            format!("every session of {dana}: laptop lost"),
        ),
        ("signed_in", dana.clone(), from.clone()),
    ];
    let expected: Vec<(String, String, String)> = expected
        .into_iter()
        .map(|(a, b, c)| (a.to_owned(), b, c))
        .collect();
    assert_eq!(events, expected);
    let text = idem.run(&["log", "--limit", "0"]).await;
    let line = text
        .ok()
        .lines()
        .find(|l| l.contains("sessions_revoked") && l.contains(&ops))
        .unwrap_or_else(|| panic!("no revocation in `idem log`: {}", text.stdout))
        .to_owned();
    assert!(
        line.contains("idem:inbox") && line.contains(" - "),
        "{line}"
    );
    // Sessions are bookkeeping: not records an operator lists.
    let listed = idem.run(&["--json", "ls", "--limit", "0"]).await.json();
    assert!(!listed.to_string().contains("idem:session"), "{}", listed);
}

/// A sign-in as `name` with a wrong password on `serve`, from
/// 203.0.113.7 as an `X-Forwarded-For` header says.
async fn wrong_password(http: &mut Http, serve: &Serve, name: &str) -> Reply {
    let login = http.get(&serve.url("/login")).await;
    let csrf = hidden(&login.body, "csrf").unwrap();
    let body = format!("csrf={csrf}&name={}&password=guess", encode(name));
    let headers = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("x-forwarded-for", "203.0.113.7"),
    ];
    http.send("POST", &serve.url("/login"), &headers, &body)
        .await
}

/// A call needing two approvals: the first given on A, the second on B,
/// it runs once; the same approver again on B is refused. Behind a proxy
/// that names the client's address, the audit log has it.
async fn a_two_person_rule_holds_across_two_instances(url: &str) {
    let rules = r#"
[[rule]]
name = "deletions"
tools = ["delete_*"]
namespaces = ["shared-*"]
approvers = ["erin", "frank"]
required = 2
"#;
    let header = ["--client-address-header", "X-Forwarded-For"];
    let (dana, a, b) = two_instances(url, rules, &["erin", "frank"], &header).await;
    let app = App::default();
    let agent = dispatcher(url, &app, Duration::ZERO).await;
    let namespace = unique("shared");
    let call = delete_call(&unique("call"), "eve");
    let first = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
    assert!(
        matches!(first.result, Err(IdemError::ApprovalPending { .. })),
        "{:?}",
        first.result
    );
    let mut http = Http::default();
    let item = listed(&mut http, &a, &namespace).await;
    let key = item["key"].as_str().unwrap().to_owned();
    let erin = approve(&mut http, &a, &key, "erin").await;
    assert_eq!(erin.status, 200, "{}", erin.body);
    assert_eq!(erin.json()["approvals"]["given"], 1);
    let twice = approve(&mut http, &b, &key, "erin").await;
    assert_eq!(twice.status, 409, "{}", twice.body);
    assert_eq!(twice.json()["error"]["code"], "approved_before");
    let frank = approve(&mut http, &b, &key, "frank").await;
    assert_eq!(frank.status, 200, "{}", frank.body);
    assert_eq!(frank.json()["done"], "approved");
    let ran = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
    assert_eq!(
        ran.result.expect("runs once approved").output,
        json!("deleted eve")
    );
    let again = agent.dispatch_one(call, &tenant(&namespace)).await;
    assert!(again.result.is_ok());
    assert_eq!(app.deletions(), 1, "exactly once");

    let wrong = wrong_password(&mut http, &b, &dana).await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    let log = Idem::new(url)
        .run(&["--json", "log", "--limit", "0"])
        .await
        .json();
    let failed = log["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "sign_in_failed" && e["by"] == dana.as_str())
        .expect("the failure is in the log")
        .clone();
    assert_eq!(
        failed["reason"],
        "wrong name or password, from 203.0.113.7 (via 127.0.0.1)"
    );
}

/// `who` (a token approver) approves the call under `key` on `serve`, on
/// the version it reads there.
async fn approve(http: &mut Http, serve: &Serve, key: &str, who: &str) -> Reply {
    let token = &serve.tokens[who];
    let url = serve.url(&format!("/api/records/{key}"));
    let version = http.api("GET", &url, token, None).await.json()["version"].clone();
    let body = json!({"version": version, "note": "checked"});
    http.api("POST", &format!("{url}/approve"), token, Some(&body))
        .await
}
