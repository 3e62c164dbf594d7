//! Redis over TLS, against `redis-server`s with a TLS port only (`--port
//! 0`) and certificates the test makes: a certificate that does not verify
//! is refused naming the host, the reason and the option that fixes it;
//! mutual TLS takes a client certificate; a URL that disagrees with the
//! server about TLS says so in one line. Each failure is one quick connect
//! (the conformance suite over `rediss://` is `tls_conformance`).

use std::sync::LazyLock;
use std::time::Duration;

use crate::redis_support::server_url;
use idem_redis::{RedisOptions, RedisStore};
use idem_runtime::store::StoreExt;
use idem_runtime::store::{StoreError, TlsFailure, TlsProblem};
use idem_testkit::servers::{RedisServer, TestCertificates};
use idem_testkit::tls_cases::{
    a_call_goes_through, assert_a_ca_file_from_the_environment_is_trusted, assert_refused_for,
    child_url, refusal,
};

/// The certificates of every TLS test of this binary.
pub(crate) static CERTS: LazyLock<TestCertificates> = LazyLock::new(TestCertificates::new);

/// A TLS-only server presenting a valid certificate for 127.0.0.1.
pub(crate) static TLS_SERVER: LazyLock<Option<RedisServer>> =
    LazyLock::new(|| RedisServer::start_tls(&CERTS.server, &CERTS.ca, false));

/// `rediss://` to [`TLS_SERVER`] trusting the test's CA, or `None` after a
/// loud skip.
pub(crate) async fn tls_url(test: &str) -> Option<String> {
    server_url_of(test, || {
        TLS_SERVER
            .as_ref()
            .map(|s| format!("{}?ca={}", s.url(), CERTS.ca.display()))
    })
    .await
}

/// The URL `url` reads off a lazily started server, or `None` after a loud
/// skip.
async fn server_url_of(test: &str, url: fn() -> Option<String>) -> Option<String> {
    idem_testkit::store_cases::server_url(test, "redis-server", url).await
}

/// `url` without its query, its scheme and user replaced by
/// `scheme_and_user` (`rediss://:hunter2@`: a password no message may
/// show).
fn with_password(url: &str, scheme_and_user: &str) -> String {
    url.split('?')
        .next()
        .unwrap()
        .replace("rediss://", scheme_and_user)
}

/// Short, for the failures: each is one connect.
fn quick() -> RedisOptions {
    RedisOptions::default().connection_timeout(Duration::from_millis(500))
}

/// The TLS failure of connecting to `url`.
async fn refused(url: &str) -> (TlsFailure, String) {
    refusal(url, RedisStore::connect_with(url, quick()).await)
}

