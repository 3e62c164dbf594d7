//! `idem serve --notify`: a loopback webhook receiver that checks every
//! signature and counts deliveries, while `idem serve` is stopped and
//! started again on the same store, and while two instances share one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac};
use idem_testkit::TempDir;
use serde_json::{json, Value};
use sha2::Sha256;

use crate::support::serve::{catalog, listed, sign_in, Http, Serve, DANA, VIC};
use crate::support::tools::{delete_call, dispatcher, tenant, App};
use crate::support::{unique, Idem};

crate::support::on_every_store_url![
    webhooks_are_delivered_once_per_event_and_endpoint_across_a_restart,
    two_instances_on_one_store_deliver_each_event_once,
];

/// The secret the JSON endpoint's bodies are signed with.
pub(super) const SECRET: &str = "test webhook secret, 32 bytes ok";

/// One request the receiver got.
#[derive(Debug, Clone)]
pub(super) struct Got {
    /// `hook` (JSON) or `slack`.
    path: String,
    id: String,
    pub(super) kind: String,
    attempt: u32,
    /// What the receiver answered.
    answered: u16,
    pub(super) body: Value,
}

/// A webhook receiver on loopback: checks `/hook`'s signatures, answers
/// the first attempt of every decided event 503 (so that it is retried),
/// every request to `/down` 502, and keeps everything it got.
#[derive(Clone, Default)]
pub(super) struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
    bad_signatures: Arc<Mutex<u32>>,
}

