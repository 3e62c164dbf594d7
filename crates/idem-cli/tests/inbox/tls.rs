//! `idem serve --tls-cert FILE --tls-key FILE`: the inbox over HTTPS with a
//! certificate the test's own CA signed, its cookies `Secure`, plain HTTP
//! refused where a network could read it, and clients that stall their
//! handshake holding up nobody else.

use std::process::Command;
use std::time::{Duration, Instant};

use idem_testkit::servers::TestCertificates;

use crate::support::serve::{hidden, Http, Serve, DANA};
use crate::support::tools::{dispatcher, App};
use crate::support::IDEM;

/// What `idem serve --listen 127.0.0.1:0 --tls-cert CERT --tls-key KEY`
/// says when it refuses to start, as a usage error.
fn refused_with_tls(cert: &std::path::Path, key: &std::path::Path) -> String {
    let (code, said) = refused(&[
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{said}");
    said
}

/// `idem serve ARGS` that is expected to stop before it serves: its exit
/// code and what it said.
fn refused(args: &[&str]) -> (Option<i32>, String) {
    let (_dir, url) = crate::support::sqlite();
    let out = Command::new(IDEM)
        .args([
            "--store",
            &url,
            "serve",
            "--approvers",
            "/nonexistent/approvers.toml",
        ])
        .args(args)
        .env_remove("IDEM_APPROVERS")
        .output()
        .expect("idem runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_is_served_over_https_and_its_cookies_are_secure() {
    let certs = TestCertificates::new();
    let (_dir, url) = crate::support::sqlite();
    // The store must exist before `idem serve` opens it.
    let _agent = dispatcher(&url, &App::default(), Duration::ZERO).await;
    let (cert, key) = (
        certs.server.cert.to_str().unwrap(),
        certs.server.key.to_str().unwrap(),
    );
    let serve = Serve::start(&url, None, &["--tls-cert", cert, "--tls-key", key]);
    assert!(
        serve.base.starts_with("https://127.0.0.1:"),
        "{}",
        serve.base
    );

    // Signing in over HTTPS: the form's cookie and the session's are
    // `Secure` and `__Host-` without --secure-cookies.
    let mut http = Http::trusting(&certs.ca);
    let login = http.get(&serve.url("/login")).await;
    assert_eq!(login.status, 200, "{}", login.body);
    let csrf = hidden(&login.body, "csrf").expect("a CSRF token");
    for cookie in login.header("set-cookie") {
        assert!(cookie.contains("; Secure"), "{cookie}");
        assert!(cookie.starts_with("__Host-idem_login="), "{cookie}");
    }
    let done = http.log_in(&serve, &csrf, DANA).await;
    assert_eq!(done.status, 303, "{}", done.body);
    let session = done.header("set-cookie");
    assert!(
        session
            .iter()
            .any(|c| c.starts_with("__Host-idem_session=") && c.contains("; Secure")),
        "{session:?}"
    );
    let inbox = http.get(&serve.url("/")).await;
    assert_eq!(inbox.status, 200, "{}", inbox.body);
    // The API over HTTPS with a token.
    let api = http
        .api("GET", &serve.url("/api/inbox"), &serve.token, None)
        .await;
    assert_eq!(api.status, 200, "{}", api.body);

    // A client that trusts another CA is refused in the handshake, and a
    // plain-HTTP request to the HTTPS port gets no page.
    let mut stranger = Http::trusting(&certs.other_ca);
    let refused = stranger
        .try_get(&serve.url("/login"), Duration::from_secs(10))
        .await;
    let error = refused.expect_err("a certificate of an unknown CA is not trusted");
    assert!(error.contains("UnknownIssuer"), "{error}");
    let plain = serve.base.replace("https://", "http://");
    let answer = Http::default()
        .try_get(&format!("{plain}/login"), Duration::from_secs(10))
        .await;
    assert!(answer.is_err(), "plain HTTP got an answer: {answer:?}");

    // 200 connections that never begin their handshake, as a slow-loris
    // client would open them: a real sign-in page still comes at once.
    let address = serve.base.trim_start_matches("https://").to_owned();
    let mut stalled = Vec::new();
    for _ in 0..200 {
        stalled.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    // A new client, so a new connection and handshake.
    let started = Instant::now();
    let page = Http::trusting(&certs.ca)
        .try_get(&serve.url("/login"), Duration::from_secs(5))
        .await;
    assert_eq!(page, Ok(200), "with 200 stalled handshakes open");
    eprintln!(
        "a sign-in page with 200 stalled handshakes open: {:?}",
        started.elapsed()
    );
    drop(stalled);
}

#[test]
fn plain_http_off_loopback_and_bad_key_files_are_refused_before_serving() {
    // A non-loopback address without TLS: refused, naming the options
    // (nothing is bound: the check comes first).
    let (code, said) = refused(&["--listen", "0.0.0.0:0"]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("not a loopback address"), "{said}");
    assert!(said.contains("--tls-cert FILE --tls-key FILE"), "{said}");
    assert!(said.contains("--allow-plain-http"), "{said}");

    // A key file that holds a certificate: the message names the option
    // and the file, and shows none of its content.
    let certs = TestCertificates::new();
    let said = refused_with_tls(&certs.server.cert, &certs.ca);
    assert!(said.contains("--tls-key"), "{said}");
    assert!(said.contains(certs.ca.to_str().unwrap()), "{said}");
    assert!(!said.contains("BEGIN"), "no PEM content: {said}");

    // A certificate and a key that do not go together.
    let said = refused_with_tls(&certs.server.cert, &certs.client.key);
    assert!(said.contains("do not go together"), "{said}");

    // --tls-cert without --tls-key is a usage error.
    let (code, said) = refused(&["--tls-cert", certs.server.cert.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("--tls-key"), "{said}");
}
