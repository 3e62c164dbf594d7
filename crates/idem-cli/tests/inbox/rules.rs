//! Approval rules in the approvers file, as the inbox holds them: a
//! two-person rule through the JSON API (the call runs on the second
//! distinct approval, each in the audit log), an approver the rule does
//! not list, the asker refused by `forbid_self_approval` but free to deny,
//! and the same rules on the pages' form posts.

use std::time::Duration;

use idem::prelude::*;
use serde_json::{json, Value};

use crate::support::serve::{catalog, hidden, sign_in, waiting_call, Http, Reply, Serve, DANA};
use crate::support::tools::{dispatcher, still_waits, tenant, App};
use crate::support::{schema, unique};

/// A finance team's rule: deleting an account takes two of dana, erin and
/// frank, and never the one who asked.
const RULES: &str = r#"
[[rule]]
name = "deletions"
tools = ["delete_*"]
namespaces = ["finance-*"]
approvers = ["dana", "erin", "frank"]
required = 2
forbid_self_approval = true
"#;

/// An agent whose calls do not wait, and `idem serve` with [`RULES`] and
/// the token approvers erin, frank and gus.
async fn finance(url: &str) -> (App, Dispatcher<App>, Serve) {
    let app = App::default();
    let agent = dispatcher(url, &app, Duration::ZERO).await;
    let serve = Serve::with_rules(url, Some(&catalog()), &[], &["erin", "frank", "gus"], RULES);
    (app, agent, serve)
}

/// Calls in `namespace` (`finance-…/NAME`) by the agent of principal
/// NAME.
fn asker(namespace: &str) -> RunContext {
    let name = namespace.rsplit('/').next().unwrap();
    tenant(namespace).principal(name)
}

/// `namespace` asks to delete `customer`'s account: the inbox item.
async fn asked(
    agent: &Dispatcher<App>,
    http: &mut Http,
    serve: &Serve,
    namespace: &str,
    customer: &str,
) -> Value {
    waiting_call(agent, http, serve, &asker(namespace), customer)
        .await
        .1
}

/// `who` (a token approver) reads the record under `key` and makes
/// `action` on the version read (or on `version` when given).
async fn decide(
    http: &mut Http,
    serve: &Serve,
    who: &str,
    key: &str,
    action: &str,
    version: Option<&str>,
) -> Reply {
    let token = &serve.tokens[who];
    let read = http
        .api(
            "GET",
            &serve.url(&format!("/api/records/{key}")),
            token,
            None,
        )
        .await
        .json();
    let version = version.map_or_else(|| read["version"].clone(), |v| json!(v));
    let body =
        json!({"version": version, "note": format!("checked by {who}"), "reason": "not this one"});
    http.api(
        "POST",
        &serve.url(&format!("/api/records/{key}/{action}")),
        token,
        Some(&body),
    )
    .await
}

/// A call of `finance-…/ops` awaiting approval under [`RULES`], and dana
/// signed in on its page.
struct Page {
    app: App,
    agent: Dispatcher<App>,
    serve: Serve,
    bot: Http,
    browser: Http,
    key: String,
    csrf: String,
    version: String,
}

async fn on_the_page(url: &str) -> Page {
    let (app, agent, serve) = finance(url).await;
    let mut bot = Http::default();
    let namespace = format!("{}/ops", unique("finance"));
    let item = asked(&agent, &mut bot, &serve, &namespace, "eve").await;
    let key = item["key"].as_str().unwrap().to_owned();
    let mut browser = Http::default();
    sign_in(&mut browser, &serve, DANA).await;
    let page = browser.get(&serve.url(&format!("/records/{key}"))).await;
    let csrf = hidden(&page.body, "csrf").unwrap();
    let version = hidden(&page.body, "version").unwrap();
    Page {
        app,
        agent,
        serve,
        bot,
        browser,
        key,
        csrf,
        version,
    }
}

