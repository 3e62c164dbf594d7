//! Session ids planted from another port of the same host, over plain
//! HTTP (cookies do not keep ports apart): a second cookie beside the
//! browser's own is refused whole; one that *replaces* it (same name,
//! `Path=/`) meets the browser key the inbox's script keeps in
//! `localStorage` (which another port can neither read nor write), and
//! decides nothing. Over raw HTTP (what the server checks, script or
//! not), and in Chromium (what a person sees).

use std::time::Duration;

use serde_json::json;

use super::browser::{
    approve_with_note, asked_in_browser, open_record, shown, sign_in, wait_text, PAGE,
};
use crate::support::browser::Browser;
use crate::support::serve::{
    approver_entry, catalog, hidden, sign_in as sign_in_http, Http, Reply, Scene, Serve, DANA, VIC,
};
use crate::support::tools::{dispatcher, App};
use crate::support::unique;

/// A second approver, whose session is the one planted in dana's
/// browser.
const EVE: (&str, &str) = ("eve", "eve's own password");

/// A scene on a fresh SQLite store whose `idem serve` (with `extra`
/// arguments) also lists the approver eve, and where deleting mallory's
/// account was asked: the file's guard and URL, the scene, and the item's
/// key and version.
async fn asked_with_eve(extra: &[&str]) -> ((impl Sized, String), Scene, String, String) {
    let (dir, url) = crate::support::sqlite();
    let app = App::default();
    let agent = dispatcher(&url, &app, Duration::ZERO).await;
    let eve = approver_entry(EVE.0, EVE.1);
    let mut scene = Scene {
        serve: Serve::with_rules(&url, Some(&catalog()), extra, &[], &eve),
        app,
        agent,
        http: Http::default(),
        namespace: unique("tenant"),
    };
    let item = scene.asked("mallory").await;
    let key = item["key"].as_str().unwrap().to_owned();
    let version = item["version"].as_str().unwrap().to_owned();
    ((dir, url), scene, key, version)
}

/// Sign `http` in as `who` as a browser without the script does: no
/// browser key.
async fn sign_in_without_script(http: &mut Http, serve: &Serve, who: (&str, &str)) {
    http.browser = None;
    let login = http.get(&serve.url("/login")).await;
    let csrf = hidden(&login.body, "csrf").unwrap();
    let fields = [("csrf", &*csrf), ("name", who.0), ("password", who.1)];
    let done = http.form(&serve.url("/login"), &fields).await;
    assert_eq!(done.status, 303, "{}", done.body);
}

/// Approve record `key` at `version` from `http`'s page of it, confirmed.
async fn approve(http: &mut Http, serve: &Serve, key: &str, version: &str) -> Reply {
    let page = http.get(&serve.url(&format!("/records/{key}"))).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let csrf = hidden(&page.body, "csrf").unwrap();
    let fields = [
        ("csrf", &*csrf),
        ("version", version),
        ("note", "looked at it"),
        ("confirmed", "yes"),
    ];
    let path = format!("/records/{key}/approve");
    http.form(&serve.url(&path), &fields).await
}

/// What the page's script is told when it asks whether its session is
/// this browser's, with `http`'s browser key.
async fn asked_whose(http: &mut Http, serve: &Serve) -> Reply {
    let key = http.browser.clone();
    let headers: Vec<(&str, &str)> = key.iter().map(|k| ("idem-browser", k.as_str())).collect();
    http.send("GET", &serve.url("/session/browser"), &headers, "")
        .await
}

/// Whether a `Set-Cookie` of `reply` deletes the session cookie at `/`.
fn clears_the_session(reply: &Reply) -> bool {
    reply
        .header("set-cookie")
        .iter()
        .any(|c| c.starts_with("idem_session=; Path=/;") && c.contains("Max-Age=0"))
}

