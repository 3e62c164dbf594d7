//! The approval rules' timers under `idem serve`: two instances on one
//! store, a rule that escalates a request nobody decides after a second
//! and denies it after three. Each request's escalation reaches each
//! endpoint once (the one the rule names, whatever events it takes, and
//! the one that takes every event), and each request is denied as
//! expired once, by the rule, with nobody calling again.

use std::time::{Duration, Instant};

use idem::audit::AuditQuery;
use idem::operator::Operator;
use idem::prelude::*;
use idem::record::Status;
use idem_testkit::TempDir;
use serde_json::json;

use super::notify::{figures, Receiver, SECRET};
use crate::support::serve::{catalog, Serve};
use crate::support::tools::{delete_call, dispatcher, tenant, App};
use crate::support::unique;

crate::support::on_every_store_url![requests_nobody_decides_escalate_once_then_expire];

async fn requests_nobody_decides_escalate_once_then_expire(url: &str) {
    let receiver = Receiver::default();
    let base = receiver.start().await;
    let secrets = TempDir::new("idem-timers").unwrap();
    let secret_file = secrets.path().join("hook.secret");
    std::fs::write(&secret_file, SECRET).unwrap();
    let secret = secret_file.to_str().unwrap();
    let namespace = unique("tenant");
    // The pager takes decided events only, but the rule names it.
    let rules = format!(
        r#"
[[rule]]
name = "deletions"
tools = ["delete_account"]
namespaces = ["{namespace}"]
escalate_after = "1s"
escalate_to = ["pager", "dana"]
expires_after = "3s"

[[notify]]
name = "pager"
url = "{base}/pager"
secret_file = "{secret}"
events = ["decided"]
namespaces = ["{namespace}"]
"#
    );
    let hook = format!("{base}/hook");
    let args = [
        "--notify",
        hook.as_str(),
        "--notify-secret-file",
        secret,
        "--notify-backoff",
        "20ms",
    ];
    // The agent first: it makes a SQLite store's file.
    let app = App::default();
    let agent = dispatcher(url, &app, Duration::ZERO).await;
    let first = Serve::with_rules(url, Some(&catalog()), &args, &[], &rules);
    let second = Serve::with_rules(url, Some(&catalog()), &args, &[], &rules);
    let calls = [
        delete_call(&unique("call"), "ann"),
        delete_call(&unique("call"), "bob"),
    ];
    let mut keys = Vec::new();
    for call in &calls {
        let asked = agent.dispatch_one(call.clone(), &tenant(&namespace)).await;
        match asked.result {
            Err(IdemError::ApprovalPending { key, .. }) => keys.push(key.as_str().to_owned()),
            other => panic!("expected a pending approval: {other:?}"),
        }
    }
    for key in &keys {
        let told = receiver.wait_for("pager", "escalated", key).await;
        crate::support::schema::check(&told.body, "webhook");
        assert_eq!(told.body["escalate_to"], json!(["pager", "dana"]));
        assert_eq!(
            told.body["reason"],
            "nobody decided it within 1 second (approval rule “deletions”, escalate_after); told: pager, dana"
        );
        receiver.wait_for("hook", "escalated", key).await;
    }

    // Denied by the sweep of one instance or the other, once each.
    let operator = Operator::new(idem::store::connect(url).await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(15);
    for key in &keys {
        let key = idem::key::IdempotencyKey::parse(key).unwrap();
        while operator.show(&key).await.unwrap().status() != Status::Failed {
            assert!(Instant::now() < deadline, "{key} was not denied as expired");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = operator
            .audit(&AuditQuery::for_key(key.clone()), None, 100)
            .await
            .unwrap();
        let expired: Vec<_> = log
            .events
            .iter()
            .filter(|e| e.action.as_str() == "expired")
            .collect();
        assert_eq!(expired.len(), 1, "{:?}", log.events);
        assert_eq!(expired[0].by, "rule “deletions”");
    }
    // Both instances look several times more: still one escalation per
    // request and endpoint.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let escalated = |path: &str| {
        let mut got = receiver.accepted(path, &keys);
        got.retain(|g| g.kind == "escalated");
        figures(&got)
    };
    let (pager, hook) = (escalated("pager"), escalated("hook"));
    eprintln!("two instances: escalations (events, deliveries, duplicates): pager {pager:?}, hook {hook:?}");
    assert_eq!(pager, (2, 2, 0));
    assert_eq!(hook, (2, 2, 0));
    assert!(receiver
        .accepted("pager", &keys)
        .iter()
        .all(|g| g.kind == "escalated"));

    // The model, calling again, reads why.
    let again = agent
        .dispatch_one(calls[0].clone(), &tenant(&namespace))
        .await;
    let said = again.content()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        said.contains("it expired: nobody approved or denied it within 3 seconds (approval rule “deletions”, expires_after)"),
        "{said}"
    );
    assert!(again.deduplicated());
    drop((first, second));
}
