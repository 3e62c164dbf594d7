//! PostgreSQL over TLS with libpq's `sslmode`, against servers with
//! `ssl=on` and certificates the test makes: one with `hostssl` lines only
//! in `pg_hba.conf`, presenting a valid certificate for 127.0.0.1; one
//! that offers TLS beside plain text, presenting a certificate for another
//! name. Each failure is one quick connect (the conformance suite over
//! `sslmode=verify-full` is `tls_conformance`).

use std::sync::LazyLock;
use std::time::Duration;

use crate::postgres_support::{connect_raw, server_url};
use idem_postgres::{PostgresOptions, PostgresStore};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{TlsFailure, TlsProblem};
use idem_testkit::servers::{PostgresServer, TestCertificates};
use idem_testkit::tls_cases::{
    a_call_goes_through, assert_a_ca_file_from_the_environment_is_trusted, assert_refused_for,
    child_url, refusal,
};

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

/// The TLS failure of connecting to `url`, in one line.
async fn refused(url: &str) -> (TlsFailure, String) {
    let (failure, message) = refusal(url, PostgresStore::connect_with(url, quick()).await);
    assert!(!message.contains('\n'), "{message}");
    (failure, message)
}

/// A store of `url` works: a call is claimed and completed.
async fn works(url: &str) -> PostgresStore {
    let store = PostgresStore::connect_with(url, quick())
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    a_call_goes_through(&store).await;
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
        assert_refused_for(
            &refused(&with(&base, &params)).await,
            TlsProblem::UnknownIssuer,
            &[
                "the certificate of 127.0.0.1 is signed by a certificate authority that is not trusted",
                "sslrootcert=PATH",
            ],
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
    assert_refused_for(
        &refused(&with(&base, "sslmode=disable")).await,
        TlsProblem::ServerRequiresTls,
        &["accepts TLS connections only", "sslmode=require"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_to_a_server_without_tls_says_so_in_one_line() {
    let Some(plain) = server_url("postgres sslmode require, no TLS").await else {
        return;
    };
    assert_refused_for(
        &refused(&with(&plain, "sslmode=require")).await,
        TlsProblem::ServerNotTls,
        &["does not speak TLS", "sslmode=prefer"],
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
    assert_refused_for(
        &refused(&with(
            &base,
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ))
        .await,
        TlsProblem::WrongName {
            names: vec!["db.example.invalid".into()],
        },
        &["sslmode=verify-ca"],
    );
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
    assert_refused_for(
        &refused(&without).await,
        TlsProblem::ClientCertificateRequired,
        &["sslcert=PATH&sslkey=PATH"],
    );
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child process of a_ca_file_named_by_the_environment_is_trusted"]
async fn ca_file_from_the_environment_child() {
    works(&child_url()).await.close().await;
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
    assert_a_ca_file_from_the_environment_is_trusted(
        "tls::ca_file_from_the_environment_child",
        &format!("{base}?sslmode=verify-full"),
        &CERTS,
    );
}

/// Over `sslmode=verify-full` as over plain text: the TLS connections a
/// restart closed are replaced before a request is sent on them, and no
/// call made once the server is back fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_after_a_restart_of_a_tls_only_server_fails() {
    let started =
        tokio::task::spawn_blocking(|| PostgresServer::start_tls(&CERTS.server, &CERTS.ca, true));
    let Some(mut server) = started.await.unwrap() else {
        return idem_testkit::skip("postgres TLS server restarted", "PostgreSQL");
    };
    let ca = CERTS.ca.display();
    let url = with(
        &server.url(),
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let store = PostgresStore::connect(&url).await.unwrap();
    idem_testkit::store_cases::no_call_after_a_restart_fails(
        std::sync::Arc::new(store),
        2,
        true,
        || server.restart(),
    )
    .await;
}