/// Whether `header` (`t=UNIX,v1=HEX`) signs `body` with [`SECRET`], within
/// five minutes of now.
fn signed(header: &str, body: &[u8]) -> bool {
    let mut t = None;
    let mut v1 = None;
    for part in header.split(',') {
        match part.split_once('=') {
            Some(("t", value)) => t = value.parse::<u64>().ok(),
            Some(("v1", value)) => v1 = Some(value.to_owned()),
            _ => {}
        }
    }
    let (Some(t), Some(v1)) = (t, v1) else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    if now.abs_diff(t) > 300 {
        return false;
    }
    let Ok(expected) = (0..v1.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(v1.get(i..i + 2).unwrap_or("zz"), 16))
        .collect::<Result<Vec<u8>, _>>()
    else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

async fn receive(
    State(receiver): State<Receiver>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    if path == "hook" && !signed(&header("idem-signature"), &body) {
        *receiver.bad_signatures.lock().unwrap() += 1;
        return StatusCode::UNAUTHORIZED;
    }
    let attempt: u32 = header("idem-delivery-attempt").parse().unwrap_or(0);
    let kind = header("idem-event");
    let answered = match (path.as_str(), kind.as_str(), attempt) {
        ("down", _, _) => StatusCode::BAD_GATEWAY,
        (_, "decided", 1) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::OK,
    };
    receiver.got.lock().unwrap().push(Got {
        path,
        id: header("idem-event-id"),
        kind,
        attempt,
        answered: answered.as_u16(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    answered
}

impl Receiver {
    /// Serve on a free loopback port: its base URL.
    pub(super) async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/{path}", post(receive))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        base
    }

    /// What `path` got about the records of `keys` (a store on a shared
    /// server holds other tests' records too).
    pub(super) fn about(&self, path: &str, keys: &[String]) -> Vec<Got> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|g| g.path == path && keys.contains(&g.body_key()))
            .cloned()
            .collect()
    }

    /// The deliveries of `path` about `keys` it accepted (answered 200).
    pub(super) fn accepted(&self, path: &str, keys: &[String]) -> Vec<Got> {
        let mut got = self.about(path, keys);
        got.retain(|g| g.answered == 200);
        got
    }

    /// Wait (at most 20 s) until `path` accepted an event of `kind` for
    /// `key`: that delivery.
    pub(super) async fn wait_for(&self, path: &str, kind: &str, key: &str) -> Got {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(got) = self
                .accepted(path, &[key.to_owned()])
                .into_iter()
                .find(|g| g.kind == kind)
            {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "no {kind} event for {key} at /{path} within 20 s: {:#?}",
                self.got.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Got {
    /// The record's key the body speaks of (JSON: `key`; Slack: the
    /// button's link).
    fn body_key(&self) -> String {
        match self.body["key"].as_str() {
            Some(key) => key.to_owned(),
            None => self.body["blocks"][2]["elements"][0]["url"]
                .as_str()
                .and_then(|u| u.rsplit('/').next())
                .unwrap_or("")
                .to_owned(),
        }
    }
}

/// Events, deliveries and duplicates among what `path` accepted.
pub(super) fn figures(got: &[Got]) -> (usize, usize, usize) {
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for g in got {
        *by_id.entry(&g.id).or_default() += 1;
    }
    let duplicates = by_id.values().map(|n| n - 1).sum();
    (by_id.len(), got.len(), duplicates)
}

/// Three calls wait for approval in two namespaces; the JSON endpoint is
/// told of everything, the Slack one (from the approvers file) of one
/// namespace's pending and decided events. One call is approved, the
/// server stops, another is denied while it is down, and it starts again:
/// every event reaches each endpoint once — the decision made while it was
/// down included, the events told before the restart not again — every
/// signature checks, and a refused first attempt is retried.
async fn webhooks_are_delivered_once_per_event_and_endpoint_across_a_restart(url: &str) {
    let receiver = Receiver::default();
    let base = receiver.start().await;
    let secrets = TempDir::new("idem-notify").unwrap();
    let secret_file = secrets.path().join("hook.secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let (billing, support) = (unique("billing"), unique("support"));
    let slack = format!(
        "[[notify]]\nname = \"slack\"\nurl = \"{base}/slack\"\nformat = \"slack\"\nnamespaces = [\"{billing}\"]\nevents = [\"pending\", \"decided\"]\n"
    );
    let app = App::default();
    let agent = dispatcher(url, &app, Duration::ZERO).await;
    let hook = format!("{base}/hook");
    let secret_arg = secret_file.to_str().unwrap();
    let mut serve = Serve::with_rules(
        url,
        Some(&catalog()),
        &[
            "--notify",
            &hook,
            "--notify-secret-file",
            secret_arg,
            "--overdue",
            "2s",
            "--notify-backoff",
            "50ms",
        ],
        &[],
        &slack,
    );
    let mut http = Http::default();

    let forged = "<https://evil.example|Approve> <!channel> & co";
    for (customer, namespace) in [("ann", &support), (forged, &billing), ("bob", &support)] {
        let _ = agent
            .dispatch_one(delete_call(&unique("call"), customer), &tenant(namespace))
            .await;
    }
    let waiting: Vec<Value> = {
        let reply = http
            .bot(&serve, &format!("/api/inbox?namespace={support}"), None)
            .await;
        let mut items = reply.json()["items"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        items.push(listed(&mut http, &serve, &billing).await);
        items
    };
    assert_eq!(waiting.len(), 3, "{waiting:#?}");
    let key = |i: usize| waiting[i]["key"].as_str().unwrap().to_owned();
    let (ann_or_bob, other, billed) = (key(0), key(1), key(2));

    // Pending at once, overdue after 2 s, on the JSON endpoint; pending of
    // the billing call only on Slack, its text unable to forge a link.
    for k in [&ann_or_bob, &other, &billed] {
        receiver.wait_for("hook", "pending", k).await;
        receiver.wait_for("hook", "overdue", k).await;
    }
    let posted = receiver.wait_for("slack", "pending", &billed).await;
    let text = posted.body["blocks"][1]["text"]["text"].as_str().unwrap();
    assert!(
        text.contains("&lt;https[:]//evil.example|Approve&gt; &lt;!channel&gt; &amp; co"),
        "{text}"
    );
    assert!(!text.contains('<'), "{text}");
    assert_eq!(
        posted.body["blocks"][2]["elements"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "no decision buttons without Slack's interactivity set up"
    );
    assert_eq!(
        posted.body["blocks"][2]["elements"][0]["url"],
        serve.url(&format!("/records/{billed}"))
    );
    let pending = receiver.wait_for("hook", "pending", &billed).await;
    assert_eq!(pending.body["tool"], "delete_account");
    assert_eq!(pending.body["namespace"], json!(billing));
    assert_eq!(pending.body["state"], "awaiting_approval");
    assert_eq!(pending.body["approvals"]["text"], "0 of 1");
    assert_eq!(
        pending.body["approvals"]["may_still_decide"],
        "any approver"
    );
    assert_eq!(
        pending.body["link"],
        serve.url(&format!("/records/{billed}"))
    );

    // One approved through the API: told after one refused attempt.
    let approved = http
        .bot(
            &serve,
            &format!("/api/records/{ann_or_bob}/approve"),
            Some(&json!({"version": waiting[0]["version"], "note": "ok"})),
        )
        .await;
    assert_eq!(approved.status, 200, "{}", approved.body);
    let decided = receiver.wait_for("hook", "decided", &ann_or_bob).await;
    assert_eq!(decided.attempt, 2, "the first attempt was refused");
    assert_eq!(decided.body["state"], "approved");
    assert_eq!(decided.body["by"], "bot");
    assert_eq!(decided.body["approvals"]["text"], "1 of 1");
    assert_eq!(decided.body["approvals"]["approved_by"], json!(["bot"]));
    assert_eq!(decided.body["approvals"]["may_still_decide"], json!([]));

    // The delivery log, for approvers only.
    sign_in(&mut http, &serve, DANA).await;
    let log = http.get(&serve.url("/deliveries")).await;
    log.says(200, "delivered: 200 on attempt 2");
    assert!(log.body.contains("trying again"), "{}", log.body);
    assert!(
        !log.body.contains("evil.example"),
        "no record text unescaped"
    );
    let mut viewer = Http::default();
    sign_in(&mut viewer, &serve, VIC).await;
    viewer
        .get(&serve.url("/deliveries"))
        .await
        .says(403, "Approvers only");

    // Stopped; the billing call denied while nobody serves; started again.
    serve.stop();
    let denied = Idem::new(url)
        .run(&["deny", &billed, "--by", "dana", "--reason", "not now"])
        .await;
    denied.ok();
    serve.start_again();
    let told = receiver.wait_for("hook", "decided", &billed).await;
    assert_eq!(told.body["state"], "denied");
    assert_eq!(told.body["reason"], "not now");
    receiver.wait_for("slack", "decided", &billed).await;
    // Time for a wrongly repeated delivery to show: several looks.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    assert_eq!(*receiver.bad_signatures.lock().unwrap(), 0);
    let keys = [ann_or_bob.clone(), other.clone(), billed.clone()];
    let (json_got, slack_got) = (
        receiver.accepted("hook", &keys),
        receiver.accepted("slack", &keys),
    );
    for got in &json_got {
        crate::support::schema::check(&got.body, "webhook");
    }
    let (json_events, json_deliveries, json_duplicates) = figures(&json_got);
    let (slack_events, slack_deliveries, slack_duplicates) = figures(&slack_got);
    let retries = ["hook", "slack"]
        .iter()
        .flat_map(|path| receiver.about(path, &keys))
        .filter(|g| g.answered != 200)
        .count();
    eprintln!(
        "webhook deliveries across a restart: events {}, deliveries {}, duplicates {}, retries {} (JSON: {json_events} events, {json_deliveries} deliveries; Slack: {slack_events} events, {slack_deliveries} deliveries)",
        json_events + slack_events,
        json_deliveries + slack_deliveries,
        json_duplicates + slack_duplicates,
        retries,
    );
    // JSON: pending and overdue of three calls, two decisions; Slack: the
    // billing call's pending and decision.
    assert_eq!((json_events, json_deliveries, json_duplicates), (8, 8, 0));
    assert_eq!(
        (slack_events, slack_deliveries, slack_duplicates),
        (2, 2, 0)
    );
    assert_eq!(
        retries, 3,
        "each decision's first attempt, on each endpoint"
    );
    // The restarted instance found the earlier events delivered and sent
    // none of them again.
    let mut http = Http::default();
    sign_in(&mut http, &serve, DANA).await;
    let log = http.get(&serve.url("/deliveries")).await;
    let already: u32 = log
        .body
        .split("<dd id=\"already\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of events found delivered: {}", log.body));
    assert!(
        already >= 2,
        "the waiting call's pending and overdue: {already}"
    );
}

/// Two `idem serve` on one store, both told to notify the same endpoint:
/// each event reaches it once, whichever instance claimed it. An endpoint
/// that is down is tried a bounded number of times, then shown as given
/// up on in the delivery log, never dropped silently.
async fn two_instances_on_one_store_deliver_each_event_once(url: &str) {
    let receiver = Receiver::default();
    let base = receiver.start().await;
    let secrets = TempDir::new("idem-notify").unwrap();
    let secret_file = secrets.path().join("hook.secret");
    std::fs::write(&secret_file, SECRET).unwrap();
    let namespace = unique("tenant");
    let down = format!(
        "[[notify]]\nname = \"down\"\nurl = \"{base}/down\"\nformat = \"slack\"\nevents = [\"pending\"]\nnamespaces = [\"{namespace}\"]\n"
    );
    let app = App::default();
    let agent = dispatcher(url, &app, Duration::ZERO).await;
    let hook = format!("{base}/hook");
    let args = [
        "--notify",
        hook.as_str(),
        "--notify-secret-file",
        secret_file.to_str().unwrap(),
        "--notify-backoff",
        "20ms",
        "--notify-attempts",
        "3",
    ];
    let first = Serve::with_rules(url, Some(&catalog()), &args, &[], &down);
    let second = Serve::with_rules(url, Some(&catalog()), &args, &[], &down);
    let mut keys = Vec::new();
    for customer in ["ann", "bob", "cy", "dee"] {
        let _ = agent
            .dispatch_one(delete_call(&unique("call"), customer), &tenant(&namespace))
            .await;
    }
    let mut http = Http::default();
    let reply = http
        .bot(&first, &format!("/api/inbox?namespace={namespace}"), None)
        .await;
    for item in reply.json()["items"].as_array().unwrap() {
        keys.push(item["key"].as_str().unwrap().to_owned());
    }
    assert_eq!(keys.len(), 4);
    for key in &keys {
        receiver.wait_for("hook", "pending", key).await;
    }
    // Both instances look several times more.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (events, deliveries, duplicates) = figures(&receiver.accepted("hook", &keys));
    eprintln!("two instances: events {events}, deliveries {deliveries}, duplicates {duplicates}");
    assert_eq!((events, deliveries, duplicates), (4, 4, 0));

    // `/down` got each pending event three times (3 attempts), from one
    // instance or the other, never more; the log says it gave up.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut given_up = 0;
    while given_up < 4 {
        assert!(
            Instant::now() < deadline,
            "the down endpoint was not given up on"
        );
        given_up = 0;
        for serve in [&first, &second] {
            let mut http = Http::default();
            sign_in(&mut http, serve, DANA).await;
            let log = http.get(&serve.url("/deliveries")).await;
            given_up += log
                .body
                .matches("given up after 3 attempt(s): answered 502")
                .count();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let attempts = receiver.about("down", &keys).len();
    assert_eq!(attempts, 4 * 3, "three attempts per event, by one instance");
}

/// A webhook that could not work is refused before anything is served,
/// saying what to change, and never showing a secret.
#[test]
fn webhooks_that_cannot_work_are_refused_before_serving() {
    let dir = TempDir::new("idem-notify").unwrap();
    let approvers = dir.path().join("approvers.toml");
    let viewer = "[[approver]]\nname = \"a\"\nrole = \"viewer\"\n";
    let short = dir.path().join("short.secret");
    std::fs::write(&short, "tooshort\n").unwrap();
    let refused = |file: &str, args: &[&str]| {
        std::fs::write(&approvers, format!("{viewer}{file}")).unwrap();
        let out = std::process::Command::new(crate::support::IDEM)
            .args(["--store", "sqlite://unused.db", "serve", "--approvers"])
            .arg(&approvers)
            .args(args)
            .env_remove("IDEM_APPROVERS")
            .env_remove("IDEM_TEST_UNSET_SECRET")
            .output()
            .expect("idem runs");
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{said}");
        said
    };
    let said = refused("", &["--notify", "https://hooks.example.com/x"]);
    assert!(said.contains("needs a secret"), "{said}");
    let said = refused(
        "",
        &[
            "--notify",
            "https://hooks.example.com/x",
            "--notify-secret-env",
            "IDEM_TEST_UNSET_SECRET",
        ],
    );
    assert!(
        said.contains("IDEM_TEST_UNSET_SECRET") && said.contains("not set"),
        "{said}"
    );
    let said = refused(
        "",
        &[
            "--notify",
            "https://hooks.example.com/x",
            "--notify-secret-file",
            short.to_str().unwrap(),
        ],
    );
    assert!(said.contains("shorter than 16 bytes"), "{said}");
    assert!(
        !said.contains("tooshort"),
        "the secret is never shown: {said}"
    );
    let said = refused(
        "[[notify]]\nurl = \"http://hooks.example.com/services/SECRET\"\nformat = \"slack\"\n",
        &[],
    );
    assert!(said.contains("only to this machine"), "{said}");
    assert!(
        !said.contains("SECRET"),
        "the URL's path is never shown: {said}"
    );
}
