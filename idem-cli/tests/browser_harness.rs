//! The browser harness (`support::browser`) on its own, before there is a
//! page of idem's to drive: real Chromium opens a one-form site served from
//! this process, a person fills the form in and sends it, and both the site
//! and the page show what was sent.
//!
//! Skipped loudly without chromium and chromedriver; a failure under
//! `IDEM_REQUIRE_SERVERS=1`.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use support::browser::Browser;

/// How long a page may take to show what a test waits for.
const PATIENCE: Duration = Duration::from_secs(10);

/// A name that must survive form encoding and HTML escaping.
const NAME: &str = "Ada Lovelace & <co>";

#[tokio::test]
async fn the_form_sent_reaches_the_site_and_its_answer_is_shown() {
    let Some((browser, site)) =
        open("the_form_sent_reaches_the_site_and_its_answer_is_shown").await
    else {
        return;
    };
    assert_eq!(browser.text("label[for=name]").await, "Your name");
    browser.fill("#name", NAME).await;
    browser.submit("form#greet").await;

    let sent = site.received();
    assert_eq!(sent.fields, [("name".to_owned(), NAME.to_owned())]);
    browser.wait_for("#greeting", PATIENCE).await;
    assert_eq!(browser.text("#greeting").await, format!("Hello, {NAME}!"));
    assert_eq!(browser.current_url().await, format!("{}greet", site.url));
    let cookies = browser.cookies().await;
    let greeted = cookies.iter().find(|c| c.name() == "greeted");
    assert!(
        greeted.is_some_and(|c| c.http_only() == Some(true)),
        "the response's HttpOnly cookie is kept: {cookies:?}"
    );

    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser_harness.png");
    let png = browser.screenshot(&path).await;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert_eq!(width, 1280, "the window is --window-size wide");
}

#[tokio::test]
async fn a_script_on_the_page_posts_with_the_pages_cookies() {
    let Some((browser, site)) = open("a_script_on_the_page_posts_with_the_pages_cookies").await
    else {
        return;
    };
    browser.fill("#name", NAME).await;
    browser.click("button[type=submit]").await;
    browser.wait_for("#greeting", PATIENCE).await;
    assert_eq!(site.received().cookie, "", "none before the first post");

    let (status, body) = browser
        .post(&format!("{}greet", site.url), &[("name", "Forged")])
        .await;

    assert_eq!(status, 200);
    assert!(body.contains("Hello, Forged!"), "{body}");
    let forged = site.received();
    assert_eq!(forged.fields, [("name".to_owned(), "Forged".to_owned())]);
    assert_eq!(
        forged.cookie, "greeted=yes",
        "fetch sends the page's cookies"
    );
}

#[tokio::test]
async fn two_browsers_at_once_are_two_people() {
    let test = "two_browsers_at_once_are_two_people";
    let (first, second) = tokio::join!(Browser::start(test), Browser::start(test));
    let (Some(first), Some(second)) = (first, second) else {
        return;
    };
    let site = Site::start();

    first.goto(&site.url).await;
    second.goto(&site.url).await;
    first.fill("#name", NAME).await;
    first.submit("form#greet").await;
    first.wait_for("#greeting", PATIENCE).await;

    assert_eq!(first.cookies().await.len(), 1);
    second.goto(&site.url).await;
    let theirs = second.cookies().await;
    assert!(theirs.is_empty(), "the second profile has none: {theirs:?}");
}

/// A browser for `test` showing the form of a site of its own, or `None`
/// when skipped.
async fn open(test: &str) -> Option<(Browser, Site)> {
    let browser = Browser::start(test).await?;
    let site = Site::start();
    browser.goto(&site.url).await;
    Some((browser, site))
}

/// A site on 127.0.0.1 with one form: `GET /` shows it, `POST /greet`
/// greets the name sent and sets the cookie `greeted=yes`. It serves until
/// the test process ends.
struct Site {
    /// `http://127.0.0.1:PORT/`.
    url: String,
    posts: mpsc::Receiver<Post>,
}

/// What the site received in one `POST /greet`.
#[derive(Debug)]
struct Post {
    /// The form's fields, in order.
    fields: Vec<(String, String)>,
    /// The `Cookie` header, empty without one.
    cookie: String,
}

const FORM: &str = r#"<!doctype html>
<title>Greeter</title>
<form id="greet" method="post" action="/greet">
  <label for="name">Your name</label>
  <input id="name" name="name" type="text">
  <button type="submit">Greet me</button>
</form>"#;

impl Site {
    fn start() -> Site {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let (sender, posts) = mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let posts = sender.clone();
                // A thread a connection: Chromium opens spare connections
                // that may never send a request.
                std::thread::spawn(move || serve(stream, &posts));
            }
        });
        Site { url, posts }
    }

    /// The next `POST /greet`.
    fn received(&self) -> Post {
        self.posts
            .recv_timeout(PATIENCE)
            .expect("a form posted to /greet")
    }
}

/// Answer one request on `stream`.
fn serve(stream: TcpStream, posts: &mpsc::Sender<Post>) {
    let _ = stream.set_read_timeout(Some(PATIENCE));
    let mut reader = BufReader::new(&stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let (mut length, mut cookie) = (0, String::new());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap_or((&line, ""));
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap_or(0),
            "cookie" => cookie = value.trim().to_owned(),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }

    let mut words = request_line.split_whitespace();
    let (status, headers, page) = match (words.next(), words.next()) {
        (Some("GET"), Some("/")) => ("200 OK", "", FORM.to_owned()),
        (Some("POST"), Some("/greet")) => {
            let fields: Vec<(String, String)> =
                url::form_urlencoded::parse(&body).into_owned().collect();
            let name = fields
                .iter()
                .find(|(k, _)| k == "name")
                .map_or("", |(_, v)| v);
            let page = format!(
                "<!doctype html><title>Greeted</title><h1 id=\"greeting\">Hello, {}!</h1>",
                escape(name)
            );
            let _ = posts.send(Post { fields, cookie });
            (
                "200 OK",
                "Set-Cookie: greeted=yes; HttpOnly; SameSite=Strict; Path=/\r\n",
                page,
            )
        }
        _ => ("404 Not Found", "", "not found".to_owned()),
    };
    let _ = write!(
        &stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{page}",
        page.len()
    );
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