fn message(reply: &Reply) -> String {
    reply.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Two distinct approvers through the API: the first approval is 1 of 2
/// and runs nothing, the same approver again is refused, an approver the
/// rule does not list is refused, the second approval runs the call once,
/// and the audit trail has both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_person_rule_runs_the_call_on_the_second_distinct_approval() {
    let (_dir, url) = crate::support::sqlite();
    let (app, agent, serve) = finance(&url).await;
    let mut http = Http::default();
    let namespace = format!("{}/ops", unique("finance"));
    let (call, item) = waiting_call(&agent, &mut http, &serve, &asker(&namespace), "eve").await;
    let key = item["key"].as_str().unwrap().to_owned();

    for action in ["approve", "deny"] {
        let gus = decide(&mut http, &serve, "gus", &key, action, None).await;
        assert_eq!(gus.status, 403, "{}", gus.body);
        assert_eq!(gus.json()["error"]["code"], "rule");
        assert!(
            message(&gus).starts_with(&format!("Rule “deletions” lets only dana, erin and frank decide calls of delete_account in namespace {namespace}; gus is not one of them.")),
            "{}",
            gus.body
        );
    }

    let erin = decide(&mut http, &serve, "erin", &key, "approve", None).await;
    assert_eq!(erin.status, 200, "{}", erin.body);
    schema::check(&erin.json(), "decided");
    assert_eq!(
        erin.json()["done"],
        "approval 1 of 2 recorded; it runs once dana or frank approves too"
    );
    assert_eq!(
        erin.json()["approvals"],
        json!({"given": 1, "required": 2, "by": ["erin"]})
    );
    assert_eq!(erin.json()["record"]["status"], "awaiting_approval");
    still_waits(&agent, &call, &namespace).await;
    assert_eq!(app.deletions(), 0);

    let twice = decide(&mut http, &serve, "erin", &key, "approve", None).await;
    assert_eq!(twice.status, 409, "{}", twice.body);
    assert_eq!(twice.json()["error"]["code"], "approved_before");
    assert_eq!(
        message(&twice),
        "You (erin) approved this call already: it has 1 of the 2 approvals rule “deletions” needs, and the next must come from dana or frank. Nothing was changed."
    );

    // frank decides on the version he read before erin's approval.
    let old = item["version"].as_str().unwrap();
    let stale = decide(&mut http, &serve, "frank", &key, "approve", Some(old)).await;
    assert_eq!(stale.status, 409, "{}", stale.body);
    assert!(
        message(&stale).contains("approval_added by erin"),
        "{}",
        stale.body
    );

    let frank = decide(&mut http, &serve, "frank", &key, "approve", None).await;
    assert_eq!(frank.status, 200, "{}", frank.body);
    assert_eq!(frank.json()["done"], "approved");
    assert_eq!(
        frank.json()["approvals"],
        json!({"given": 2, "required": 2, "by": ["erin", "frank"]})
    );
    let ran = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
    assert_eq!(ran.result.expect("runs once").output, json!("deleted eve"));
    let dup = agent.dispatch_one(call, &tenant(&namespace)).await;
    assert!(dup.result.unwrap().meta.deduplicated);
    assert_eq!(app.deletions(), 1);

    let shown = http
        .bot(&serve, &format!("/api/records/{key}"), None)
        .await
        .json();
    assert_eq!(shown["record"]["approval"]["approved_by"], "frank");
    let trail: Vec<(String, String, String)> = shown["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let text = |f: &str| e[f].as_str().unwrap_or_default().to_owned();
            (text("action"), text("by"), text("reason"))
        })
        .collect();
    let said = |by: &str| format!("checked by {by}");
    assert_eq!(
        trail,
        [
            ("approval_added".into(), "erin".into(), said("erin")),
            ("approved".into(), "frank".into(), said("frank")),
        ],
        "only the two approvals changed the record"
    );
}

