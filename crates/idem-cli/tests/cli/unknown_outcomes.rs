//! Unknown outcomes through the `idem` program, on every store: a
//! timed-out charge is listed as unknown and resolved from the command
//! line (succeeded, failed or released), the duplicate gets the
//! resolution, a resolution keeps the retention asked for, and `idem log`
//! keeps what was done after the records are gone.
//!
//! Each scenario is written once against a store URL and runs on a SQLite
//! file, and on the Redis and PostgreSQL servers of `idem_testkit::servers`
//! (skipped loudly when their binaries are missing; a failure under
//! `IDEM_REQUIRE_SERVERS=1`). The Redis and PostgreSQL stores are shared by
//! the scenarios, so each works in a namespace of its own.

use std::time::Duration;

use idem::StoreExt;
use serde_json::json;

use crate::stores_support::{resolve_by_ada, unknown_charge};
use crate::support::tools::{executor, retry_charge, Charged};
use crate::support::{claim_directly, operator, schema, unique};

crate::support::on_every_store_url![
    a_timed_out_charge_is_listed_as_unknown_resolved_and_the_duplicate_gets_the_resolution,
    unknown_outcomes_resolved_as_failed_or_released,
    an_unknown_outcome_says_it_never_expires_and_a_resolution_keeps_the_ttl_asked_for,
    idem_log_shows_a_release_and_a_delete_after_their_records_are_gone,
    a_takeover_waiting_out_a_vanished_owner_is_listed_and_idem_resolve_ends_its_wait,
];

