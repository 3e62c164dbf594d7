//! A real browser for tests: Debian's `chromium`, headless, driven through
//! `chromedriver` with the fantoccini WebDriver client.
//!
//! Each [`Browser`] is its own `chromedriver` on a free loopback port with
//! a fresh Chromium profile, so tests in one binary can run side by side
//! as different users (cookies included). Dropping it ends the WebDriver
//! session and kills `chromedriver` and every Chromium process it started.
//!
//! The helpers panic with what they were looking for, as test helpers do;
//! [`Browser::client`] is there for anything they do not cover.
//!
//! ```ignore
//! let Some(browser) = Browser::start("approve_from_the_page").await else {
//!     return; // skipped loudly: chromium or chromedriver is missing
//! };
//! browser.goto(&url).await;
//! browser.fill("#reason", "looks right").await;
//! browser.submit("form#approve").await;
//! assert_eq!(browser.text("#state").await, "approved");
//! ```

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::cookies::Cookie;
use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use idem_testkit::servers::{skip, TempDir, Watchdog};
use serde_json::{json, Value};

/// Chromium's flags: headless, and quiet on this machine's closed network
/// (without the background-networking flags it keeps dialling Google's
/// hosts and is refused, many connections at a time).
const CHROMIUM_ARGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
];

/// How long `chromedriver` may take to answer, and Chromium to open.
const START_LIMIT: Duration = Duration::from_secs(20);

/// A headless Chromium under its own `chromedriver`; both are killed when
/// dropped.
pub struct Browser {
    client: Client,
    /// The WebDriver session, ended in `drop` with a request of its own
    /// (the client's asynchronous close would need the test's runtime,
    /// which is already shutting down by then).
    session: Option<String>,
    port: u16,
    driver: Driver,
    // Last: deleted once Chromium is gone.
    _dir: TempDir,
}

impl Browser {
    /// Start `chromedriver` (`CHROMEDRIVER`, else /usr/bin/chromedriver)
    /// with a fresh Chromium (`CHROMIUM`, else /usr/bin/chromium), or
    /// `None` after a loud skip of `test` when either is missing (a panic
    /// under `IDEM_REQUIRE_SERVERS=1`).
    ///
    /// # Panics
    ///
    /// When both are installed but the browser does not come up.
    pub async fn start(test: &str) -> Option<Browser> {
        Browser::start_with(test, &[]).await
    }

    /// [`Browser::start`] with Chromium in time zone `tz` (an IANA name,
    /// as the `TZ` variable takes it), as a reader elsewhere sees pages.
    pub async fn start_in_time_zone(test: &str, tz: &str) -> Option<Browser> {
        Browser::start_with_env(test, &[], Some(tz)).await
    }

    /// [`Browser::start`] with Chromium given `flags` beside its own.
    pub async fn start_with(test: &str, flags: &[String]) -> Option<Browser> {
        Browser::start_with_env(test, flags, None).await
    }

    async fn start_with_env(test: &str, flags: &[String], tz: Option<&str>) -> Option<Browser> {
        let driver = installed("CHROMEDRIVER", "/usr/bin/chromedriver");
        let chromium = installed("CHROMIUM", "/usr/bin/chromium");
        let (Some(driver), Some(chromium)) = (driver, chromium) else {
            skip(test, "chromium and chromedriver");
            return None;
        };
        // A free port can be taken by someone else before chromedriver
        // binds it: try again on another.
        let mut last_error = String::new();
        for _ in 0..3 {
            match Browser::launch(&driver, &chromium, flags, tz).await {
                Ok(browser) => return Some(browser),
                Err(e) => last_error = e,
            }
        }
        panic!("the browser did not start: {last_error}");
    }

