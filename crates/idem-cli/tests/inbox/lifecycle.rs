//! Stopping and restarting `idem serve` with inbox pages open: Ctrl-C
//! ends the live streams and the process, and a page open across a
//! restart says that its person was signed out.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::browser::Browser;
use crate::support::serve::{sign_in, Http, Scene, DANA};

/// Open `GET /events` with `cookie` on a raw connection and read until the
/// stream's headers came: the connection, and the status line.
async fn open_stream(base: &str, cookie: &str) -> (tokio::net::TcpStream, String) {
    let address = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!(
        "GET /events HTTP/1.1\r\nHost: {address}\r\nCookie: {cookie}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte))
            .await
            .expect("the stream's headers within 10 s")
            .unwrap();
        assert_eq!(read, 1, "the server closed the stream: {head:?}");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let status = head.lines().next().unwrap_or_default().to_owned();
    (stream, status)
}

/// A signed-in page's live stream is open when the operator presses
/// Ctrl-C: the stream ends, and the server exits within a few seconds,
/// as it does with nothing open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_the_server_while_a_live_stream_is_open() {
    let (_dir, url) = crate::support::sqlite();
    let mut scene = Scene::new(&url, Duration::ZERO).await;
    let mut http = Http::default();
    sign_in(&mut http, &scene.serve, DANA).await;
    let cookie = format!("idem_session={}", http.cookies["idem_session"]);
    let (mut stream, status) = open_stream(&scene.serve.base, &cookie).await;
    assert!(status.contains(" 200 "), "{status}");

    scene.serve.interrupt();
    let exited = tokio::task::block_in_place(|| scene.serve.exited_within(Duration::from_secs(5)));
    let exited = exited.expect("idem serve exits within 5 s of Ctrl-C with a stream open");
    assert!(exited.success(), "{exited}");
    // The stream was ended, not left hanging.
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "the stream ends with the server");
}

/// After a restart, the old session's stream is refused (401), and a
/// page open in the browser says that its person was signed out, with a
/// link to sign in again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_open_across_a_restart_says_it_was_signed_out() {
    let Some(browser) = Browser::start("a_page_open_across_a_restart_says_it_was_signed_out").await
    else {
        return;
    };
    let (_dir, url) = crate::support::sqlite();
    let mut scene = Scene::new(&url, Duration::ZERO).await;
    let mut http = Http::default();
    sign_in(&mut http, &scene.serve, DANA).await;
    let cookie = format!("idem_session={}", http.cookies["idem_session"]);

    browser.goto(&scene.serve.url("/")).await;
    browser
        .wait_for("form#login", Duration::from_secs(15))
        .await;
    browser.fill("#name", DANA.0).await;
    browser.fill("#password", DANA.1).await;
    browser.submit("form#login").await;
    browser
        .wait_for("#inbox-rows", Duration::from_secs(15))
        .await;
    let hidden = browser
        .execute(
            "return document.getElementById('signed-out').hidden",
            vec![],
        )
        .await;
    assert_eq!(hidden, serde_json::json!(true), "signed in: no banner");

    tokio::task::block_in_place(|| scene.serve.restart());
    let (_stream, status) = open_stream(&scene.serve.base, &cookie).await;
    assert!(
        status.contains(" 401 "),
        "the old session is gone: {status}"
    );
    let banner = browser
        .wait_for("#signed-out:not([hidden])", Duration::from_secs(15))
        .await;
    let text = banner.text().await.unwrap();
    assert!(text.contains("You are signed out"), "{text}");
    browser.click("#signed-out a").await;
    browser
        .wait_for("form#login", Duration::from_secs(15))
        .await;
}
