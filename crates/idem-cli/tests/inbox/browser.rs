//! The approval inbox in a real browser: Debian's Chromium, driven through
//! chromedriver, against `idem serve` on a SQLite store that an executor in
//! this process calls through. The people are the approver dana and the
//! viewer vic; effects are counted by the tools, not by idem.
//!
//! Skipped loudly without chromium and chromedriver; a failure under
//! `IDEM_REQUIRE_SERVERS=1` (`.ci/run` installs both). Screenshots of the
//! inbox and a decision page are written to the target's tmp directory
//! (`inbox.png`, `decision.png`), to look at, not to commit.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::support::browser::Browser;
use idem_testkit::servers::TestCertificates;

use crate::support::serve::{wait_on, wait_on_in, Http, Scene, Waiting, DANA, VIC};
use crate::support::tools::{delete_call, executor, tenant, the_duplicate_gets, timed_out_charge};
use crate::support::unique;
use idem::ToolResult;

/// How long a page may take to show what a test waits for.
pub const PAGE: Duration = Duration::from_secs(15);

/// How long a waiting caller waits for a person.
const PATIENCE: Duration = Duration::from_secs(60);

/// Sign in on the page as `who`.
pub async fn sign_in(browser: &Browser, scene: &Scene, who: (&str, &str)) {
    browser.goto(&scene.serve.url("/")).await;
    browser.wait_for("form#login", PAGE).await;
    browser.fill("#name", who.0).await;
    browser.fill("#password", who.1).await;
    browser.submit("form#login").await;
    browser.wait_for("#signed-in-as", PAGE).await;
    assert_eq!(browser.text("#signed-in-as").await, who.0);
}

