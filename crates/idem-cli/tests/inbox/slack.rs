//! Slack's Approve and Deny buttons: `idem serve` with a signing secret
//! posts Slack messages with buttons to a loopback "Slack", and takes the
//! clicks as Slack's interactivity requests, signed by the test as Slack
//! signs them. A click decides in place as the approver mapped from the
//! Slack user id, under the rules (two people, never the asker), and the
//! message is replaced through the response URL; a forged signature, an
//! old timestamp, a replay, an unknown Slack user, the asker's own click
//! and a button of other arguments decide nothing; a flood of forged
//! requests is answered at once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac};
use idem::prelude::*;
use idem_testkit::TempDir;
use serde_json::{json, Value};
use sha2::Sha256;

use crate::support::http::encode;
use crate::support::serve::{catalog, listed, Http, Reply, Serve};
use crate::support::tools::{delete_call, dispatcher, tenant, App};
use crate::support::{sqlite, unique};

/// The Slack app's signing secret.
const SECRET: &str = "slack signing secret of the test, 32+";

/// Two of erin, frank and ops decide a deletion; never the one who asked.
/// Each has a Slack user id; ops also asks.
const FILE: &str = r#"
[[approver]]
name = "erin"
role = "approver"
slack = "U0ERIN"

[[approver]]
name = "frank"
role = "approver"
slack = "U0FRANK"

[[approver]]
name = "ops"
role = "approver"
slack = "U0OPS"

[[rule]]
name = "deletions"
tools = ["delete_*"]
approvers = ["erin", "frank", "ops"]
required = 2
forbid_self_approval = true
"#;

/// What the loopback "Slack" got: the path and the JSON body.
#[derive(Clone, Default)]
struct Slack(Arc<Mutex<Vec<(String, Value)>>>);

async fn got(State(slack): State<Slack>, Path(path): Path<String>, body: Bytes) -> &'static str {
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    slack.0.lock().unwrap().push((path, body));
    "ok"
}

impl Slack {
    /// Serve on a free loopback port: its base URL.
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = Router::new()
            .route("/{path}", post(got))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        base
    }

    /// Wait (at most 20 s) for a post to `path` that `wanted` accepts.
    async fn wait_for(&self, path: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let found = self
                .0
                .lock()
                .unwrap()
                .iter()
                .find(|(p, body)| p == path && wanted(body))
                .map(|(_, body)| body.clone());
            if let Some(body) = found {
                return body;
            }
            assert!(Instant::now() < deadline, "nothing at /{path} within 20 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How many posts `path` got.
    fn count(&self, path: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .count()
    }
}

/// `bytes` in lower-case hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The Unix time now.
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A click as Slack posts it: the form body.
fn click(user: &str, action: &str, value: &str, reply: &str) -> String {
    let payload = json!({
        "type": "block_actions",
        "user": {"id": user, "username": "someone"},
        "actions": [{"action_id": action, "value": value, "type": "button"}],
        "response_url": reply,
    });
    format!("payload={}", encode(&payload.to_string()))
}

/// Post `body` to `/slack/actions` signed with `secret` at `timestamp`.
async fn send(http: &mut Http, serve: &Serve, body: &str, secret: &str, timestamp: u64) -> Reply {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("v0:{timestamp}:{body}").as_bytes());
    let signature = format!("v0={}", hex(&mac.finalize().into_bytes()));
    let timestamp = timestamp.to_string();
    http.send(
        "POST",
        &serve.url("/slack/actions"),
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("x-slack-request-timestamp", &timestamp),
            ("x-slack-signature", &signature),
        ],
        body,
    )
    .await
}

