//! Choosing a store by URL: the same program on a laptop (SQLite) and on a
//! fleet (Redis, PostgreSQL), by configuration alone.
#![cfg(all(feature = "sqlite", feature = "redis", feature = "postgres"))]

use std::sync::Arc;
use std::time::Duration;

use idem::key::Fingerprint;
use idem::record::{Outcome, OutputJson};
use idem::store::StoreExt;
use idem::store::{connect, ClaimOutcome, Store, StoreError};
use idem_conformance::random_key;
use idem_testkit::store_cases::request;
use idem_testkit::{skip, PostgresServer, RedisServer, TempDir};
use serde_json::json;

/// What a program does with whatever store it was configured with: record
/// a call, and see the duplicate deduplicated.
async fn first_call_then_duplicate(store: Arc<dyn Store>) {
    let key = random_key();
    let f = Fingerprint::new("a".repeat(64));
    let req = request(&key, &f);
    let ClaimOutcome::Acquired { fence, .. } = store.claim(&req).await.unwrap() else {
        panic!("fresh key not acquired on {}", store.describe());
    };
    let outcome = Outcome::Success {
        output: OutputJson::from_value(&json!({"message_id": "m-1"})),
    };
    store
        .complete(&key, fence, &outcome, Duration::from_secs(60))
        .await
        .unwrap();
    match store.claim(&req).await.unwrap() {
        ClaimOutcome::Completed(r) => assert_eq!(r.outcome(), Some(&outcome)),
        other => panic!(
            "duplicate not deduplicated on {}: {other:?}",
            store.describe()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_url_selects_the_in_memory_store() {
    let store = connect("memory:").await.unwrap();
    assert_eq!(store.describe(), "memory");
    first_call_then_duplicate(store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_url_selects_a_file_with_its_options() {
    let dir = TempDir::new("idem-url").unwrap();
    let path = dir.path().join("app.db");
    let url = format!(
        "sqlite://{}?synchronous=normal&busy_timeout_ms=250",
        path.display()
    );
    let store = connect(&url).await.unwrap();
    assert_eq!(store.describe(), format!("sqlite:{}", path.display()));
    first_call_then_duplicate(store).await;
    assert!(path.exists());
    let mode: String = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

/// `close` reaches the store behind the `Arc<dyn Store>` that `connect`
/// returns: afterwards operations fail with `Closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_store_can_be_closed() {
    let dir = TempDir::new("idem-url").unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("app.db").display());
    for url in ["memory:", sqlite.as_str()] {
        let store = connect(url).await.unwrap();
        store.close().await;
        match store.get(&random_key()).await {
            Err(StoreError::Closed { store: name }) => assert_eq!(name, store.describe()),
            other => panic!("{url}: expected Closed after close, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_are_configuration_errors() {
    for (url, says) in [
        ("mongodb://db/idem", "unknown store URL scheme"),
        ("memory:x", "a memory store takes no path or options"),
        ("sqlite://", "names no file"),
        ("sqlite://idem.db?journal=off", "unknown SQLite option"),
        ("sqlite://idem.db?busy_timeout_ms=soon", "milliseconds"),
        ("redis://", "bad Redis URL"),
        ("postgres://[::1", "bad PostgreSQL URL"),
    ] {
        match connect(url).await {
            Err(
                e @ (StoreError::InvalidUrl { .. }
                | StoreError::UnknownOption(_)
                | StoreError::BadOption(_)
                | StoreError::UnknownScheme { .. }),
            ) => {
                assert!(e.to_string().contains(says), "{url}: {e}")
            }
            other => panic!("{url}: expected a configuration error, got {other:?}"),
        }
    }
}

/// Each refusal of a URL names what is wrong with it in a variant of its
/// own, and its message names the store without the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_refusals_are_typed_and_hide_the_password() {
    fn unknown(e: &StoreError) -> bool {
        matches!(e, StoreError::UnknownOption(_))
    }
    fn bad(e: &StoreError) -> bool {
        matches!(e, StoreError::BadOption(_))
    }
    fn invalid(e: &StoreError) -> bool {
        matches!(e, StoreError::InvalidUrl { .. })
    }
    type Is = fn(&StoreError) -> bool;
    let cases: [(&str, Is, &str); 11] = [
        (
            "redis://:secret@h/?prefx=a",
            unknown,
            r#"unknown Redis option "prefx""#,
        ),
        ("redis://:secret@h/?replicas=all", bad, "number of replicas"),
        ("redis://:secret@h/?prefix=%zz", bad, "%-escape"),
        ("redis://:secret@h/?prefix=a%7Bb", bad, "no braces"),
        ("redis://:secret@h/?prefix=", bad, "non-empty"),
        ("redis+cluster://:secret@a:1/3", invalid, "only database 0"),
        (
            "redis+cluster://:secret@a:1,,b:2",
            invalid,
            "empty seed node",
        ),
        ("redis://:secret@a:1,b:2", invalid, "redis+cluster://"),
        (
            "postgres://app:secret@[::1/idem",
            invalid,
            "bad PostgreSQL URL",
        ),
        (
            "postgres://app:secret@h/idem?schema=A",
            bad,
            "not a usable schema name",
        ),
        (
            "postgres://app:secret@h/idem?schema=a&schema=b",
            invalid,
            "names the schema twice",
        ),
    ];
    for (url, kind, says) in cases {
        match connect(url).await {
            Err(e) if kind(&e) => {
                let message = e.to_string();
                assert!(
                    message.starts_with("store configuration error: "),
                    "{url}: {message}"
                );
                assert!(message.contains(says), "{url}: {message}");
                assert!(!message.contains("secret"), "{url}: {message}");
            }
            other => panic!("{url}: not the expected refusal: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_and_postgres_urls_select_the_server_stores() {
    let (redis, postgres) =
        tokio::task::spawn_blocking(|| (RedisServer::start(), PostgresServer::start()))
            .await
            .unwrap();
    match redis {
        Some(server) => {
            let store = connect(&server.url()).await.unwrap();
            assert_eq!(store.describe(), server.url());
            first_call_then_duplicate(store).await;
        }
        None => skip("redis URL selection", "redis-server"),
    }
    match postgres {
        Some(server) => {
            let url = server.url().replace("postgres://", "postgresql://");
            let store = connect(&url).await.unwrap();
            assert_eq!(store.describe(), url);
            first_call_then_duplicate(store).await;
        }
        None => skip("postgres URL selection", "PostgreSQL"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_urls_fail_closed_without_the_password() {
    let port = closed_port();
    for url in [
        format!("redis://:pw@127.0.0.1:{port}/"),
        format!("postgres://app:pw@127.0.0.1:{port}/idem"),
    ] {
        unavailable_without(&url, port, ":pw@").await;
    }
}

/// `url` (to a server at `port` that does not answer) opens as
/// unavailable, naming the server and without `secret`.
async fn unavailable_without(url: &str, port: u16, secret: &str) {
    match connect(url).await {
        Err(e @ StoreError::Unavailable { .. }) => {
            let message = e.to_string();
            assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
            assert!(!message.contains(secret), "password leaked: {message}");
        }
        other => panic!("{url}: expected Unavailable, got {other:?}"),
    }
}

/// A local port nothing listens on.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// TLS URLs reach their backend, which connects with TLS (the TLS cases
/// themselves are the Redis and PostgreSQL stores' tests): where nothing
/// listens, every way of opening one fails as unavailable, without the
/// password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn urls_asking_for_tls_reach_their_backend_without_the_password() {
    let port = closed_port();
    for url in [
        format!("rediss://:pw@127.0.0.1:{port}/0"),
        format!("rediss://user:pw@127.0.0.1:{port}"),
        format!("rediss+cluster://:pw@127.0.0.1:{port}"),
        format!("postgres://app:pw@127.0.0.1:{port}/idem?sslmode=require"),
        format!("postgresql://app@127.0.0.1:{port}/idem?password=pw&sslmode=verify-ca"),
        format!("postgres://app:p?w@127.0.0.1:{port}/idem?schema=s&sslmode=Verify-Full"),
    ] {
        // Whatever opens it: read-write, read-only, or to migrate.
        let read_only = idem::store::connect_read_only(&url).await;
        assert!(
            matches!(read_only, Err(StoreError::Unavailable { .. })),
            "{url} read-only: {read_only:?}"
        );
        let migrated = idem::store::migrate(&url).await;
        assert!(
            matches!(migrated, Err(StoreError::Unavailable { .. })),
            "{url} migrate: {migrated:?}"
        );
        unavailable_without(&url, port, "pw").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_urls_that_allow_plain_text_still_connect() {
    // `prefer` (the default) falls back to plain text when the server
    // offers no TLS: the URL reaches the PostgreSQL store, which finds
    // nothing listening.
    let port = closed_port();
    for mode in ["prefer", "disable"] {
        let url = format!("postgres://app:pw@127.0.0.1:{port}/idem?sslmode={mode}");
        match connect(&url).await {
            Err(e @ StoreError::Unavailable { .. }) => {
                assert!(!e.to_string().contains("pw"), "{e}")
            }
            other => panic!("{url}: expected Unavailable, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_string_of_no_known_kind_is_refused_without_its_password() {
    for url in [
        "host=db user=app password=pw dbname=idem",
        "host=db password = 'p w' dbname=idem",
        "app:pw@db/idem",
    ] {
        match connect(url).await {
            Err(e @ StoreError::UnknownScheme { .. }) => {
                let message = e.to_string();
                assert!(message.contains("unknown store URL scheme"), "{message}");
                assert!(
                    !message.contains("pw") && !message.contains("p w"),
                    "{message}"
                );
            }
            other => panic!("{url}: expected a configuration error, got {other:?}"),
        }
    }
}

// Run by `idem_store_environment_variable_selects_the_store` in a child
// process, whose environment it sets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child process started by the IDEM_STORE test"]
async fn from_env_child() {
    let store = idem::store::from_env().await.unwrap();
    println!("\nIDEM-STORE {}", store.describe());
}

#[test]
fn idem_store_environment_variable_selects_the_store() {
    let dir = TempDir::new("idem-url-env").unwrap();
    let path = dir.path().join("env.db");
    let describe = |value: Option<String>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--ignored",
            "--exact",
            "store_url::from_env_child",
            "--nocapture",
        ])
        .current_dir(dir.path());
        match value {
            Some(v) => cmd.env(idem::store::STORE_ENV, v),
            None => cmd.env_remove(idem::store::STORE_ENV),
        };
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("IDEM-STORE ").map(str::to_owned))
            .unwrap()
    };
    assert_eq!(describe(Some("memory:".into())), "memory");
    assert_eq!(
        describe(Some(format!("sqlite://{}", path.display()))),
        format!("sqlite:{}", path.display())
    );
    // Unset: the embedded default, a SQLite file in the working directory.
    assert_eq!(
        describe(None),
        format!("sqlite:{}", dir.path().join("idem.db").display())
    );
}

/// `examples/demo.rs` runs unchanged, by configuration alone, on a Redis
/// that serves TLS only (`rediss://…?ca=`) and on a PostgreSQL that accepts
/// TLS only (`sslmode=verify-full&sslrootcert=`), both with certificates
/// of the test's own CA, and says what it says on SQLite.
#[test]
fn the_demo_runs_unchanged_on_managed_stores_over_tls() {
    use idem_testkit::servers::TestCertificates;
    use std::process::Command;

    let what = "the_demo_runs_unchanged_on_managed_stores_over_tls";
    let certs = TestCertificates::new();
    let Some(redis) = RedisServer::start_tls(&certs.server, &certs.ca, false) else {
        skip(what, "redis-server");
        return;
    };
    let Some(postgres) = PostgresServer::start_tls(&certs.server, &certs.ca, true) else {
        skip(what, "PostgreSQL");
        return;
    };
    let features: Vec<&str> = [
        ("sqlite", true),
        ("redis", true),
        ("postgres", true),
        ("conformance", cfg!(feature = "conformance")),
        ("schema-validation", cfg!(feature = "schema-validation")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    let demo = crate::mcp_example::example("demo", &features);
    let dir = TempDir::new("idem-demo-tls").unwrap();
    let run = |store: &str| {
        let output = Command::new(&demo)
            .current_dir(dir.path())
            .env("IDEM_STORE", store)
            .env_remove("IDEM_TLS_CA_FILE")
            .output()
            .unwrap();
        let stdout = String::from_utf8(output.stdout).unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(output.status.success(), "on {store}: {stdout}{stderr}");
        let first = stdout.lines().next().unwrap_or_default().to_owned();
        // The first line names the store; the rest is the same everywhere.
        (first, stdout.lines().skip(1).collect::<Vec<_>>().join("\n"))
    };
    let (_, on_sqlite) = run(&format!(
        "sqlite://{}",
        dir.path().join("demo.db").display()
    ));
    let ca = certs.ca.display();
    let redis_url = format!("{}?ca={ca}", redis.url());
    let postgres_url = format!("{}?sslmode=verify-full&sslrootcert={ca}", postgres.url());
    for url in [redis_url, postgres_url] {
        let (first, rest) = run(&url);
        assert!(
            first.contains(url.split("://").next().unwrap()),
            "the demo names its store: {first}"
        );
        assert_eq!(
            rest, on_sqlite,
            "the demo on {url} says what it says on SQLite"
        );
    }
}