    async fn launch(
        driver: &Path,
        chromium: &Path,
        flags: &[String],
        tz: Option<&str>,
    ) -> Result<Browser, String> {
        let dir = TempDir::new("idem-browser").expect("create a temporary directory");
        let profile = dir.path().join("profile");
        let log = dir.path().join("chromedriver.log");
        let port = free_port();
        let mut command = Command::new(driver);
        command
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()));
        if let Some(tz) = tz {
            // Chromium, started by chromedriver, keeps its environment.
            command.env("TZ", tz);
        }
        let mut driver = Driver::spawn(&mut command, dir.path());
        let deadline = Instant::now() + START_LIMIT;
        while !driver_request(port, "GET", "/status").is_some_and(|r| r.contains("\"ready\":true"))
        {
            if let Some(status) = driver.exited() {
                return Err(format!(
                    "chromedriver exited with {status}; log: {}",
                    tail(&log)
                ));
            }
            if Instant::now() > deadline {
                return Err(format!("chromedriver did not answer in {START_LIMIT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let mut args: Vec<String> = CHROMIUM_ARGS.iter().map(|a| a.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        args.extend(flags.iter().cloned());
        let options = json!({ "binary": chromium, "args": args });
        let capabilities = [("goog:chromeOptions".to_owned(), options)]
            .into_iter()
            .collect();
        let mut builder = ClientBuilder::new(HttpConnector::new());
        builder.capabilities(capabilities);
        let url = format!("http://127.0.0.1:{port}");
        let client = match tokio::time::timeout(START_LIMIT, builder.connect(&url)).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(format!("no session: {e}; log: {}", tail(&log))),
            Err(_) => return Err(format!("Chromium did not open in {START_LIMIT:?}")),
        };
        let session = client.session_id().await.ok().flatten();
        Ok(Browser {
            client,
            session,
            port,
            driver,
            _dir: dir,
        })
    }

    /// The fantoccini client, for what the helpers below do not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Open `url` and wait for it to load.
    pub async fn goto(&self, url: &str) {
        let loaded = self.client.goto(url).await;
        loaded.unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// The address of the page shown now.
    pub async fn current_url(&self) -> String {
        let url = self.client.current_url().await;
        url.unwrap_or_else(|e| panic!("read the current URL: {e}"))
            .to_string()
    }

    /// The element matching `css` on the page now.
    pub async fn find(&self, css: &str) -> Element {
        match self.client.find(Locator::Css(css)).await {
            Ok(element) => element,
            Err(e) => panic!("no `{css}` on {}: {e}", self.current_url().await),
        }
    }

    /// Wait up to `timeout` for an element matching `css` (after a click
    /// that navigates, or a script that adds it).
    pub async fn wait_for(&self, css: &str, timeout: Duration) -> Element {
        let wait = self
            .client
            .wait()
            .at_most(timeout)
            .every(Duration::from_millis(50));
        match wait.for_element(Locator::Css(css)).await {
            Ok(element) => element,
            Err(e) => panic!(
                "no `{css}` on {} after {timeout:?}: {e}",
                self.current_url().await
            ),
        }
    }

    /// The rendered text of the element matching `css`.
    pub async fn text(&self, css: &str) -> String {
        let text = self.find(css).await.text().await;
        text.unwrap_or_else(|e| panic!("read the text of `{css}`: {e}"))
    }

    /// Replace what the field matching `css` holds by `text`, typed as a
    /// person would.
    pub async fn fill(&self, css: &str, text: &str) {
        let field = self.find(css).await;
        let typed = async {
            field.clear().await?;
            field.send_keys(text).await
        }
        .await;
        typed.unwrap_or_else(|e| panic!("type into `{css}`: {e}"));
    }

    /// Click the element matching `css`.
    pub async fn click(&self, css: &str) {
        let clicked = self.find(css).await.click().await;
        clicked.unwrap_or_else(|e| panic!("click `{css}`: {e}"));
    }

    /// Submit the form matching `css` with its first submit button, as a
    /// click would.
    pub async fn submit(&self, css: &str) {
        let submitted = async { self.client.form(Locator::Css(css)).await?.submit().await }.await;
        submitted.unwrap_or_else(|e| panic!("submit `{css}`: {e}"));
    }

    /// The cookies the page's origin holds, `HttpOnly` ones included.
    pub async fn cookies(&self) -> Vec<Cookie<'static>> {
        let cookies = self.client.get_all_cookies().await;
        cookies.unwrap_or_else(|e| panic!("read the cookies: {e}"))
    }

    /// Run `script` in the page (`arguments[0]`… are `args`); what it
    /// returns, awaited when it is a promise.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        let result = self.client.execute(script, args).await;
        result.unwrap_or_else(|e| panic!("run a script in the page: {e}"))
    }

    /// POST `fields` form-encoded to `url` with `fetch` from the page shown
    /// now, with its cookies but not through its forms (what a forged or
    /// replayed request looks like): the status and the response's body.
    pub async fn post(&self, url: &str, fields: &[(&str, &str)]) -> (u16, String) {
        let fields: Vec<Value> = fields.iter().map(|(k, v)| json!([k, v])).collect();
        let answer = self
            .execute(
                "return fetch(arguments[0], {
                     method: 'POST',
                     credentials: 'same-origin',
                     body: new URLSearchParams(arguments[1]),
                 }).then(async r => [r.status, await r.text()]);",
                vec![json!(url), json!(fields)],
            )
            .await;
        match (answer[0].as_u64(), answer[1].as_str()) {
            (Some(status), Some(body)) => (status as u16, body.to_owned()),
            _ => panic!("POST {url} from the page answered {answer}"),
        }
    }

    /// A PNG of the window, also written to `path` (to look at; not for
    /// committing).
    pub async fn screenshot(&self, path: &Path) -> Vec<u8> {
        let png = self.client.screenshot().await;
        let png = png.unwrap_or_else(|e| panic!("take a screenshot: {e}"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create the screenshot's directory");
        }
        std::fs::write(path, &png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        png
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ask chromedriver to close Chromium cleanly; `driver`, dropped
        // next, kills whatever is left.
        if let Some(session) = &self.session {
            driver_request(self.port, "DELETE", &format!("/session/{session}"));
        }
    }
}

/// `chromedriver` in a process group of its own, and a watchdog that kills
/// that group and deletes the profile if the test process dies without
/// dropping the [`Browser`] (killed by a timeout, say). Chromium outlives a
/// killed chromedriver, but not the killing of its group.
struct Driver {
    child: Child,
    _watchdog: Watchdog,
}

impl Driver {
    /// Spawn `command`, watched; the watchdog also deletes `dir`.
    fn spawn(command: &mut Command, dir: &Path) -> Driver {
        let child = command
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        let group = format!("-{}", child.id());
        let watchdog = Watchdog::new(&group, "KILL", dir);
        Driver {
            child,
            _watchdog: watchdog,
        }
    }

    /// How chromedriver ended, if it has.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Driver {
    /// Kill chromedriver's process group (Chromium included) and reap it.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary named by `$var`, else `default`, if it is a file.
fn installed(var: &str, default: &str) -> Option<PathBuf> {
    let path = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    path.is_file().then_some(path)
}

/// A port nobody listens on right now (chromedriver binds it a moment
/// later; a lost race is retried).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// One bodiless HTTP request to chromedriver: the response's body, or
/// `None` when it does not answer. (chromedriver says `Connection: close`
/// but keeps the connection open, so the body is read by its length.)
fn driver_request(port: u16, method: &str, path: &str) -> Option<String> {
    let stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        &stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\r\n"
    )
    .ok()?;
    let mut reader = BufReader::new(&stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        if line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    String::from_utf8(body).ok()
}

/// The last lines of chromedriver's log, for a failure message.
fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