/// Over raw HTTP: a decision with dana's own session cookie but no
/// browser key, or another key, is refused and decides nothing; eve's
/// session id in a browser whose key is dana's (the cookie replaced) is
/// refused and cleared, never decided as eve, whether eve signed in with
/// a key or without one; the page's check (`/session/browser`) says the
/// same before any click; the right key decides, as dana.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_needs_the_browser_key_its_session_was_started_with() {
    let (_store, mut scene, key, version) = asked_with_eve(&[]).await;
    let serve = &scene.serve;
    let mut dana = Http::default();
    let login = dana.get(&serve.url("/login")).await;
    assert!(
        login.body.contains("deciding needs it"),
        "the sign-in says so"
    );
    sign_in_http(&mut dana, serve, DANA).await;
    let dana_key = dana.browser.clone().unwrap();

    // No key (a browser without the script): refused, still signed in.
    dana.browser = None;
    let refused = approve(&mut dana, serve, &key, &version).await;
    refused.says(403, "a decision needs the key");
    assert!(refused.body.contains("Enable JavaScript"));
    assert!(!clears_the_session(&refused));
    assert_eq!(dana.get(&serve.url("/")).await.status, 200, "signed in");
    asked_whose(&mut dana, serve)
        .await
        .says(403, "keeps no key for its session");

    // eve's id in a browser that holds dana's key: refused and cleared.
    for script in [true, false] {
        let mut eve = Http::default();
        match script {
            true => sign_in_http(&mut eve, serve, EVE).await,
            false => sign_in_without_script(&mut eve, serve, EVE).await,
        }
        let mut planted = Http::default();
        planted.cookies = eve.cookies.clone();
        planted.browser = Some(dana_key.clone());
        let page = planted.get(&serve.url("/")).await;
        assert!(page
            .body
            .contains("Signed in as <strong id=\"signed-in-as\">eve"));
        let said = asked_whose(&mut planted, serve).await;
        said.says(403, "did not start");
        assert!(clears_the_session(&said), "{:?}", said.headers);
        planted.cookies = eve.cookies.clone();
        let refused = approve(&mut planted, serve, &key, &version).await;
        refused.says(403, "a session it did not start");
        assert!(!refused.body.contains("signed-in-as"), "no name shown");
        assert!(clears_the_session(&refused), "{:?}", refused.headers);
        assert!(!planted.cookies.contains_key("idem_session"));
        // eve's own browser is still hers: the session was not ended.
        let hers = eve.get(&serve.url("/")).await;
        assert_eq!(hers.status, 200, "script: {script}");
    }

    // dana's own session with another key: refused, and cleared.
    dana.browser = Some("not the key dana signed in with".into());
    let refused = approve(&mut dana, serve, &key, &version).await;
    refused.says(403, "a session it did not start");
    assert!(!dana.cookies.contains_key("idem_session"));
    let listed = scene.listed().await;
    assert_eq!(listed["version"], version.as_str(), "nothing decided");

    // The right key decides, as dana.
    let serve = &scene.serve;
    sign_in_http(&mut dana, serve, DANA).await;
    let said = asked_whose(&mut dana, serve).await;
    assert_eq!(said.status, 204, "{}", said.body);
    let done = approve(&mut dana, serve, &key, &version).await;
    assert_eq!(done.status, 303, "{}", done.body);
    let record = shown(&mut scene, &key).await;
    assert_eq!(record["record"]["approval"]["approved_by"], DANA.0);
    let audit = record["audit"].to_string();
    assert!(!audit.contains("\"eve\""), "{audit}");
}