/// The one who asked (the agent's principal: erin) may not approve
/// their own call, another may; and the asker may still deny it, which
/// ends it after one approval of two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_asker_cannot_approve_their_own_call_but_may_deny_it() {
    let (_dir, url) = crate::support::sqlite();
    let (app, agent, serve) = finance(&url).await;
    let mut http = Http::default();
    let namespace = format!("{}/erin", unique("finance"));
    let item = asked(&agent, &mut http, &serve, &namespace, "eve").await;
    let key = item["key"].as_str().unwrap();

    let own = decide(&mut http, &serve, "erin", key, "approve", None).await;
    assert_eq!(own.status, 403, "{}", own.body);
    assert_eq!(own.json()["error"]["code"], "rule");
    assert!(
        message(&own).starts_with(&format!("Rule “deletions” forbids approving your own call: erin asked for it (namespace {namespace}).")),
        "{}",
        own.body
    );
    let frank = decide(&mut http, &serve, "frank", key, "approve", None).await;
    assert_eq!(frank.status, 200, "{}", frank.body);
    // erin is the asker: only dana is left to make the count.
    assert_eq!(
        frank.json()["done"],
        "approval 1 of 2 recorded; it runs once dana approves too"
    );

    let denied = decide(&mut http, &serve, "erin", key, "deny", None).await;
    assert_eq!(denied.status, 200, "{}", denied.body);
    assert_eq!(denied.json()["done"], "denied");
    assert_eq!(denied.json()["record"]["status"], "failed");
    assert_eq!(app.deletions(), 0);
}

/// The pages hold the same rules: the confirmation says this is approval
/// 1 of 2, the notice after it says so, the same person again is refused
/// before any confirmation, and so is an approval of one's own call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_hold_the_rules_on_their_form_posts() {
    let (_dir, url) = crate::support::sqlite();
    let Page {
        app,
        agent,
        serve,
        mut bot,
        mut browser,
        key,
        csrf,
        version,
    } = on_the_page(&url).await;
    let key = key.as_str();
    let record = serve.url(&format!("/records/{key}"));
    let approve = serve.url(&format!("/records/{key}/approve"));
    let confirm = browser
        .form(&approve, &[("csrf", &csrf), ("version", &version)])
        .await;
    confirm.says(200, "This is approval 1 of 2 under rule “deletions”: nothing runs yet. delete_account runs once, with exactly these arguments, when erin or frank approves too");
    let done = browser
        .form(
            &approve,
            &[("csrf", &csrf), ("version", &version), ("confirmed", "yes")],
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let page = browser.get(&record).await;
    assert!(
        page.body
            .contains("Done: approval 1 of 2 recorded; it runs once erin or frank approves too."),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(
            r#"<strong class="action">approval_added</strong> by <span class="by">dana</span>"#
        ),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<dt>Approvals</dt><dd>1 of 2 approvals so far (by dana)</dd>"),
        "the record page says how far it is: {}",
        page.body
    );
    assert_eq!(app.deletions(), 0);

    let version = hidden(&page.body, "version").unwrap();
    let twice = browser
        .form(&approve, &[("csrf", &csrf), ("version", &version)])
        .await;
    twice.says(409, "You (dana) approved this call already");

    // dana's own call.
    let own_ns = format!("{}/dana", unique("finance"));
    let own = asked(&agent, &mut bot, &serve, &own_ns, "mallory").await;
    let own_key = own["key"].as_str().unwrap();
    let refused = browser
        .form(
            &serve.url(&format!("/records/{own_key}/approve")),
            &[
                ("csrf", &csrf),
                ("version", own["version"].as_str().unwrap()),
            ],
        )
        .await;
    refused.says(403, "forbids approving your own call: dana asked for it");

    // erin makes the count on the first call: it runs once.
    let erin = decide(&mut bot, &serve, "erin", key, "approve", None).await;
    assert_eq!(erin.status, 200, "{}", erin.body);
    assert_eq!(erin.json()["done"], "approved");
}

