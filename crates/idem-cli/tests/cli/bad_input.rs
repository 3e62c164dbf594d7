//! Bad input to the `idem` program, on every store: malformed JSON, an
//! unknown or ambiguous key, a transition the record cannot take, empty
//! names and unreadable filters are each one line on stderr and a nonzero
//! exit, and change nothing.
//!
//! Each scenario is written once against a store URL and runs on a SQLite
//! file, and on the Redis and PostgreSQL servers of `idem_testkit::servers`
//! (skipped loudly when their binaries are missing; a failure under
//! `IDEM_REQUIRE_SERVERS=1`). The Redis and PostgreSQL stores are shared by
//! the scenarios, so each works in a namespace of its own.

use std::time::Duration;

use idem::key::{derive_key, KeyInput, KeySource};
use idem::prelude::*;

use crate::stores_support::key_from_transcript;
use crate::support::tools::{
    ada, charge_card, delete_call, dispatcher, executor, ns, tenant, timed_out_charge,
};
use crate::support::{claim_directly, operator, unique};

crate::support::on_every_store_url![bad_input_is_one_line_a_nonzero_exit_and_changes_nothing];

async fn bad_input_is_one_line_a_nonzero_exit_and_changes_nothing(url: &str) {
    let (idem, namespace, app) = operator(url);
    let exec = executor(url, &app, Duration::ZERO).await;
    let agent = dispatcher(url, &app, Duration::ZERO).await;

    let unknown = timed_out_charge(&exec, &app, &namespace).await;
    let unknown = key_from_transcript("charge_card", &unknown, &namespace).await;
    let done = unique("call");
    exec.call(charge_card, ada())
        .call_id(&done)
        .namespace(ns(&namespace))
        .await
        .unwrap();
    let done = key_from_transcript("charge_card", &done, &namespace).await;
    let Err(IdemError::ApprovalPending { key: pending, .. }) = agent
        .dispatch_one(delete_call(&unique("call"), "mallory"), &tenant(&namespace))
        .await
        .result
    else {
        panic!("pending")
    };
    let pending = pending.as_str().to_owned();
    let live = claim_directly(
        url,
        &namespace,
        &unique("call"),
        Some("{}"),
        Duration::from_secs(300),
    )
    .await;
    let live = live.as_str().to_owned();
    // Two records whose keys share their first four digits.
    let (twin_a, twin_b) = twins(&namespace);
    for id in [&twin_a, &twin_b] {
        exec.call(charge_card, ada())
            .call_id(id.as_str())
            .namespace(ns(&namespace))
            .await
            .unwrap();
    }
    let twin_a = key_from_transcript("charge_card", &twin_a, &namespace).await;
    let twin_b = key_from_transcript("charge_card", &twin_b, &namespace).await;

    let snapshot = || async {
        idem.run(&["ls", "--namespace", &namespace, "--json"])
            .await
            .json()
    };
    let before = snapshot().await;
    assert_eq!(before["total"], 6);

    let by = ["--by", "ada", "--reason", "because"];
    let with = |args: &[&str]| -> Vec<String> {
        args.iter()
            .chain(by.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let cases: Vec<(Vec<String>, i32, String)> = vec![
        // Malformed JSON for --succeeded.
        (
            with(&["resolve", &unknown, "--succeeded", r#"{"charge_id": "#]),
            2,
            "is not JSON".into(),
        ),
        (
            with(&["resolve", &unknown, "--succeeded", "charged"]),
            2,
            "--succeeded takes the tool's output as JSON".into(),
        ),
        // An unknown key, whole or as a prefix.
        (
            with(&["resolve", &"0".repeat(64), "--release"]),
            3,
            format!("no record with key {}", "0".repeat(64)),
        ),
        (
            vec!["show".into(), "0000000f".into()],
            3,
            "no record".into(),
        ),
        // Not a key at all.
        (
            vec!["show".into(), "zz".into()],
            2,
            "is not a key or a key prefix".into(),
        ),
        (
            vec!["show".into(), "abc".into()],
            2,
            "give at least 4".into(),
        ),
        // An ambiguous prefix lists its candidates.
        (
            with(&["resolve", &twin_a[..4], "--release"]),
            4,
            format!("key prefix {} is ambiguous", &twin_a[..4]),
        ),
        // Resolving a live in-flight record, a completed one, a pending
        // approval.
        (
            with(&["resolve", &live, "--release"]),
            1,
            "in flight under a live lease (worker worker-elsewhere:9".into(),
        ),
        (
            with(&["delete", &live]),
            1,
            "in flight under a live lease".into(),
        ),
        (
            with(&["resolve", &done, "--failed", "nope"]),
            1,
            "is already succeeded".into(),
        ),
        (
            with(&["resolve", &pending, "--succeeded", "{}"]),
            1,
            "approve or deny it instead".into(),
        ),
        // Approving or denying what is not pending.
        (
            vec!["approve".into(), done.clone(), "--by".into(), "ada".into()],
            1,
            "is not awaiting approval (it is succeeded)".into(),
        ),
        (
            with(&["deny", &unknown]),
            1,
            "is not awaiting approval (it is unknown)".into(),
        ),
        (
            vec!["approve".into(), live.clone(), "--by".into(), "ada".into()],
            1,
            "is not awaiting approval (it is in_flight)".into(),
        ),
        // Empty names and reasons.
        (
            vec![
                "deny".into(),
                pending.clone(),
                "--by".into(),
                "ada".into(),
                "--reason".into(),
                " ".into(),
            ],
            2,
            "--reason must not be empty".into(),
        ),
        (
            vec!["approve".into(), pending.clone(), "--by".into(), "".into()],
            2,
            "--by must not be empty".into(),
        ),
    ];
    for (args, code, needle) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let line = idem.run(&args).await.fails(*code, needle).to_owned();
        let acting = ["resolve", "approve", "deny", "delete"].contains(&args[0]);
        if acting {
            assert!(line.contains("nothing"), "{line}");
        }
        if *code == 4 {
            assert!(
                line.contains(&twin_a) && line.contains(&twin_b),
                "the candidates are listed: {line}"
            );
        }
    }
    // clap's own usage errors exit with 2 too.
    let missing = idem
        .run(
            &with(&["resolve", &unknown])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        )
        .await;
    assert_eq!(missing.code, 2, "{}", missing.stderr);
    assert!(missing.stderr.contains("--succeeded"), "{}", missing.stderr);
    // Unreadable filters and spans, refused by clap naming the option.
    idem.run(&["ls", "--since", "last tuesday"])
        .await
        .bad_value(
            "--since",
            "'last tuesday' for '--since <WHEN>': neither a duration",
        );
    idem.run(&["log", "--since", "yesterday"])
        .await
        .bad_value("--since", "nor an RFC 3339 time");
    idem.run(
        &with(&["resolve", &unknown, "--failed", "no", "--ttl", "soon"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .await
    .bad_value("--ttl", "expected a duration");
    let state = idem.run(&["ls", "--state", "lost"]).await;
    assert_eq!(state.code, 2);
    assert!(
        state.stderr.contains("unknown state `lost`"),
        "{}",
        state.stderr
    );

    assert_eq!(snapshot().await, before, "nothing changed");
    assert_eq!(app.charges(), 4);
    assert_eq!(app.deletions(), 0);
}

/// Two call ids of `charge_card` in `namespace` whose keys share their
/// first four hexadecimal digits.
fn twins(namespace: &str) -> (String, String) {
    let tenant = ns(namespace);
    let mut seen = std::collections::HashMap::new();
    for i in 0.. {
        let id = format!("twin-{i}");
        let key = derive_key(&KeyInput {
            version: 1,
            namespace: &tenant,
            tool: "charge_card",
            source: KeySource::CallId(&id),
        })
        .unwrap();
        if let Some(other) = seen.insert(key.as_str()[..4].to_owned(), id.clone()) {
            return (other, id);
        }
    }
    unreachable!()
}