/// A worker that took a key over from a vanished owner and waits out that
/// owner's attempt (the wait written into the record, its lease live) is
/// listed and shown as such, with the commands that settle it; `idem
/// resolve` settles it at once, which ends the wait.
async fn a_takeover_waiting_out_a_vanished_owner_is_listed_and_idem_resolve_ends_its_wait(
    url: &str,
) {
    let (idem, namespace, _) = operator(url);
    let key = claim_directly(url, &namespace, "c-wait", None, Duration::from_secs(600)).await;
    let store = idem::store::connect(url).await.unwrap();
    let fence = store.get(&key).await.unwrap().unwrap().fence();
    let until = store.now().await.unwrap().plus(Duration::from_secs(300));
    let wait = json!({ "until": until.0, "previous": fence.0 - 1, "by": fence.0 });
    store
        .checkpoint(
            &key,
            fence,
            idem::record::OUTLAST_STEP,
            &wait,
            Duration::from_secs(600),
        )
        .await
        .unwrap();

    let listed = idem.run(&["ls", "--namespace", &namespace]).await;
    assert!(
        listed
            .ok()
            .contains("owner vanished; waiting out its attempt (over in 4m"),
        "{}",
        listed.ok()
    );
    let shown = idem.run(&["show", key.as_str()]).await;
    let shown = shown.ok();
    assert!(
        shown.contains("vanished mid-call; its attempt must be over by"),
        "{shown}"
    );
    assert!(shown.contains("idem resolve"), "{shown}");

    resolve_by_ada(
        &idem,
        key.as_str(),
        &["--succeeded", r#"{"id":"ch_1"}"#],
        "in the PSP's log",
    )
    .await
    .ok();
    let record = store.get(&key).await.unwrap().unwrap();
    assert_eq!(record.status(), idem::record::Status::Succeeded);
}

/// `idem log` keeps what `resolve --release` and `delete` did (who, when,
/// why, state before and after) after the records are gone, by full key
/// or prefix, as a table and as the documented JSON.
async fn idem_log_shows_a_release_and_a_delete_after_their_records_are_gone(url: &str) {
    let (idem, namespace, app) = operator(url);
    let exec = executor(url, &app, Duration::ZERO).await;
    let (call_id, key) = unknown_charge(&exec, &app, &namespace).await;
    resolve_by_ada(&idem, &key, &["--release"], "the bank never saw it")
        .await
        .ok();
    idem.run(&["show", &key]).await.fails(3, "no record");

    let log = idem.run(&["log", &key[..10], "--json"]).await.json();
    schema::check(&log, "log");
    assert_eq!(log["total"], 1, "{log}");
    let event = &log["events"][0];
    assert_eq!(event["action"], "released");
    assert_eq!(event["by"], "ada");
    assert_eq!(event["reason"], "the bank never saw it");
    assert_eq!(event["before"], "unknown");
    assert!(event["after"].is_null());
    assert_eq!(event["tool"], "charge_card");
    assert_eq!(event["namespace"], namespace.as_str());

    // The retry runs again (the release allowed it) and is deleted.
    retry_charge(&exec, &call_id, &namespace).await.unwrap();
    idem.run(&["delete", &key, "--by", "bo", "--reason", "test charge"])
        .await
        .ok();
    let table = idem.run(&["log", &key, "--since", "1h"]).await;
    let table = table.ok();
    assert!(table.starts_with("AT "), "{table}");
    assert!(
        table.contains("released") && table.contains("unknown → deleted"),
        "{table}"
    );
    assert!(
        table.contains("deleted") && table.contains("succeeded → deleted") && table.contains("bo"),
        "{table}"
    );
    let none = idem
        .run(&["log", &key, "--since", "2099-01-01T00:00:00Z", "--json"])
        .await
        .json();
    assert_eq!(none["total"], 0);
    idem.run(&["log", "xyz"]).await.fails(2, "not a key");
}

/// An unknown outcome is shown as kept until a person settles it, counted
/// by age in `idem stats`, and `idem resolve --ttl` keeps the resolution as
/// long as asked (a malformed TTL changes nothing).
async fn an_unknown_outcome_says_it_never_expires_and_a_resolution_keeps_the_ttl_asked_for(
    url: &str,
) {
    let (idem, namespace, app) = operator(url);
    let exec = executor(url, &app, Duration::ZERO).await;
    let (_, key) = unknown_charge(&exec, &app, &namespace).await;

    let shown = idem.run(&["show", &key[..12]]).await;
    let shown = shown.ok();
    assert!(
        shown.contains("until a person settles it") && shown.contains("never expires"),
        "{shown}"
    );
    assert!(!shown.contains("Expires"), "{shown}");
    let listed = idem
        .run(&["ls", "--state", "unknown", "--namespace", &namespace])
        .await;
    listed.says("waiting for a person for");
    let stats = idem.run(&["stats", "--json"]).await.json();
    schema::check(&stats, "stats");
    assert!(
        stats["unknown_by_age"]["under_1h"].as_u64().unwrap() >= 1,
        "{stats}"
    );
    assert!(stats["unknown_by_age"]["oldest"].is_string(), "{stats}");

    let refused = resolve_by_ada(
        &idem,
        &key[..12],
        &["--failed", "not charged", "--ttl", "soon"],
        "checked",
    )
    .await;
    refused.bad_value("--ttl", "'soon'");
    refused.bad_value("--ttl", "expected a duration such as 90s, 15m, 2h");
    let resolved = resolve_by_ada(
        &idem,
        &key[..12],
        &["--failed", "not charged", "--ttl", "2h", "--json"],
        "the dashboard shows no charge",
    )
    .await
    .json();
    assert_eq!(resolved["status"], "failed");
    let at = |field: &str| idem_cli_time(resolved[field].as_str().unwrap());
    let kept = at("expires_at") - at("completed_at");
    assert!((7_190_000..=7_210_000).contains(&kept), "kept {kept} ms");
}

/// Milliseconds since the epoch of an RFC 3339 time as the program prints
/// it (`2026-05-01T09:00:00.000Z`).
fn idem_cli_time(text: &str) -> i64 {
    text.parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("{text:?} is not RFC 3339: {e}"))
        .as_millisecond()
}