/// The record under `key` through the API: its status and the audit
/// trail's `(action, by)`.
async fn record(http: &mut Http, serve: &Serve, key: &str) -> (String, Vec<(String, String)>) {
    let read = http
        .bot(serve, &format!("/api/records/{key}"), None)
        .await
        .json();
    let trail = read["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap_or("").to_owned(),
                e["by"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    (
        read["record"]["status"].as_str().unwrap_or("").to_owned(),
        trail,
    )
}

/// Send the click `body` at `timestamp`: it decides (200), and the
/// message at the response URL `path` is replaced by one whose idem text
/// starts with `headline`; that text, and the new message.
async fn decided_in_place(
    http: &mut Http,
    scene: (&Serve, &Slack),
    body: &str,
    timestamp: u64,
    (path, headline): (&str, &str),
) -> (String, Value) {
    let (serve, slack) = scene;
    let decided = send(http, serve, body, SECRET, timestamp).await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    let replaced = slack
        .wait_for(path, |b| b["replace_original"] == true)
        .await;
    let ours = replaced["blocks"][0]["text"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(ours.starts_with(headline), "{ours}");
    (ours, replaced)
}

/// A store, the loopback "Slack", and `idem serve` with [`FILE`], its
/// signing secret and Slack's webhook.
struct Scene {
    _dir: TempDir,
    _secrets: TempDir,
    _app: App,
    slack: Slack,
    base: String,
    agent: Dispatcher<App>,
    serve: Serve,
}

impl Scene {
    async fn new() -> Scene {
        let (dir, url) = sqlite();
        // The agent first: it makes the store idem serve opens.
        let app = App::default();
        let agent = dispatcher(&url, &app, Duration::ZERO).await;
        let slack = Slack::default();
        let base = slack.start().await;
        let secrets = TempDir::new("idem-slack").unwrap();
        let secret_file = secrets.path().join("slack.secret");
        std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
        let notify = format!("\n[[notify]]\nname = \"slack\"\nurl = \"{base}/channel\"\nformat = \"slack\"\nevents = [\"pending\"]\n");
        let serve = Serve::with_rules(
            &url,
            Some(&catalog()),
            &[
                "--slack-signing-secret-file",
                secret_file.to_str().unwrap(),
                "--slack-test-response-base",
                &base,
            ],
            &[],
            &format!("{FILE}{notify}"),
        );
        Scene {
            _dir: dir,
            _secrets: secrets,
            _app: app,
            slack,
            base,
            agent,
            serve,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_click_decides_in_place_as_the_mapped_approver_and_nothing_else_does() {
    let scene = Scene::new().await;
    let (slack, base, agent, serve) = (&scene.slack, &scene.base, &scene.agent, &scene.serve);
    let namespace = unique("finance");
    let hostile =
        "<https://evil.example|Approve> <!channel> *now* _it_ ~s~ `x` https://evil.example";
    let asked = agent
        .dispatch_one(
            delete_call(&unique("call"), hostile),
            &tenant(&namespace).principal("ops"),
        )
        .await;
    assert!(
        matches!(asked.result, Err(IdemError::ApprovalPending { .. })),
        "{:?}",
        asked.result
    );
    let mut http = Http::default();
    let key = listed(&mut http, serve, &namespace).await["key"]
        .as_str()
        .unwrap()
        .to_owned();

    // The message: the caller's words inert, the buttons bound to the key.
    let message = slack
        .wait_for("channel", |b| {
            b["blocks"][2]["elements"][0]["url"]
                .as_str()
                .is_some_and(|u| u.ends_with(&key))
        })
        .await;
    let theirs = message["blocks"][1]["text"].clone();
    assert_eq!(theirs["type"], "plain_text");
    let text = theirs["text"].as_str().unwrap();
    assert!(
        text.contains("&lt;https[:]//evil.example|Approve&gt; &lt;!channel&gt; *now* _it_ ~s~ `x` https[:]//evil.example"),
        "{text}"
    );
    assert!(
        message["blocks"][0]["text"]["text"]
            .as_str()
            .unwrap()
            .contains("0 of 2 approvals"),
        "{message}"
    );
    let buttons = &message["blocks"][2]["elements"];
    assert_eq!(buttons[1]["action_id"], "idem_approve");
    assert_eq!(buttons[2]["action_id"], "idem_deny");
    let value = buttons[1]["value"].as_str().unwrap().to_owned();
    assert!(value.starts_with(&format!("{key}:")), "{value}");
    let reply = |n: &str| format!("{base}/{n}");
    let waiting = || async {
        let mut http = Http::default();
        record(&mut http, serve, &key).await
    };
    let untouched = waiting().await;
    assert_eq!(untouched.0, "awaiting_approval");

    // Refused, each with nothing decided and no message replaced.
    let erin = click("U0ERIN", "idem_approve", &value, &reply("erin"));
    let forged = send(
        &mut http,
        serve,
        &erin,
        "another secret, 32 bytes long!!",
        now(),
    )
    .await;
    forged.error_says(401, "does not match");
    let old = send(&mut http, serve, &erin, SECRET, now() - 6 * 60).await;
    old.error_says(401, "more than five minutes");
    let stranger = click("U0NOBODY", "idem_approve", &value, &reply("nobody"));
    send(&mut http, serve, &stranger, SECRET, now())
        .await
        .error_says(403, "not linked to an approver");
    let own = click("U0OPS", "idem_approve", &value, &reply("ops"));
    let refused = send(&mut http, serve, &own, SECRET, now()).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], "rule", "{}", refused.body);
    let elsewhere = format!("{key}:{}", "0".repeat(64));
    let other = click("U0ERIN", "idem_approve", &elsewhere, &reply("other"));
    send(&mut http, serve, &other, SECRET, now())
        .await
        .error_says(409, "other arguments");
    assert_eq!(waiting().await, untouched, "nothing decided");
    // Those who clicked are told why, and nothing else is posted.
    let told = slack.wait_for("ops", |_| true).await;
    assert_eq!(told["response_type"], "ephemeral");
    assert_eq!(told["replace_original"], false);

    // erin approves: 1 of 2, the message replaced, its buttons kept.
    let at = now();
    let (ours, replaced) = decided_in_place(
        &mut http,
        (serve, slack),
        &erin,
        at,
        ("erin", "*Approval 1 of 2* by erin"),
    )
    .await;
    assert!(
        ours.contains("1 of 2 approvals (erin); frank may still approve"),
        "{ours}"
    );
    assert_eq!(
        replaced["blocks"][2]["elements"][1]["value"],
        value.as_str()
    );
    // The same request again: refused as a replay.
    send(&mut http, serve, &erin, SECRET, at)
        .await
        .error_says(409, "received before");

    // frank approves: the call is approved, the message says so.
    let frank = click("U0FRANK", "idem_approve", &value, &reply("frank"));
    let (_, replaced) = decided_in_place(
        &mut http,
        (serve, slack),
        &frank,
        now(),
        ("frank", "*Approved* by frank"),
    )
    .await;
    assert_eq!(
        replaced["blocks"][2]["elements"].as_array().unwrap().len(),
        1,
        "no buttons left"
    );
    let (status, trail) = waiting().await;
    assert_eq!(status, "approved");
    let by: Vec<&str> = trail
        .iter()
        .filter(|(a, _)| a.starts_with("approv"))
        .map(|(_, by)| by.as_str())
        .collect();
    assert_eq!(by, ["erin", "frank"], "{trail:?}");
    assert_eq!(slack.count("erin"), 1, "the refused clicks posted nothing");

    // A flood of forged clicks: answered at once, nothing decided.
    let started = Instant::now();
    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (serve_url, body) = (serve.url("/slack/actions"), frank.clone());
        flood.spawn(async move {
            let mut http = Http::default();
            for i in 0..50 {
                let t = now().to_string();
                let sig = format!("v0={:064x}", i);
                let reply = http
                    .send(
                        "POST",
                        &serve_url,
                        &[
                            ("x-slack-request-timestamp", &t),
                            ("x-slack-signature", &sig),
                        ],
                        &body,
                    )
                    .await;
                assert_eq!(reply.status, 401, "{}", reply.body);
            }
        });
    }
    while let Some(done) = flood.join_next().await {
        done.unwrap();
    }
    let took = started.elapsed();
    eprintln!("400 forged Slack clicks answered in {took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_eq!(waiting().await.1, trail, "nothing decided by the flood");
}

/// Deny from Slack: the call is denied with the reason naming the
/// approver, and the model is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_click_denies_with_the_approver_s_name() {
    let scene = Scene::new().await;
    let (slack, base, agent, serve) = (&scene.slack, &scene.base, &scene.agent, &scene.serve);
    let namespace = unique("finance");
    let call = delete_call(&unique("call"), "ann");
    let _ = agent
        .dispatch_one(call.clone(), &tenant(&namespace).principal("ops"))
        .await;
    let mut http = Http::default();
    let item = listed(&mut http, serve, &namespace).await;
    let key = item["key"].as_str().unwrap();
    // The button's value, as the message would carry it.
    let read = http
        .bot(serve, &format!("/api/records/{key}"), None)
        .await
        .json();
    let fingerprint = read["record"]["fingerprint"].as_str().unwrap();
    let digest = hex(&<Sha256 as sha2::Digest>::digest(fingerprint.as_bytes()));
    let deny = click(
        "U0ERIN",
        "idem_deny",
        &format!("{key}:{digest}"),
        &format!("{base}/erin"),
    );
    decided_in_place(
        &mut http,
        (serve, slack),
        &deny,
        now(),
        ("erin", "*Denied* by erin"),
    )
    .await;
    let again = agent
        .dispatch_one(call, &tenant(&namespace).principal("ops"))
        .await;
    let said = format!("{:?}", again.result);
    assert!(said.contains("Denied in Slack by erin."), "{said}");
}

/// Slack's buttons that could not work, or would let `idem serve` post
/// elsewhere, are refused before anything is served, the secret never
/// shown.
#[test]
fn a_slack_setup_that_cannot_work_is_refused_before_serving() {
    let dir = TempDir::new("idem-slack").unwrap();
    let approvers = dir.path().join("approvers.toml");
    std::fs::write(
        &approvers,
        "[[approver]]\nname = \"a\"\nrole = \"viewer\"\n",
    )
    .unwrap();
    let short = dir.path().join("short.secret");
    std::fs::write(&short, "tooshort\n").unwrap();
    let good = dir.path().join("good.secret");
    std::fs::write(&good, SECRET).unwrap();
    let refused = |args: &[&str]| {
        let out = std::process::Command::new(crate::support::IDEM)
            .args(["--store", "sqlite://unused.db", "serve", "--approvers"])
            .arg(&approvers)
            .args(args)
            .env_remove("IDEM_APPROVERS")
            .env_remove("IDEM_TEST_UNSET_SLACK_SECRET")
            .output()
            .expect("idem runs");
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{said}");
        said
    };
    let said = refused(&["--slack-signing-secret-file", short.to_str().unwrap()]);
    assert!(
        said.contains("shorter than 16 bytes") && !said.contains("tooshort"),
        "{said}"
    );
    let said = refused(&["--slack-signing-secret-env", "IDEM_TEST_UNSET_SLACK_SECRET"]);
    assert!(
        said.contains("IDEM_TEST_UNSET_SLACK_SECRET") && said.contains("not set"),
        "{said}"
    );
    let good = good.to_str().unwrap();
    for base in [
        "http://10.0.0.1:80",
        "https://hooks.slack.com",
        "http://127.0.0.1",
    ] {
        let said = refused(&[
            "--slack-signing-secret-file",
            good,
            "--slack-test-response-base",
            base,
        ]);
        assert!(
            said.contains("only http:// to a loopback address and port"),
            "{base}: {said}"
        );
    }
    let said = refused(&["--slack-test-response-base", "http://127.0.0.1:9"]);
    assert!(said.contains("needs a Slack signing secret"), "{said}");
}