/// With `__Host-` cookies (here `--secure-cookies`, as behind a TLS
/// proxy) under a name of the inbox's own (`--origin`), which only a
/// secure page of that name can set, a browser without the script
/// decides: its session has no key, and none is asked for; a session
/// started with a key still needs it; the sign-in page does not say that
/// deciding needs JavaScript. Under a loopback name, where a page on
/// another port can set even a `__Host-` cookie (Chromium does, over
/// plain HTTP), a session without a key decides nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_host_cookies_under_its_own_name_a_browser_without_the_script_decides() {
    let secure = ["--secure-cookies", "--origin", "https://inbox.test"];
    let ((_dir, url), mut scene, key, version) = asked_with_eve(&secure).await;
    let serve = &scene.serve;
    let mut keyed = Http::default();
    let login = keyed.get(&serve.url("/login")).await;
    assert!(!login.body.contains("deciding needs it"), "{}", login.body);
    sign_in_http(&mut keyed, serve, DANA).await;
    assert_eq!(asked_whose(&mut keyed, serve).await.status, 204);
    keyed.browser = None;
    asked_whose(&mut keyed, serve)
        .await
        .says(403, "keeps no key for its session");
    approve(&mut keyed, serve, &key, &version)
        .await
        .says(403, "is JavaScript off?");

    let mut dana = Http::default();
    sign_in_without_script(&mut dana, serve, DANA).await;
    assert!(dana.cookies.contains_key("__Host-idem_session"));
    let done = approve(&mut dana, serve, &key, &version).await;
    assert_eq!(done.status, 303, "{}", done.body);
    let record = shown(&mut scene, &key).await;
    assert_eq!(record["record"]["approval"]["approved_by"], DANA.0);

    // The same, under a loopback name.
    let local = Serve::start(&url, Some(&catalog()), &["--secure-cookies"]);
    let mut dana = Http::default();
    let login = dana.get(&local.url("/login")).await;
    assert!(login.body.contains("deciding needs it"), "{}", login.body);
    sign_in_without_script(&mut dana, &local, DANA).await;
    let item = scene.asked("mallory").await;
    let (key, version) = (
        item["key"].as_str().unwrap(),
        item["version"].as_str().unwrap(),
    );
    approve(&mut dana, &local, key, version)
        .await
        .says(403, "under a loopback name");
}

/// A page on another port of the same host answers every request with
/// `Set-Cookie: {cookie}` (what a stranger's page on the inbox's machine
/// can do over plain HTTP: cookies do not keep ports apart); its URL.
async fn planting_page(cookie: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let _ = socket.read(&mut request).await;
            let page = "<p>nothing to see</p>";
            let answer = format!(
                "HTTP/1.1 200 OK\r\nSet-Cookie: {cookie}\r\nContent-Type: text/html\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    url
}

/// A page on another port plants vic's (a viewer's) session id with
/// `Path=/records`, so that dana's browser sends it before her own on
/// record pages: the page is refused and she is signed out, never shown
/// as vic; signed in again, her approval is recorded as hers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_planted_from_another_port_is_refused_not_obeyed() {
    let test = "a_session_id_planted_from_another_port_is_refused_not_obeyed";
    let Some((browser, _dir, mut scene, _, key)) = asked_in_browser(test, "mallory").await else {
        return;
    };
    let mut vic = Http::default();
    crate::support::serve::sign_in(&mut vic, &scene.serve, VIC).await;
    let planted = vic.cookies["idem_session"].clone();

    sign_in(&browser, &scene, DANA).await;
    let stranger = planting_page(format!("idem_session={planted}; Path=/records")).await;
    // The stranger's page is on the same host, another port.
    assert!(stranger.starts_with("http://127.0.0.1:"), "{stranger}");
    browser.goto(&stranger).await;
    browser
        .goto(&scene.serve.url(&format!("/records/{key}")))
        .await;
    let said = wait_text(&browser, "#main", "sent the inbox's cookie twice").await;
    assert!(said.contains("Nothing was done"), "{said}");
    let shown_as = browser
        .execute(
            "return document.querySelector('#signed-in-as') === null",
            vec![],
        )
        .await;
    assert_eq!(shown_as, json!(true), "shown as nobody, not as vic");
    // Both cookies were cleared, so the record's page asks to sign in.
    browser
        .goto(&scene.serve.url(&format!("/records/{key}")))
        .await;
    browser.wait_for("form#login", PAGE).await;

    sign_in(&browser, &scene, DANA).await;
    open_record(&browser, &scene, &key, "form#approve").await;
    assert_eq!(browser.text("#signed-in-as").await, DANA.0);
    approve_with_note(&browser, "approved despite the plant").await;
    browser.click("#confirm-button").await;
    wait_text(&browser, "#notice", "Done: approved.").await;
    let shown = shown(&mut scene, &key).await;
    assert_eq!(
        shown["record"]["approval"]["approved_by"], DANA.0,
        "{shown}"
    );
}

