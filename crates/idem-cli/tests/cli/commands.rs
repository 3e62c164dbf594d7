//! The `idem` program where no live store is needed: deriving keys from a
//! transcript (against the published vectors of `docs/keys.md`), stores
//! that cannot be used (unreachable, with passwords that must never be
//! shown; a SQLite file that does not exist; one written by a newer idem),
//! and colour only where it belongs.

use std::time::Duration;

use crate::support::tools::{charge_card, charge_key, executor, App, Charge};
use crate::support::{run, run_in, schema, Idem};

use idem::prelude::*;
use idem_testkit::store_cases::sqlite_schema_version;
use serde_json::Value;

/// The test vectors of `docs/keys.md`.
fn vectors() -> Vec<Value> {
    let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/keys.md"));
    let start = doc.find("```json\n").expect("a ```json block of vectors") + 8;
    let end = start + doc[start..].find("```").expect("end of the block");
    serde_json::from_str(&doc[start..end]).expect("vectors parse")
}

#[tokio::test]
async fn idem_key_reproduces_every_published_vector() {
    let mut checked = 0;
    for v in vectors() {
        let text = |field: &str| v[field].as_str().unwrap().to_owned();
        let mut args = vec![
            "key".to_owned(),
            "--tool".to_owned(),
            text("tool"),
            "--namespace".to_owned(),
            text("namespace"),
            "--key-version".to_owned(),
            v["version"].to_string(),
        ];
        match v["source"].as_str().unwrap() {
            "call" => args.extend(["--call-id".to_owned(), text("call_id")]),
            "step" => args.extend([
                "--run".to_owned(),
                text("run_id"),
                "--step".to_owned(),
                v["step"].to_string(),
                "--args".to_owned(),
                text("arguments"),
            ]),
            "natural" => {
                args.extend(["--natural".to_owned(), v["fields"].to_string()]);
                if let Some(window) = v["window"].as_u64() {
                    args.extend(["--window".to_owned(), window.to_string()]);
                }
            }
            "custom" => args.extend(["--custom".to_owned(), text("material")]),
            "window" => {
                args.extend([
                    "--repeat-window".to_owned(),
                    v["window_seconds"].to_string(),
                    "--generation".to_owned(),
                    v["window"].to_string(),
                    "--repeat".to_owned(),
                    v["repeat"].to_string(),
                    "--args".to_owned(),
                    text("arguments"),
                ]);
            }
            // Sub-keys are derived inside a tool, never found from a
            // transcript.
            _ => continue,
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&args, &[]).await;
        assert_eq!(out.ok().trim(), v["key"], "{}", v["name"]);

        let mut json_args = args.clone();
        json_args.push("--json");
        let json = run(&json_args, &[]).await.json();
        schema::check(&json, "key");
        assert_eq!(json["key"], v["key"], "{}", v["name"]);
        assert_eq!(json["source"], v["source"], "{}", v["name"]);
        if v["source"] == "step" {
            assert_eq!(json["canonical_arguments"], v["canonical"], "{}", v["name"]);
            assert_eq!(json["fingerprint"], v["fingerprint"], "{}", v["name"]);
        }
        checked += 1;
    }
    assert!(checked >= 11, "only {checked} vectors checked");
}

