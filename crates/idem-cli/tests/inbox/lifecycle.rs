//! Stopping and restarting `idem serve` with inbox pages open: SIGINT
//! (Ctrl-C) or SIGTERM ends the live streams and the process, a request
//! under way is waited for within the grace and named if left; SIGHUP
//! reloads the approvers file; a restart signs nobody out
//! (sessions are in the store); and a page whose session is ended on
//! another instance says that its person was signed out.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::browser::Browser;
use crate::support::serve::{hidden, sign_in, token_entry, Http, Scene, DANA};

/// Open `GET /events` with `cookie` on a raw connection and read until the
/// stream's headers came: the connection, and the status line.
pub(crate) async fn open_stream(base: &str, cookie: &str) -> (tokio::net::TcpStream, String) {
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
/// Ctrl-C (SIGINT), or when systemd, Docker or Kubernetes stop the service
/// (SIGTERM): the stream ends, and the server exits within a few seconds,
/// as it does with nothing open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_signal_stops_the_server_while_a_live_stream_is_open() {
    for signal in ["INT", "TERM"] {
        let (_dir, _, mut scene) = Scene::on_sqlite().await;
        let mut http = Http::default();
        sign_in(&mut http, &scene.serve, DANA).await;
        let cookie = format!("idem_session={}", http.cookies["idem_session"]);
        let (mut stream, status) = open_stream(&scene.serve.base, &cookie).await;
        assert!(status.contains(" 200 "), "{status}");

        scene.serve.signal(signal);
        let exited =
            tokio::task::block_in_place(|| scene.serve.exited_within(Duration::from_secs(5)));
        let exited = exited.unwrap_or_else(|| {
            panic!("idem serve exits within 5 s of SIG{signal} with a stream open")
        });
        assert!(exited.success(), "SIG{signal}: {exited}");
        // The stream was ended, not left hanging.
        let mut rest = Vec::new();
        let ended =
            tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut rest)).await;
        assert!(ended.is_ok(), "the stream ends with the server");
        let said = scene.serve.said();
        assert!(
            said.contains(&format!("SIG{signal}: stopping"))
                && said.contains("every request finished"),
            "{said}"
        );
    }
}

/// A request still under way when SIGTERM comes (a client sending its
/// body slowly): the server accepts no new connection, waits for it for
/// `--shutdown-grace`, then stops and names it; a second SIGTERM stops it
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_left_under_way_is_named_when_the_grace_runs_out() {
    let (_dir, url) = crate::support::sqlite();
    for (grace, twice) in [("1s", false), ("60s", true)] {
        let mut scene = Scene::with_args(&url, Duration::ZERO, &["--shutdown-grace", grace]).await;
        let address = scene.serve.base.trim_start_matches("http://").to_owned();
        // Its headers sent, its body never: under way until the server
        // gives up on it.
        let mut slow = tokio::net::TcpStream::connect(&address).await.unwrap();
        let head = format!(
            "POST /login HTTP/1.1\r\nHost: {address}\r\nContent-Type: \
             application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nname="
        );
        slow.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = std::time::Instant::now();
        scene.serve.signal("TERM");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let refused = tokio::net::TcpStream::connect(&address).await;
        assert!(refused.is_err(), "no new connection once stopping");
        if twice {
            scene.serve.signal("TERM");
        }
        let exited =
            tokio::task::block_in_place(|| scene.serve.exited_within(Duration::from_secs(10)));
        let took = started.elapsed();
        assert!(exited.is_some(), "idem serve stops within 10 s");
        assert!(
            took < Duration::from_secs(3),
            "stopped once the grace ran out, or at the second signal: {took:?}"
        );
        if !twice {
            assert!(took >= Duration::from_secs(1), "waited the grace: {took:?}");
        }
        let said = scene.serve.said();
        assert!(
            said.contains("stopped with requests still under way: POST /login"),
            "{said}"
        );
        drop(slow);
    }
}

/// SIGHUP reads the approvers file again: carol, added while the inbox
/// runs, is known at once; a broken file on the next SIGHUP keeps the
/// approvers loaded before, and the server says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_approvers_and_a_broken_file_keeps_the_old_ones() {
    let (_dir, _, mut scene) = Scene::on_sqlite().await;
    let (entry, carol) = token_entry("carol");
    let inbox = scene.serve.url("/api/inbox");
    let before = scene.http.api("GET", &inbox, &carol, None).await;
    assert_eq!(before.status, 401, "not yet an approver: {}", before.body);

    let file = std::fs::read_to_string(&scene.serve.approvers).unwrap();
    std::fs::write(&scene.serve.approvers, format!("{file}{entry}")).unwrap();
    scene.serve.signal("HUP");
    let said = tokio::task::block_in_place(|| scene.serve.said_within("SIGHUP: reloaded", 1));
    assert!(
        said.contains("SIGHUP: reloaded the approvers file"),
        "{said}"
    );
    let after = scene.http.api("GET", &inbox, &carol, None).await;
    assert_eq!(after.status, 200, "carol without a restart: {}", after.body);

    let broken = format!("{file}{entry}[[approver]\nbroken");
    std::fs::write(&scene.serve.approvers, broken).unwrap();
    scene.serve.signal("HUP");
    let said = tokio::task::block_in_place(|| scene.serve.said_within("not reloaded", 1));
    assert!(
        said.contains("the approvers file was not reloaded, the one loaded before stays"),
        "{said}"
    );
    assert!(!said.contains(&carol), "no token said");
    for token in [&carol, &scene.serve.token.clone()] {
        let kept = scene.http.api("GET", &inbox, token, None).await;
        assert_eq!(
            kept.status, 200,
            "the approvers loaded before stay: {}",
            kept.body
        );
    }
}

/// After a restart the session still opens its stream (it is in the
/// store); when a copy of the browser's cookie signs out on a second
/// instance, the page open on the first says that its person was signed
/// out, with a link to sign in again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_signed_out_on_another_instance_says_so() {
    let Some(browser) = Browser::start("a_page_signed_out_on_another_instance_says_so").await
    else {
        return;
    };
    let (_dir, _, mut scene) = Scene::on_sqlite().await;
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
    let hidden_banner = browser
        .execute(
            "return document.getElementById('signed-out').hidden",
            vec![],
        )
        .await;
    assert_eq!(
        hidden_banner,
        serde_json::json!(true),
        "signed in: no banner"
    );

    tokio::task::block_in_place(|| scene.serve.restart());
    let (_stream, status) = open_stream(&scene.serve.base, &cookie).await;
    assert!(status.contains(" 200 "), "still signed in: {status}");
    let banner = browser
        .execute(
            "return document.getElementById('signed-out').hidden",
            vec![],
        )
        .await;
    assert_eq!(banner, serde_json::json!(true), "no banner after a restart");

    // A copy of the browser's cookie signs out on a second instance.
    let other = scene.serve.another();
    let mut copy = Http::default();
    for c in browser.client().get_all_cookies().await.unwrap() {
        copy.cookies
            .insert(c.name().to_owned(), c.value().to_owned());
    }
    let page = copy.get(&other.url("/")).await;
    assert_eq!(page.status, 200, "the browser's session on the other");
    let csrf = hidden(&page.body, "csrf").unwrap();
    let out = copy.form(&other.url("/logout"), &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 303);

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