/// Wait until the page has `css` and its text contains `needle` (the
/// page that a click loads may not have arrived yet).
pub async fn wait_text(browser: &Browser, css: &str, needle: &str) -> String {
    let deadline = std::time::Instant::now() + PAGE;
    loop {
        browser.wait_for(css, PAGE).await;
        let text = browser.text(css).await;
        if text.contains(needle) {
            return text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{css} never said {needle:?}; it says {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Open the page of record `key`, and wait until it shows `css`.
pub async fn open_record(browser: &Browser, scene: &Scene, key: &str, css: &str) {
    let page = scene.serve.url(&format!("/records/{key}"));
    browser.goto(&page).await;
    browser.wait_for(css, PAGE).await;
}

/// Approve the record open on the page with `note`, up to the page that
/// asks to confirm.
pub async fn approve_with_note(browser: &Browser, note: &str) {
    browser.fill("#note", note).await;
    browser.submit("form#approve").await;
    browser.wait_for("#effect", PAGE).await;
}

/// Confirm the approval the page asks about: `delete_account` runs then,
/// exactly once, and the waiting caller gets its output.
async fn confirm_and_run_once(browser: &Browser, scene: &Scene, waiting: Waiting) -> ToolResult {
    assert_eq!(scene.app.deletions(), 0, "not before the confirmation");
    browser.click("#confirm-button").await;
    wait_text(browser, "#notice", "Done: approved.").await;
    let ran = waiting.decided().await;
    let output = &ran.result.as_ref().expect("it runs once approved").output;
    assert_eq!(output, &json!("deleted mallory"));
    assert_eq!(scene.app.deletions(), 1, "exactly once");
    ran
}

/// Chromium for `test` (`None`: skipped), and a scene on SQLite where
/// deleting `customer`'s account was asked: the scene's directory (kept
/// while it lives), the scene, the inbox item and its key.
pub async fn asked_in_browser(
    test: &str,
    customer: &str,
) -> Option<(Browser, impl Sized, Scene, serde_json::Value, String)> {
    let browser = Browser::start(test).await?;
    let (dir, _, mut scene) = Scene::on_sqlite().await;
    let item = scene.asked(customer).await;
    let key = item["key"].as_str().unwrap().to_owned();
    Some((browser, dir, scene, item, key))
}

/// Record `key` as the API shows it to the bot.
pub async fn shown(scene: &mut Scene, key: &str) -> serde_json::Value {
    let path = format!("/api/records/{key}");
    scene.http.bot(&scene.serve, &path, None).await.json()
}

fn shot(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// What a person with a screen reader, a keyboard or a phone needs of the
/// page now: every visible form control has a label, every button and
/// link can be reached with Tab, and nothing is wider than the window.
async fn check_usable(browser: &Browser, page: &str) {
    let unlabelled = browser
        .execute(
            "return [...document.querySelectorAll('input:not([type=hidden]), textarea, select')]
                 .filter(e => !(e.labels && e.labels.length) && !e.closest('label'))
                 .map(e => e.outerHTML);",
            vec![],
        )
        .await;
    assert_eq!(
        unlabelled,
        json!([]),
        "{page}: form controls without a label"
    );
    let unreachable = browser
        .execute(
            "return [...document.querySelectorAll('a[href], button:not([disabled])')]
                 .filter(e => e.tabIndex < 0).map(e => e.outerHTML);",
            vec![],
        )
        .await;
    assert_eq!(
        unreachable,
        json!([]),
        "{page}: controls the keyboard cannot reach"
    );
    let overflow = browser
        .execute(
            "return document.documentElement.scrollWidth - window.innerWidth;",
            vec![],
        )
        .await;
    assert!(
        overflow.as_i64().unwrap() <= 0,
        "{page}: wider than the window by {overflow} px"
    );
}

/// An irreversible call waits; the approver, already looking at the inbox,
/// sees it arrive without reloading, opens it, approves with a note after a
/// confirmation that restates the effect, and the waiting caller's tool
/// runs exactly once; the audit trail shows who and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_approves_a_waiting_call_which_runs_exactly_once() {
    // A reader in India (UTC+5:30): times read in their own zone.
    let Some(browser) = Browser::start_in_time_zone(
        "an_approver_approves_a_waiting_call_which_runs_exactly_once",
        "Asia/Kolkata",
    )
    .await
    else {
        return;
    };
    let (_dir, url) = crate::support::sqlite();
    let mut scene = Scene::new(&url, PATIENCE).await;
    sign_in(&browser, &scene, DANA).await;
    wait_text(&browser, "#inbox-rows", "Nothing is waiting").await;

    let call = delete_call(&unique("call"), "mallory");
    // Why, in the model's words: markup, a right-to-left override, a
    // zero-width space and an ANSI escape, all of which must render inert.
    let why = "<img src=x onerror=alert(1)>mallory asked\u{202e} twice\u{200b}\x1b[31m";
    let shown = "<img src=x onerror=alert(1)>mallory asked\\u{202e} twice\\u{200b}\\u{1b}[31m";
    let waiting = wait_on_in(&scene.agent, call, tenant(&scene.namespace).reason(why));
    let item = scene.listed().await;
    let key = item["key"].as_str().unwrap().to_owned();
    // Live: the row appears on the open page.
    let row = format!("tr.item[data-key='{key}']");
    browser.wait_for(&row, PAGE).await;
    let text = browser.text(&row).await;
    assert!(
        text.contains("delete_account") && text.contains("awaiting approval"),
        "{text}"
    );
    assert!(text.contains("mallory"), "{text}");
    // Who asked and why, on the row, as text.
    assert!(text.contains(&scene.namespace), "{text}");
    assert!(text.contains("call id call-"), "{text}");
    assert_eq!(browser.text(&format!("{row} td.why q")).await, shown);
    let injected = browser
        .execute(
            "return document.querySelectorAll('img, script:not([src])').length;",
            vec![],
        )
        .await;
    assert_eq!(injected, json!(0), "no element from the reason");
    browser.screenshot(&shot("inbox.png")).await;
    check_usable(&browser, "the inbox").await;

    // The live inbox may redraw its rows between finding the link and
    // clicking it: find it again then, as a person's second click would.
    let link = format!("{row} a.open");
    for attempt in 1.. {
        let found = browser.client().find(fantoccini::Locator::Css(&link)).await;
        match found {
            Ok(element) if element.click().await.is_ok() => break,
            _ if attempt < 5 => tokio::time::sleep(Duration::from_millis(100)).await,
            other => panic!("cannot click {link}: {:?}", other.err()),
        }
    }
    browser.wait_for("#record", PAGE).await;
    assert_eq!(browser.text("#tool").await, "delete_account");
    // "Created" in the reader's time zone, UTC in its tooltip.
    let created = browser
        .execute(
            "var t = document.querySelector('#fields time.at'); \
             return [t.textContent, t.title, t.getAttribute('datetime')];",
            vec![],
        )
        .await;
    let (text, title, utc) = (&created[0], &created[1], &created[2]);
    let utc = utc.as_str().unwrap();
    assert!(text.as_str().unwrap().contains("GMT+5:30"), "{created}");
    assert!(!text.as_str().unwrap().contains(utc), "{created}");
    assert_eq!(title.as_str().unwrap(), format!("{utc} (UTC)"));
    assert_eq!(
        browser.text("#description").await,
        "Delete a customer's account and all its data."
    );
    assert!(browser
        .text("#class")
        .await
        .starts_with("irreversible: Cannot be undone"));
    let arguments = browser.text("#arguments").await;
    assert!(
        arguments.contains("\"customer\": \"mallory\""),
        "{arguments}"
    );
    let fields = browser.text("#fields").await;
    assert!(
        fields.contains(&key)
            && fields.contains("test-worker:1")
            && fields.contains(crate::support::tools::ASK),
        "{fields}"
    );
    assert!(
        fields.contains(&format!("Why, in the caller's words\n{shown}")),
        "{fields}"
    );
    let injected = browser
        .execute("return document.querySelectorAll('img').length;", vec![])
        .await;
    assert_eq!(injected, json!(0), "no element from the reason");
    browser.screenshot(&shot("decision.png")).await;
    check_usable(&browser, "the decision page").await;
    assert_eq!(scene.app.deletions(), 0, "nothing runs before a decision");

    // On a phone: the same pages, nothing wider than the screen.
    browser.client().set_window_size(390, 844).await.unwrap();
    check_usable(&browser, "the decision page on a phone").await;
    browser.screenshot(&shot("decision-phone.png")).await;
    browser.goto(&scene.serve.url("/")).await;
    browser.wait_for(&row, PAGE).await;
    check_usable(&browser, "the inbox on a phone").await;
    browser.screenshot(&shot("inbox-phone.png")).await;
    browser.client().set_window_size(1280, 900).await.unwrap();
    // Back to the record (the inbox's rows may be redrawn under a click).
    open_record(&browser, &scene, &key, "#record").await;

    approve_with_note(&browser, "mallory asked in ticket OPS-7").await;
    let effect = browser.text("#effect").await;
    assert!(
        effect.starts_with(
            r#"delete_account will run once, with exactly these arguments: {"customer":"mallory"}"#
        ),
        "{effect}"
    );
    let ran = confirm_and_run_once(&browser, &scene, waiting).await;
    let again = scene
        .agent
        .dispatch_one(
            delete_call(ran.call_id.as_deref().unwrap(), "mallory"),
            &tenant(&scene.namespace),
        )
        .await;
    assert!(again.result.unwrap().meta.deduplicated);
    assert_eq!(scene.app.deletions(), 1, "the repeat runs nothing");

    open_record(&browser, &scene, &key, "#audit").await;
    let audit = wait_text(&browser, "#audit", "approved").await;
    assert!(
        audit.contains("approved by dana") && audit.contains("mallory asked in ticket OPS-7"),
        "{audit}"
    );
    assert!(browser.text("#state").await.contains("succeeded"));
}

/// A denial without a reason is refused on the page and changes nothing;
/// with one, the waiting caller gets the denial and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_needs_a_reason_and_reaches_the_waiting_caller() {
    let Some(browser) =
        Browser::start("a_denial_needs_a_reason_and_reaches_the_waiting_caller").await
    else {
        return;
    };
    let (_dir, url) = crate::support::sqlite();
    let mut scene = Scene::new(&url, PATIENCE).await;
    let call = delete_call(&unique("call"), "eve");
    let waiting = wait_on(&scene.agent, call, &scene.namespace);
    let item = scene.listed().await;
    let key = item["key"].as_str().unwrap();
    sign_in(&browser, &scene, DANA).await;
    open_record(&browser, &scene, key, "form#deny").await;
    browser.submit("form#deny").await;
    let error = wait_text(&browser, "#error", "needs a reason").await;
    assert!(error.ends_with("Nothing was changed."), "{error}");
    assert_eq!(
        scene.listed().await["version"],
        item["version"],
        "nothing changed"
    );

    let reason = "accounts are closed by support, not by agents";
    browser.fill("#reason", reason).await;
    browser.submit("form#deny").await;
    let effect = wait_text(&browser, "#effect", "will never run").await;
    assert!(effect.contains(reason), "{effect}");
    browser.click("#confirm-button").await;
    wait_text(&browser, "#notice", "Done: denied.").await;
    let result = waiting.decided().await.result;
    let error = result.expect_err("a denied call does not run");
    assert!(error.to_string().contains(reason), "{error}");
    assert_eq!(scene.app.deletions(), 0);
}

/// A charge whose outcome is unknown, resolved on the page as succeeded
/// with its output: the duplicate gets that output and nothing is charged
/// again. Output that is not JSON is refused first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_charge_resolved_on_the_page_answers_its_duplicate() {
    let Some(browser) =
        Browser::start("an_unknown_charge_resolved_on_the_page_answers_its_duplicate").await
    else {
        return;
    };
    let (_dir, url, mut scene) = Scene::on_sqlite().await;
    let exec = executor(&url, &scene.app, Duration::ZERO).await;
    let call_id = timed_out_charge(&exec, &scene.app, &scene.namespace).await;
    let key = scene.listed().await["key"].as_str().unwrap().to_owned();

    sign_in(&browser, &scene, DANA).await;
    open_record(&browser, &scene, &key, "form#resolve").await;
    assert!(
        browser.text("#fields").await.contains("timed out"),
        "the failure is shown"
    );
    browser.click("input[name=as][value=succeeded]").await;
    browser.fill("#output", "charged, id ch_1").await;
    browser
        .fill("#resolve-reason", "the PSP dashboard shows the charge")
        .await;
    browser.submit("form#resolve").await;
    wait_text(&browser, "#error", "must be the tool's output as JSON").await;

    browser.click("input[name=as][value=succeeded]").await;
    browser
        .fill("#output", r#"{"charge_id": "ch_from_dashboard"}"#)
        .await;
    browser
        .fill("#resolve-reason", "the PSP dashboard shows the charge")
        .await;
    browser.submit("form#resolve").await;
    wait_text(&browser, "#effect", "recorded as having happened").await;
    browser.click("#confirm-button").await;
    wait_text(&browser, "#notice", "Done: resolved as succeeded.").await;

    the_duplicate_gets(
        "ch_from_dashboard",
        &exec,
        &scene.app,
        &call_id,
        &scene.namespace,
    )
    .await;
}

/// What must be refused, and change nothing: a wrong password, a viewer
/// trying to approve, a post without the CSRF token, and a decision on a
/// record that changed after the page was opened (it names what changed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_viewers_forged_posts_and_stale_pages_are_refused() {
    let test = "wrong_passwords_viewers_forged_posts_and_stale_pages_are_refused";
    let Some((browser, _dir, mut scene, item, key)) = asked_in_browser(test, "eve").await else {
        return;
    };
    let version = item["version"].as_str().unwrap().to_owned();
    let record = scene.serve.url(&format!("/records/{key}"));
    let approve = format!("{record}/approve");

    // A wrong password.
    browser.goto(&scene.serve.url("/login")).await;
    browser.fill("#name", VIC.0).await;
    browser.fill("#password", "not the password").await;
    browser.submit("form#login").await;
    wait_text(&browser, "#error", "Wrong name or password.").await;
    assert!(!browser
        .cookies()
        .await
        .iter()
        .any(|c| c.name() == "idem_session"));

    // The viewer sees the record, but cannot decide it.
    sign_in(&browser, &scene, VIC).await;
    browser.goto(&record).await;
    wait_text(&browser, "#viewer", "signed in as a viewer").await;
    let disabled = browser
        .execute(
            "return document.querySelector('form#approve button').disabled",
            vec![],
        )
        .await;
    assert_eq!(disabled, json!(true));
    let csrf = browser
        .execute(
            "return document.querySelector('input[name=csrf]').value",
            vec![],
        )
        .await;
    let csrf = csrf.as_str().unwrap().to_owned();
    // The browser key the page's script would add to the form.
    let kept = "return localStorage.getItem('idem-browser');";
    let kept = browser.execute(kept, vec![]).await;
    let kept = kept.as_str().expect("a browser key, kept at sign-in");
    let fields = [
        ("csrf", csrf.as_str()),
        ("version", &version),
        ("confirmed", "yes"),
        ("browser", kept),
    ];
    let (status, body) = browser.post(&approve, &fields).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("viewer"), "{body}");

    // The approver, without the CSRF token.
    browser.goto(&scene.serve.url("/")).await;
    browser.submit("header form").await; // sign out
    browser.wait_for("form#login", PAGE).await;
    sign_in(&browser, &scene, DANA).await;
    browser.goto(&record).await;
    browser.wait_for("form#approve", PAGE).await;
    let (status, body) = browser
        .post(&approve, &[("version", &version), ("confirmed", "yes")])
        .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("security token"), "{body}");
    assert_eq!(
        scene.listed().await["version"],
        item["version"],
        "nothing changed"
    );

    // The record changes while the page is open: someone denies it.
    let denied = scene
        .http
        .bot(
            &scene.serve,
            &format!("/api/records/{key}/deny"),
            Some(&json!({"version": version, "reason": "closed by support"})),
        )
        .await;
    assert_eq!(denied.status, 200, "{}", denied.body);
    // The open page says so by itself.
    browser.wait_for("#changed:not([hidden])", PAGE).await;
    browser.fill("#note", "looks fine").await;
    browser.submit("form#approve").await;
    let error = wait_text(&browser, "#error", "it is now denied").await;
    assert!(
        error.contains("denied by bot") && error.contains("closed by support"),
        "{error}"
    );
    assert!(error.ends_with("Nothing was changed."), "{error}");
    let shown = shown(&mut scene, &key).await;
    assert_eq!(
        shown["record"]["outcome"]["code"], "approval_denied",
        "the denial stands"
    );
    assert_eq!(scene.app.deletions(), 0);
}

