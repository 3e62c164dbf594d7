//! PostgreSQL over TLS with libpq's `sslmode`, against servers with
//! `ssl=on` and certificates the test makes: one with `hostssl` lines only
//! in `pg_hba.conf`, presenting a valid certificate for 127.0.0.1; one
//! that offers TLS beside plain text, presenting a certificate for another
//! name. Each failure is one quick connect (the conformance suite over
//! `sslmode=verify-full` is `tls_conformance`).

use std::sync::LazyLock;
use std::time::Duration;

use crate::postgres_support::{connect_raw, server_url};
use idem_conformance::random_key;
use idem_postgres::{PostgresOptions, PostgresStore};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{StoreError, TlsFailure, TlsProblem};
use idem_testkit::servers::{PostgresServer, TestCertificates};
use idem_testkit::store_cases::{acquire, sent};

/// The certificates of every TLS test of this binary.
pub(crate) static CERTS: LazyLock<TestCertificates> = LazyLock::new(TestCertificates::new);

/// TLS only (`hostssl`), a valid certificate for 127.0.0.1.
static TLS_ONLY: LazyLock<Option<PostgresServer>> =
    LazyLock::new(|| PostgresServer::start_tls(&CERTS.server, &CERTS.ca, true));

/// TLS offered beside plain text, with a certificate for
/// `db.example.invalid` (signed by the test's CA).
static TLS_OFFERED: LazyLock<Option<PostgresServer>> =
    LazyLock::new(|| PostgresServer::start_tls(&CERTS.wrong_name, &CERTS.ca, false));

/// The URL of [`TLS_ONLY`] with no TLS parameters, or `None` after a loud
/// skip.
pub(crate) async fn tls_only_url(test: &str) -> Option<String> {
    idem_testkit::store_cases::server_url(test, "PostgreSQL", || {
        TLS_ONLY.as_ref().map(PostgresServer::url)
    })
    .await
}

async fn tls_offered_url(test: &str) -> Option<String> {
    idem_testkit::store_cases::server_url(test, "PostgreSQL", || {
        TLS_OFFERED.as_ref().map(PostgresServer::url)
    })
    .await
}

/// Short, for the failures: each is one connect.
fn quick() -> PostgresOptions {
    PostgresOptions::default()
        .connect_timeout(Duration::from_secs(5))
        .pool_size(2)
}

/// The URL `base` with `params`, and the password `hunter2`, which no
/// message may show (the servers trust every local connection).
fn with(base: &str, params: &str) -> String {
    format!("{}?{params}", base.replace("idem@", "idem:hunter2@"))
}

/// The TLS failure of connecting to `url`.
async fn refused(url: &str) -> (TlsFailure, String) {
    match PostgresStore::connect_with(url, quick()).await {
        Err(e @ StoreError::Tls(_)) => {
            let message = e.to_string();
            let StoreError::Tls(failure) = e else {
                unreachable!()
            };
            assert!(!message.contains("hunter2"), "password leaked: {message}");
            assert!(!message.contains('\n'), "{message}");
            println!("{message}");
            (*failure, message)
        }
        other => panic!("{url}: expected a TLS failure, got {other:?}"),
    }
}