/// The whole of a browser's `idem_session` cookies, as values.
async fn session_cookies(browser: &Browser) -> Vec<String> {
    let cookies = browser.cookies().await;
    let held = cookies.iter().filter(|c| c.name() == "idem_session");
    held.map(|c| c.value().to_owned()).collect()
}

/// A page on another port replaces dana's session cookie outright with
/// eve's (same name, `Path=/`: one cookie, eve's). dana reloads the
/// record: the page, drawn for eve's session, says at once that it is not
/// this browser's, offers no decision, and the cookie is cleared. A click
/// that beats that check (planted again from another tab) is refused by
/// the server, which the script does not decide: dana's browser key is
/// not the key eve's session was started with. Nothing is decided, and
/// nothing as eve; signed in again, dana's approval is hers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cookie_replaced_from_another_port_decides_nothing() {
    let test = "a_session_cookie_replaced_from_another_port_decides_nothing";
    let Some(browser) = Browser::start(test).await else {
        return;
    };
    let (_store, mut scene, key, version) = asked_with_eve(&[]).await;
    let mut eve = Http::default();
    sign_in_http(&mut eve, &scene.serve, EVE).await;
    let planted = eve.cookies["idem_session"].clone();
    let stranger = planting_page(format!("idem_session={planted}; Path=/")).await;

    sign_in(&browser, &scene, DANA).await;
    browser.goto(&stranger).await;
    assert_eq!(
        session_cookies(&browser).await,
        vec![planted.clone()],
        "replaced"
    );
    open_record(&browser, &scene, &key, "form#approve").await;
    let said = wait_text(&browser, "#not-this-browser", "did not start").await;
    assert!(said.contains("sign in again"), "{said}");
    let disabled = "return document.querySelector('form#approve button').disabled;";
    assert_eq!(browser.execute(disabled, vec![]).await, json!(true));
    assert_eq!(session_cookies(&browser).await, Vec::<String>::new());

    // Planted again from another tab, after this page's check; the
    // button enabled again, as if clicked before the check answered.
    let client = browser.client();
    let here = client.window().await.unwrap();
    let tab = client.new_window(true).await.unwrap();
    client.switch_to_window(tab.handle).await.unwrap();
    browser.goto(&stranger).await;
    client.close_window().await.unwrap();
    client.switch_to_window(here).await.unwrap();
    assert_eq!(session_cookies(&browser).await, vec![planted.clone()]);
    let enable = "document.querySelector('form#approve button').disabled = false; return null;";
    browser.execute(enable, vec![]).await;
    browser.fill("#note", "dana's note").await;
    browser.submit("form#approve").await;
    let said = wait_text(&browser, "#main", "a session it did not start").await;
    assert!(said.contains("Nothing was done"), "{said}");
    let nobody = "return document.querySelector('#signed-in-as') === null;";
    assert_eq!(browser.execute(nobody, vec![]).await, json!(true));
    assert_eq!(session_cookies(&browser).await, Vec::<String>::new());
    let record = shown(&mut scene, &key).await;
    assert_eq!(scene.listed().await["version"], version.as_str());
    assert!(!record.to_string().contains("\"eve\""), "{record}");

    // Signed in again: dana's approval, recorded as hers.
    sign_in(&browser, &scene, DANA).await;
    open_record(&browser, &scene, &key, "form#approve").await;
    approve_with_note(&browser, "dana's note").await;
    browser.click("#confirm-button").await;
    wait_text(&browser, "#notice", "Done: approved.").await;
    let record = shown(&mut scene, &key).await;
    assert_eq!(record["record"]["approval"]["approved_by"], DANA.0);
    assert_eq!(scene.app.deletions(), 0, "it runs when its call comes back");
}