/// Over HTTPS (`idem serve --tls-cert --tls-key`), with Chromium trusting
/// the server's key as a browser trusts a certificate of its company's CA:
/// the approver signs in, a waiting call arrives on the open page without
/// a reload (the live stream over TLS), is approved and runs once; the page
/// is a secure context and its session cookie is `Secure` and `__Host-`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_https_an_approver_approves_a_call_that_arrives_live() {
    let what = "over_https_an_approver_approves_a_call_that_arrives_live";
    let certs = TestCertificates::new();
    let trust = format!(
        "--ignore-certificate-errors-spki-list={}",
        certs.server.spki_sha256
    );
    let Some(browser) = Browser::start_with(what, &[trust]).await else {
        return;
    };
    let (_dir, url) = crate::support::sqlite();
    let tls = [
        "--tls-cert",
        certs.server.cert.to_str().unwrap(),
        "--tls-key",
        certs.server.key.to_str().unwrap(),
    ];
    let mut scene = Scene::with_args(&url, PATIENCE, &tls).await;
    scene.http = Http::trusting(&certs.ca);
    assert!(
        scene.serve.base.starts_with("https://"),
        "{}",
        scene.serve.base
    );
    sign_in(&browser, &scene, DANA).await;
    let context = browser
        .execute(
            "return [location.protocol, window.isSecureContext];",
            vec![],
        )
        .await;
    assert_eq!(context, json!(["https:", true]));
    let cookies = browser.client().get_all_cookies().await.unwrap();
    let session = cookies
        .iter()
        .find(|c| c.name() == "__Host-idem_session")
        .expect("a __Host- session cookie");
    assert_eq!(session.secure(), Some(true), "{session}");
    assert_eq!(session.http_only(), Some(true), "{session}");
    wait_text(&browser, "#inbox-rows", "Nothing is waiting").await;

    let call = delete_call(&unique("call"), "mallory");
    let waiting = wait_on(&scene.agent, call, &scene.namespace);
    let item = scene.listed().await;
    let key = item["key"].as_str().unwrap().to_owned();
    let row = format!("tr.item[data-key='{key}']");
    browser.wait_for(&row, PAGE).await;
    open_record(&browser, &scene, &key, "#record").await;
    approve_with_note(&browser, "approved over https").await;
    confirm_and_run_once(&browser, &scene, waiting).await;
}