/// A store of `url` works: a call is claimed and completed.
async fn works(url: &str) -> PostgresStore {
    let store = PostgresStore::connect_with(url, quick())
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let key = random_key();
    let fence = acquire(&store, &key).await;
    store
        .complete(&key, fence, &sent("m-1"), Duration::from_secs(60))
        .await
        .unwrap();
    store
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_encrypts_without_verifying_and_verify_modes_refuse_an_unknown_ca() {
    let Some(base) = tls_only_url("postgres sslmode require").await else {
        return;
    };
    // libpq's `require`: encrypted, the certificate not verified.
    works(&with(&base, "sslmode=require")).await.close().await;
    // The wrong CA named, and none (the platform's roots).
    let other = CERTS.other_ca.display();
    for params in [
        format!("sslmode=verify-ca&sslrootcert={other}"),
        format!("sslmode=verify-full&sslrootcert={other}"),
        "sslmode=verify-full&sslrootcert=system".to_owned(),
        "sslmode=verify-full".to_owned(),
    ] {
        let (failure, message) = refused(&with(&base, &params)).await;
        assert_eq!(failure.problem, TlsProblem::UnknownIssuer, "{message}");
        assert!(
            message.contains("the certificate of 127.0.0.1 is signed by a certificate authority that is not trusted")
                && message.contains("sslrootcert=PATH"),
            "{message}"
        );
    }
    // `require` with a CA file named verifies the CA, as libpq does.
    let params = format!("sslmode=require&sslrootcert={other}");
    let (failure, _) = refused(&with(&base, &params)).await;
    assert_eq!(failure.problem, TlsProblem::UnknownIssuer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_connection_to_a_tls_only_server_says_so_in_one_line() {
    let Some(base) = tls_only_url("postgres sslmode disable").await else {
        return;
    };
    let (failure, message) = refused(&with(&base, "sslmode=disable")).await;
    assert_eq!(failure.problem, TlsProblem::ServerRequiresTls, "{message}");
    assert!(
        message.contains("accepts TLS connections only") && message.contains("sslmode=require"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_to_a_server_without_tls_says_so_in_one_line() {
    let Some(plain) = server_url("postgres sslmode require, no TLS").await else {
        return;
    };
    let (failure, message) = refused(&with(&plain, "sslmode=require")).await;
    assert_eq!(failure.problem, TlsProblem::ServerNotTls, "{message}");
    assert!(
        message.contains("does not speak TLS") && message.contains("sslmode=prefer"),
        "{message}"
    );
}

/// `prefer` (the default) asks for TLS first, so a server that offers it
/// is spoken to over TLS, every connection of the store's (its pool's and
/// its listener's); verify-ca checks the CA but not the name, verify-full
/// both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_uses_tls_when_offered_and_verify_full_checks_the_name() {
    let Some(base) = tls_offered_url("postgres sslmode prefer").await else {
        return;
    };
    let ca = CERTS.ca.display();
    for params in [
        String::new(),
        "sslmode=prefer".to_owned(),
        format!("sslmode=verify-ca&sslrootcert={ca}"),
    ] {
        let store = works(&with(&base, &params)).await;
        // The raw client connects in plain text (NoTls): the server offers
        // TLS, it does not demand it.
        let raw = connect_raw(&base).await;
        let rows = raw
            .query(
                "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                 WHERE a.application_name = 'idem'",
                &[],
            )
            .await
            .unwrap();
        let ssl: Vec<bool> = rows.iter().map(|r| r.get(0)).collect();
        assert!(
            !ssl.is_empty(),
            "{params}: no connection of the store's seen"
        );
        assert!(
            ssl.iter().all(|&on| on),
            "{params}: a connection without TLS: {ssl:?}"
        );
        store.close().await;
    }
    let (failure, message) = refused(&with(
        &base,
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .await;
    assert_eq!(
        failure.problem,
        TlsProblem::WrongName {
            names: vec!["db.example.invalid".into()]
        },
        "{message}"
    );
    assert!(message.contains("sslmode=verify-ca"), "{message}");
}

/// Neon's form: `sslmode=require&channel_binding=require`. The password
/// exchange (SCRAM-SHA-256-PLUS) is bound to the TLS channel through the
/// hash of the server's certificate, which the server checks; without TLS
/// there is nothing to bind to, and the store is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_is_bound_to_the_tls_channel_when_the_url_requires_it() {
    let Some(base) = tls_offered_url("postgres channel binding").await else {
        return;
    };
    // `idem_scram` (password `hunter2`) signs in with SCRAM: see
    // `PostgresServer::start_tls`.
    let url = base.replace("idem@", "idem_scram:hunter2@");
    works(&format!("{url}?sslmode=require&channel_binding=require"))
        .await
        .close()
        .await;
    let plain = format!("{url}?sslmode=disable&channel_binding=require");
    match PostgresStore::connect_with(&plain, quick()).await {
        Err(e) => assert!(!e.to_string().contains("hunter2"), "{e}"),
        Ok(_) => panic!("{plain}: connected without channel binding"),
    }
}

/// Cloud SQL's form: `sslcert` and `sslkey` name a client certificate,
/// which an account that signs in by certificate (`cert` in
/// `pg_hba.conf`) needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_signs_in_an_account_that_needs_one() {
    let Some(base) = tls_only_url("postgres client certificate").await else {
        return;
    };
    // `idem-client` signs in by certificate: see `PostgresServer::start_tls`.
    let url = base.replace("idem@", "idem-client@");
    let ca = CERTS.ca.display();
    let client = format!(
        "sslcert={}&sslkey={}",
        CERTS.client.cert.display(),
        CERTS.client.key.display()
    );
    let without = format!("{url}?sslmode=verify-full&sslrootcert={ca}");
    let (failure, message) = refused(&without).await;
    assert_eq!(
        failure.problem,
        TlsProblem::ClientCertificateRequired,
        "{message}"
    );
    assert!(message.contains("sslcert=PATH&sslkey=PATH"), "{message}");
    works(&format!("{without}&{client}")).await.close().await;
}

#[tokio::test]
async fn tls_parameters_that_cannot_be_honoured_are_refused_before_connecting() {
    for (url, says) in [
        (
            "postgres://u@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "cannot read the file /nonexistent/ca.pem (sslrootcert=)",
        ),
        ("postgres://u@127.0.0.1:1/db?sslcert=c.pem", "needs its key"),
        (
            "postgres://u@127.0.0.1:1/db?sslmode=always",
            "sslmode \"always\" is not one of",
        ),
        (
            "postgres://u@127.0.0.1:1/db?sslmode=require&sslrootcert=system",
            "verify-full, the one mode",
        ),
    ] {
        let err = PostgresStore::connect(url).await.unwrap_err();
        assert!(err.to_string().contains(says), "{url}: {err}");
    }
}

/// The URL the child of [`a_ca_file_named_by_the_environment_is_trusted`]
/// connects to.
const CHILD_URL: &str = "IDEM_TEST_TLS_URL";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child process of a_ca_file_named_by_the_environment_is_trusted"]
async fn ca_file_from_the_environment_child() {
    let url = std::env::var(CHILD_URL).expect("started by the parent test");
    works(&url).await.close().await;
}

/// `IDEM_TLS_CA_FILE` names the CA when the URL names no `sslrootcert`.
/// Set in a child process of its own (this test binary, run on the
/// ignored case above), since the environment is shared by every test of
/// a process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_named_by_the_environment_is_trusted() {
    let Some(base) = tls_only_url("postgres IDEM_TLS_CA_FILE").await else {
        return;
    };
    let url = format!("{base}?sslmode=verify-full");
    let child = |ca: &std::path::Path| {
        std::process::Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "--ignored",
                "--exact",
                "tls::ca_file_from_the_environment_child",
            ])
            .env(idem_runtime::store::url::TLS_CA_FILE_ENV, ca)
            .env(CHILD_URL, &url)
            .output()
            .expect("run the child")
    };
    let trusted = child(&CERTS.ca);
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stdout)
    );
    let other = child(&CERTS.other_ca);
    let out = String::from_utf8_lossy(&other.stdout);
    assert!(!other.status.success(), "trusted another CA: {out}");
    assert!(out.contains("not trusted"), "{out}");
}