async fn a_timed_out_charge_is_listed_as_unknown_resolved_and_the_duplicate_gets_the_resolution(
    url: &str,
) {
    let (idem, namespace, app) = operator(url);
    let exec = executor(url, &app, Duration::ZERO).await;

    // The operator finds it: by state, and from the transcript's call id.
    let (call_id, key) = unknown_charge(&exec, &app, &namespace).await;
    assert_eq!(app.charges(), 1);
    let page = idem.ls_json("unknown", &namespace).await;
    assert_eq!(page["total"], 1);
    let record = &page["records"][0];
    assert_eq!(record["key"], key.as_str());
    assert_eq!(record["status"], "unknown");
    assert_eq!(record["tool"], "charge_card");
    assert_eq!(record["call_id"], call_id.as_str());
    assert_eq!(record["worker"], "test-worker:1");
    assert_eq!(
        record["arguments"],
        json!({"customer": "ada", "cents": 4900})
    );
    assert!(record["outcome"]["message"]
        .as_str()
        .unwrap()
        .contains("timed out"));
    let table = idem
        .run(&["ls", "--state", "unknown", "--namespace", &namespace])
        .await;
    let table = table.ok();
    assert!(table.starts_with("KEY "), "{table}");
    assert!(
        table.contains(&key[..12]) && table.contains("unknown") && table.contains("charge_card"),
        "{table}"
    );

    // It is settled from the command line, by a key prefix.
    let out = resolve_by_ada(
        &idem,
        &key[..12],
        &["--succeeded", r#"{"charge_id": "ch_from_the_dashboard"}"#],
        "the payment dashboard shows the charge",
    )
    .await;
    assert!(out.ok().starts_with("resolved "), "{}", out.stdout);

    // The model's retry gets the resolved output; the card is not charged
    // again.
    let again = retry_charge(&exec, &call_id, &namespace).await.unwrap();
    assert!(again.meta.deduplicated);
    assert_eq!(
        again.output,
        Charged {
            charge_id: "ch_from_the_dashboard".into()
        }
    );
    assert_eq!(app.charges(), 1);

    // The record says who settled it and why.
    let shown = idem.run(&["show", &key, "--json"]).await.json();
    assert_eq!(shown["status"], "succeeded");
    assert_eq!(shown["audit"][0]["by"], "ada");
    assert_eq!(shown["audit"][0]["action"], "resolved_succeeded");
    assert_eq!(
        shown["audit"][0]["reason"],
        "the payment dashboard shows the charge"
    );
    let described = idem.run(&["show", &key[..8]]).await;
    let described = described.ok();
    assert!(
        described.contains("resolved_succeeded by ada: the payment dashboard shows the charge"),
        "{described}"
    );
}

async fn unknown_outcomes_resolved_as_failed_or_released(url: &str) {
    let (idem, namespace, app) = operator(url);
    let exec = executor(url, &app, Duration::ZERO).await;

    // Resolved as failed: the retry gets the failure and nothing runs.
    let (failed, key) = unknown_charge(&exec, &app, &namespace).await;
    let settlement = ["--failed", "card declined (seen at the bank)"];
    resolve_by_ada(&idem, &key, &settlement, "bank statement")
        .await
        .ok();
    let err = retry_charge(&exec, &failed, &namespace).await.unwrap_err();
    assert!(err.is_deduplicated(), "{err}");
    assert!(
        err.to_string().contains("card declined (seen at the bank)"),
        "{err}"
    );
    assert_eq!(app.charges(), 1);

    // Released: the record is gone and the retry charges the card.
    let (released, key) = unknown_charge(&exec, &app, &namespace).await;
    let out = resolve_by_ada(&idem, &key[..10], &["--release"], "the bank never saw it").await;
    assert!(out.ok().starts_with("released "), "{}", out.stdout);
    idem.run(&["show", &key]).await.fails(3, "no record");
    let again = retry_charge(&exec, &released, &namespace).await.unwrap();
    assert!(!again.meta.deduplicated);
    assert_eq!(app.charges(), 3);

    // A call whose owner vanished (its lease ran out, nobody took it over)
    // is settled the same way.
    let vanished = unique("call");
    let key = claim_directly(
        url,
        &namespace,
        &vanished,
        Some("{}"),
        Duration::from_millis(200),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shown = idem.run(&["show", key.as_str(), "--json"]).await.json();
    assert_eq!(shown["status"], "in_flight");
    assert_eq!(shown["lease"]["expired"], true);
    let described = idem.run(&["show", key.as_str()]).await;
    described.says("the owner vanished");
    let resolved = resolve_by_ada(
        &idem,
        key.as_str(),
        &["--failed", "the worker died before charging", "--json"],
        "no charge at the bank",
    )
    .await
    .json();
    assert_eq!(resolved["status"], "failed");
    assert_eq!(resolved["outcome"]["code"], "permanent");
    assert_eq!(resolved["audit"][0]["action"], "resolved_failed");
}