#[tokio::test]
async fn idem_key_refuses_what_derives_no_key() {
    run(&["key", "--tool", "t", "--call-id", ""], &[])
        .await
        .fails(2, "the call id is empty");
    run(
        &[
            "key", "--tool", "t", "--run", "r", "--step", "1", "--args", "[1]",
        ],
        &[],
    )
    .await
    .fails(2, "must be a JSON object");
    run(
        &[
            "key", "--tool", "t", "--run", "r", "--step", "1", "--args", "{",
        ],
        &[],
    )
    .await
    .fails(2, "--args is not valid JSON");
    // clap: a run needs its step and arguments; one source only.
    let out = run(&["key", "--tool", "t", "--run", "r"], &[]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    let out = run(
        &["key", "--tool", "t", "--call-id", "c", "--custom", "m"],
        &[],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
}

#[tokio::test]
async fn an_unreachable_store_is_named_without_its_password() {
    for url in [
        "redis://:secret@127.0.0.1:1",
        "redis://user:secret@127.0.0.1:1/0",
        "postgres://u:secret@127.0.0.1:1/db",
        "postgres://u@127.0.0.1:1/db?password=secret",
    ] {
        for args in [
            vec!["ls"],
            vec!["resolve", "abcd", "--release", "--by", "a", "--reason", "r"],
        ] {
            let mut with_flag = vec!["--store", url];
            with_flag.extend(&args);
            for (args, env) in [
                (with_flag, vec![]),
                (args.clone(), vec![("IDEM_STORE", url)]),
            ] {
                let out = run(&args, &env).await;
                let line = out.fails(5, "127.0.0.1:1").to_owned();
                assert!(!line.contains("secret"), "{line}");
                assert!(line.contains("***"), "{line}");
            }
        }
    }
    // Every other form a password takes; TLS URLs and strings of no known
    // kind say so without it too.
    for (url, says) in [
        ("postgresql://u:secret@127.0.0.1:1/db", "127.0.0.1:1"),
        ("rediss://:secret@127.0.0.1:1", "127.0.0.1:1"),
        (
            "postgres://u:secret@127.0.0.1:1/db?sslmode=require",
            "127.0.0.1:1",
        ),
        (
            "host=127.0.0.1 port=1 password=secret",
            "unknown store URL scheme",
        ),
        ("u:secret@127.0.0.1:1", "unknown store URL scheme"),
    ] {
        let out = run(&["--store", url, "ls"], &[]).await;
        let line = out.fails(5, says).to_owned();
        assert!(!line.contains("secret"), "{line}");
    }
    // Nor does --help show IDEM_STORE's value.
    let help = run(&["--help"], &[("IDEM_STORE", "redis://:secret@cache:6379")]).await;
    assert!(help.ok().contains("IDEM_STORE"));
    assert!(!help.stdout.contains("secret"), "{}", help.stdout);
}

#[tokio::test]
async fn a_store_url_of_no_known_kind_is_refused() {
    run(&["--store", "mongodb://u:secret@db/x", "stats"], &[])
        .await
        .fails(5, "unknown store URL scheme");
}

#[tokio::test]
async fn a_missing_sqlite_file_is_refused_not_created() {
    let dir = idem_testkit::TempDir::new("idem-cli-missing").unwrap();
    let path = dir.path().join("nothing-here.db");
    let url = format!("sqlite://{}", path.display());
    Idem::new(&url)
        .run(&["ls"])
        .await
        .fails(5, "does not exist");
    assert!(!path.exists());
    // The default store is ./idem.db.
    let out = run_in(&["stats"], &[], Some(dir.path())).await;
    out.fails(5, "there is no idem store at sqlite://idem.db");
    assert!(!dir.path().join("idem.db").exists());
}

#[tokio::test]
async fn a_store_written_by_a_newer_idem_is_refused_and_left_alone() {
    let dir = idem_testkit::TempDir::new("idem-cli-newer").unwrap();
    let path = dir.path().join("idem.db");
    let url = format!("sqlite://{}", path.display());
    idem::store::connect(&url).await.unwrap().close().await;
    let set_version = |v: i64| {
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute(
                "UPDATE idem_meta SET value = ?1 WHERE name = 'schema_version'",
                [v],
            )
            .unwrap();
    };
    set_version(99);
    let idem = Idem::new(&url);
    idem.run(&["ls"]).await.fails(5, "schema version 99");
    idem.run(&["resolve", "abcd", "--release", "--by", "a", "--reason", "r"])
        .await
        .fails(5, "upgrade idem");
    assert_eq!(
        sqlite_schema_version(&path),
        99,
        "the newer store was not touched"
    );
}

#[tokio::test]
async fn colour_only_on_request_and_never_in_json() {
    let (_dir, url) = crate::support::sqlite();
    let app = App::default();
    let exec = executor(&url, &app, Duration::ZERO).await;
    exec.call(
        charge_card,
        Charge {
            customer: "ada".into(),
            cents: 1,
        },
    )
    .call_id("call_1")
    .await
    .unwrap();
    exec.store().close().await;
    let key = charge_key("call_1");

    const ESC: char = '\u{1b}';
    let store = ["--store", url.as_str()];
    let with = |args: &[&'static str]| -> Vec<String> {
        store.iter().chain(args).map(|s| s.to_string()).collect()
    };
    for args in [with(&["ls"]), with(&["stats"]), with(&["show", "call"])] {
        let mut args = args;
        if args.last().unwrap() == "call" {
            *args.last_mut().unwrap() = key.as_str().to_owned();
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // Piped: plain text.
        let piped = run(&args, &[]).await;
        assert!(!piped.ok().contains(ESC), "{}", piped.stdout);
        // Forced: coloured.
        let forced = run(&args, &[("CLICOLOR_FORCE", "1")]).await;
        assert!(forced.ok().contains(ESC), "{args:?} is not coloured");
        // NO_COLOR wins.
        let no = run(&args, &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")]).await;
        assert!(!no.ok().contains(ESC), "{}", no.stdout);
        // JSON never.
        let mut json = args.clone();
        json.push("--json");
        let json = run(&json, &[("CLICOLOR_FORCE", "1")]).await;
        assert!(!json.ok().contains(ESC), "{}", json.stdout);
        json.json();
    }
    // Errors are coloured on a terminal only, like clap's.
    let err = run(&["--store", &url, "show", "ffff"], &[]).await;
    assert!(!err.stderr.contains(ESC));
}