/// [`refused`], in a message of one line.
async fn refused_in_one_line(url: &str) -> (TlsFailure, String) {
    let (failure, message) = refused(url).await;
    assert!(!message.contains('\n'), "{message}");
    (failure, message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_ca_is_not_trusted_is_refused_naming_the_ca_option() {
    let Some(url) = tls_url("redis tls unknown CA").await else {
        return;
    };
    let base = with_password(&url, "rediss://:hunter2@");
    let other = format!("{base}?ca={}", CERTS.other_ca.display());
    // The wrong CA named, and none (the platform's roots, which do not
    // hold the test's CA).
    for url in [other, base] {
        let refused = refused(&url).await;
        assert_refused_for(
            &refused,
            TlsProblem::UnknownIssuer,
            &[
                "the certificate of 127.0.0.1 is signed by a certificate authority that is not trusted",
                "?ca=PATH (or IDEM_TLS_CA_FILE)",
            ],
        );
        let (failure, _) = refused;
        assert_eq!(failure.host, "127.0.0.1");
        assert!(std::error::Error::source(&StoreError::from(failure)).is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_and_one_for_another_name_are_refused() {
    let Some(_) = tls_url("redis tls bad certificates").await else {
        return;
    };
    let start = |cert| {
        let cert = match cert {
            "expired" => &CERTS.expired,
            _ => &CERTS.wrong_name,
        };
        RedisServer::start_tls(cert, &CERTS.ca, false).expect("redis-server")
    };
    let (expired, wrong_name) =
        tokio::task::spawn_blocking(move || (start("expired"), start("wrong")))
            .await
            .unwrap();
    let url = |s: &RedisServer| format!("{}?ca={}", s.url(), CERTS.ca.display());

    assert_refused_for(
        &refused(&url(&expired)).await,
        TlsProblem::Expired,
        &["the certificate of 127.0.0.1 has expired"],
    );

    let (failure, message) = refused(&url(&wrong_name)).await;
    assert!(
        matches!(&failure.problem, TlsProblem::WrongName { names } if names == &["db.example.invalid"]),
        "{message}"
    );
    assert!(
        message.contains("is not issued for the name 127.0.0.1")
            && message.contains("a host name the certificate is issued for"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_takes_a_client_certificate_and_refuses_a_client_without() {
    let Some(_) = tls_url("redis mutual tls").await else {
        return;
    };
    let server = tokio::task::spawn_blocking(|| {
        RedisServer::start_tls(&CERTS.server, &CERTS.ca, true).expect("redis-server")
    })
    .await
    .unwrap();
    let url = format!("{}?ca={}", server.url(), CERTS.ca.display());

    let (failure, message) = refused(&url).await;
    assert!(
        matches!(
            failure.problem,
            TlsProblem::ClientCertificateRequired | TlsProblem::ClientCertificateRefused
        ),
        "{message}"
    );
    assert!(message.contains("?cert=PATH&key=PATH"), "{message}");

    let with_cert = format!(
        "{url}&cert={}&key={}",
        CERTS.client.cert.display(),
        CERTS.client.key.display()
    );
    let store = RedisStore::connect_with(&with_cert, quick()).await.unwrap();
    a_call_goes_through(&store).await;
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_that_disagrees_with_the_server_about_tls_says_so_in_one_line() {
    let (Some(tls), Some(plain)) = (
        tls_url("redis tls mismatch").await,
        server_url("redis tls mismatch").await,
    ) else {
        return;
    };
    // redis:// to the TLS-only server.
    let to_tls = with_password(&tls, "redis://:hunter2@");
    assert_refused_for(
        &refused_in_one_line(&to_tls).await,
        TlsProblem::ServerRequiresTls,
        &["accepts TLS connections only", "write rediss://"],
    );

    // rediss:// to a plain server.
    let to_plain = format!(
        "{}?ca={}",
        plain.replace("redis://", "rediss://:hunter2@"),
        CERTS.ca.display()
    );
    assert_refused_for(
        &refused_in_one_line(&to_plain).await,
        TlsProblem::ServerNotTls,
        &["does not speak TLS", "write redis://"],
    );
}

#[tokio::test]
async fn a_tls_file_that_cannot_be_read_is_refused_before_connecting() {
    let err = RedisStore::connect("rediss://127.0.0.1:1/?ca=/nonexistent/ca.pem")
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidUrl { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("cannot read the file /nonexistent/ca.pem (?ca=)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "entry point of the child process of a_ca_file_named_by_the_environment_is_trusted"]
async fn ca_file_from_the_environment_child() {
    let store = RedisStore::connect_with(&child_url(), quick())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    a_call_goes_through(&store).await;
    store.close().await;
}

/// `IDEM_TLS_CA_FILE` names the CA when the URL does not. Set in a child
/// process of its own (this test binary, run on the ignored case above),
/// since the environment is shared by every test of a process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_file_named_by_the_environment_is_trusted() {
    let Some(url) = tls_url("redis IDEM_TLS_CA_FILE").await else {
        return;
    };
    assert_a_ca_file_from_the_environment_is_trusted(
        "tls::ca_file_from_the_environment_child",
        url.split('?').next().unwrap(),
        &CERTS,
    );
}

/// Over `rediss://` as over plain text: no call made once a restarted
/// server is back fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_after_a_restart_of_a_tls_server_fails() {
    let started =
        tokio::task::spawn_blocking(|| RedisServer::start_tls(&CERTS.server, &CERTS.ca, false));
    let Some(mut server) = started.await.unwrap() else {
        return idem_testkit::skip("redis TLS server restarted", "redis-server");
    };
    let url = format!("{}?ca={}", server.url(), CERTS.ca.display());
    let store = RedisStore::connect(&url).await.unwrap();
    idem_testkit::store_cases::no_call_after_a_restart_fails(
        std::sync::Arc::new(store),
        2,
        false,
        || server.restart(),
    )
    .await;
}
