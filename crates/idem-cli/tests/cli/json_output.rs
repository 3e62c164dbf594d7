//! The `idem` program's `--json` output, on every store: each command's
//! output matches its documented schema (docs/cli.md), for a record in
//! every state.
//!
//! Each scenario is written once against a store URL and runs on a SQLite
//! file, and on the Redis and PostgreSQL servers of `idem_testkit::servers`
//! (skipped loudly when their binaries are missing; a failure under
//! `IDEM_REQUIRE_SERVERS=1`). The Redis and PostgreSQL stores are shared by
//! the scenarios, so each works in a namespace of its own.

use std::time::Duration;

use idem::prelude::*;
use serde_json::Value;

use crate::stores_support::{key_from_transcript, resolve_by_ada};
use crate::support::tools::{
    ada, charge_card, delete_call, dispatcher, executor, ns, save_card, tenant, timed_out_charge,
    SaveCard,
};
use crate::support::{claim_directly, operator, schema, unique};

crate::support::on_every_store_url![json_output_matches_the_documented_schema];

async fn json_output_matches_the_documented_schema(url: &str) {
    let (idem, namespace, app) = operator(url);
    let exec = executor(url, &app, Duration::ZERO).await;
    let agent = dispatcher(url, &app, Duration::ZERO).await;

    // A record in every state.
    exec.call(charge_card, ada())
        .call_id(unique("call"))
        .namespace(ns(&namespace))
        .await
        .unwrap();
    let unknown = timed_out_charge(&exec, &app, &namespace).await;
    let resolved = timed_out_charge(&exec, &app, &namespace).await;
    let resolved = key_from_transcript("charge_card", &resolved, &namespace).await;
    idem.run(&[
        "resolve", &resolved, "--failed", "declined", "--by", "ada", "--reason", "bank",
    ])
    .await
    .ok();
    let pending = delete_call(&unique("call"), "mallory");
    agent.dispatch_one(pending, &tenant(&namespace)).await;
    let approved = delete_call(&unique("call"), "trent");
    let Err(IdemError::ApprovalPending { key: approved, .. }) = agent
        .dispatch_one(approved, &tenant(&namespace))
        .await
        .result
    else {
        panic!("pending")
    };
    let out = idem
        .run(&[
            "approve",
            approved.as_str(),
            "--by",
            "ada",
            "--note",
            "ok",
            "--json",
        ])
        .await;
    let approved_json = out.json();
    schema::check(&approved_json, "record");
    assert_eq!(approved_json["status"], "approved");
    claim_directly(
        url,
        &namespace,
        &unique("call"),
        Some(r#"{"cents":1,"customer":"bob"}"#),
        Duration::from_secs(300),
    )
    .await;
    // A tool that keeps its arguments out of the store: only their
    // fingerprint identifies them.
    let card = SaveCard {
        customer: "ada".into(),
        number: "4242424242424242".into(),
    };
    let saved = exec
        .call(save_card, card.clone())
        .call_id(unique("call"))
        .namespace(ns(&namespace))
        .await
        .unwrap();
    let secret = saved.meta.key.unwrap();
    let fingerprint = idem::key::CanonicalArgs::from_serialize(&card)
        .unwrap()
        .fingerprint;

    let page = idem
        .run(&["ls", "--namespace", &namespace, "--json"])
        .await
        .json();
    schema::check(&page, "ls");
    let statuses: std::collections::BTreeSet<&str> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses.into_iter().collect::<Vec<_>>(),
        [
            "approved",
            "awaiting_approval",
            "failed",
            "in_flight",
            "succeeded",
            "unknown"
        ],
        "a record in every state"
    );
    assert_eq!(page["total"], 7);
    let times: Vec<&str> = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["created_at"].as_str().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {times:?}"
    );
    for record in page["records"].as_array().unwrap() {
        let key = record["key"].as_str().unwrap();
        let shown = idem.run(&["show", key, "--json"]).await.json();
        schema::check(&shown, "record");
        assert_eq!(&shown, record, "show and ls describe a record alike");
    }
    let in_flight = page["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["status"] == "in_flight")
        .unwrap();
    assert_eq!(in_flight["lease"]["expired"], false);
    assert_eq!(in_flight["worker"], "worker-elsewhere:9");
    let secret_json = idem.run(&["show", secret.as_str(), "--json"]).await.json();
    assert_eq!(secret_json["arguments"], Value::Null);
    assert_eq!(secret_json["fingerprint"], fingerprint.as_str());
    let secret_text = idem.run(&["show", secret.as_str()]).await;
    assert!(
        !secret_text.stdout.contains("4242"),
        "{}",
        secret_text.stdout
    );
    secret_text.says(&format!("not stored; fingerprint {fingerprint}"));

    // Limits cut the list, newest first, and say how many matched.
    let cut = idem
        .run(&["ls", "--namespace", &namespace, "--limit", "2", "--json"])
        .await
        .json();
    schema::check(&cut, "ls");
    assert_eq!(cut["total"], 7);
    assert_eq!(cut["records"].as_array().unwrap().len(), 2);
    assert_eq!(cut["records"][0], page["records"][0]);
    // Each filter, and how many of the namespace's records it lists.
    let filters: [(&[&str], u64); 3] = [
        (&["--since", "10m"], 7),
        (&["--since", "2999-01-01T00:00:00Z"], 0),
        (
            &[
                "--tool",
                "delete_account",
                "--state",
                "approved,awaiting_approval",
            ],
            2,
        ),
    ];
    for (filter, total) in filters {
        let mut args = vec!["ls", "--namespace", &namespace];
        args.extend_from_slice(filter);
        args.push("--json");
        let listed = idem.run(&args).await.json();
        assert_eq!(listed["total"], total, "{filter:?}");
    }

    // The other commands' JSON.
    let stats = idem.run(&["stats", "--json"]).await.json();
    schema::check(&stats, "stats");
    for status in schema::STATUSES {
        assert!(
            stats["by_status"][status].as_u64().unwrap() >= 1,
            "{status}"
        );
    }
    let unknown_key = key_from_transcript("charge_card", &unknown, &namespace).await;
    let derived = crate::support::run(
        &[
            "key",
            "--tool",
            "charge_card",
            "--call-id",
            &unknown,
            "--namespace",
            &namespace,
            "--args",
            r#"{"customer": "ada", "cents": 4900.0}"#,
            "--json",
        ],
        &[],
    )
    .await
    .json();
    schema::check(&derived, "key");
    assert_eq!(derived["key"], unknown_key.as_str());
    let unknown_json = idem.run(&["show", &unknown_key, "--json"]).await.json();
    assert_eq!(derived["fingerprint"], unknown_json["fingerprint"]);
    let settlement = ["--succeeded", r#""ch_1""#, "--json"];
    let resolved_json = resolve_by_ada(&idem, &unknown_key, &settlement, "seen")
        .await
        .json();
    schema::check(&resolved_json, "record");
    assert_eq!(resolved_json["outcome"]["output"], "ch_1");
    let deleted = idem
        .run(&[
            "delete",
            secret.as_str(),
            "--by",
            "ada",
            "--reason",
            "cleanup",
            "--json",
        ])
        .await
        .json();
    schema::check(&deleted, "deleted");
    assert_eq!(deleted["key"], secret.as_str());
    let purged = idem.run(&["purge", "--expired", "--json"]).await.json();
    schema::check(&purged, "deleted");
    assert_eq!(purged["key"], Value::Null);
}