/// A decision refused once the page is out of date (erin's approval came
/// in between) shows the record as it is now, with what dana typed still
/// in its field; and the confirmation asks before anything is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_decision_keeps_what_the_person_typed() {
    let (_dir, url) = crate::support::sqlite();
    let mut page = on_the_page(&url).await;
    let (csrf, version, key) = (page.csrf.clone(), page.version.clone(), page.key.clone());
    let (serve, key) = (&page.serve, key.as_str());
    let deny = serve.url(&format!("/records/{key}/deny"));
    let reason = "the customer wrote back: keep the account open";

    let confirm = page
        .browser
        .form(
            &deny,
            &[("csrf", &csrf), ("version", &version), ("reason", reason)],
        )
        .await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    assert!(
        confirm.body.contains("<h1>Confirm: deny this call?</h1>")
            && confirm.body.contains("Nothing is done until you confirm."),
        "{}",
        confirm.body
    );

    let erin = decide(&mut page.bot, serve, "erin", key, "approve", None).await;
    assert_eq!(erin.status, 200, "{}", erin.body);
    let refused = page
        .browser
        .form(
            &deny,
            &[
                ("csrf", &csrf),
                ("version", &version),
                ("reason", reason),
                ("confirmed", "yes"),
            ],
        )
        .await;
    refused.says(409, &format!(">{reason}</textarea>"));
    assert_eq!(page.app.deletions(), 0);
}

/// The rules `idem serve` holds are in force wherever a decision is
/// written: `idem approve` and `idem deny` without `--approvers` (the
/// command every pending call's message prints) refuse the asker's own
/// approval, a name the file does not list and one the rule does not
/// list; two others approve it and it runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idem_approve_without_the_file_holds_the_rules_idem_serve_published() {
    let (_dir, url) = crate::support::sqlite();
    let (app, agent, serve) = finance(&url).await;
    let idem = crate::support::Idem::new(&url);
    let mut http = Http::default();
    let namespace = format!("{}/erin", unique("finance"));
    let (call, item) = waiting_call(&agent, &mut http, &serve, &asker(&namespace), "eve").await;
    let key = item["key"].as_str().unwrap();

    idem.run(&["approve", key, "--by", "erin"]).await.fails(
        1,
        &format!("Rule “deletions” forbids approving your own call: erin asked for it (namespace {namespace})."),
    );
    idem.run(&["approve", key, "--by", "bob"])
        .await
        .fails(1, "bob is not an approver in the approval rules in force");
    idem.run(&["approve", key, "--by", "gus"]).await.fails(
        1,
        "Rule “deletions” lets only dana, erin and frank decide calls of delete_account",
    );
    idem.run(&["deny", key, "--by", "bob", "--reason", "mine"])
        .await
        .fails(1, "bob is not an approver in the approval rules in force");
    let shown = idem.run(&["show", key, "--json"]).await.json();
    assert_eq!(shown["status"], "awaiting_approval", "nothing was decided");

    let out = idem.run(&["approve", key, "--by", "frank"]).await;
    assert!(
        out.ok().contains("approval 1 of 2 recorded")
            && out
                .stdout
                .contains("under rule “deletions”: nothing runs until dana approves too"),
        "{}",
        out.stdout
    );
    assert_eq!(app.deletions(), 0);
    let out = idem.run(&["approve", key, "--by", "dana"]).await;
    assert!(out.ok().starts_with("approved "), "{}", out.stdout);
    let ran = agent.dispatch_one(call, &asker(&namespace)).await;
    assert_eq!(
        ran.result.expect("runs once approved").output,
        json!("deleted eve")
    );
    assert_eq!(app.deletions(), 1);
    let events = idem.run(&["log", key, "--json"]).await.json();
    let actions: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert!(
        actions.ends_with(&["approval_added", "approved"]),
        "only the two allowed approvals were written: {actions:?}"
    );
}
