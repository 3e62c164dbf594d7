//! Signing in under attack, against the real `idem serve` over plain HTTP:
//! a flood of made-up names stays within bounded memory and does not slow
//! a listed approver down; guesses at one name from many addresses are
//! slowed down per name and never lock the right password out; a session
//! ends on the server when its person signs out, whatever copy of the
//! cookie is left; and a form from another port of the same host cannot
//! sign anybody in.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::support::rss_mib;
use crate::support::serve::{hidden, Http, Serve, DANA, VIC};

/// `idem serve` on a new SQLite store (the guard deletes it).
async fn served() -> (idem_testkit::TempDir, Serve) {
    let (dir, url) = crate::support::sqlite();
    // The store must exist before `idem serve` opens it.
    let app = crate::support::tools::App::default();
    let _agent = crate::support::tools::dispatcher(&url, &app, Duration::ZERO).await;
    (dir, Serve::start(&url, None, &[]))
}

/// The sign-in form's token, with its cookie kept in `http`.
async fn form_token(http: &mut Http, serve: &Serve) -> String {
    let login = http.get(&serve.url("/login")).await;
    hidden(&login.body, "csrf").expect("the sign-in form has a CSRF token")
}

/// 128 sign-ins at once with names nobody has: the server's memory stays
/// under 300 MB (each check is a 19 MiB Argon2), every one is answered
/// (401, 429 or 503 with Retry-After), and dana, signing in meanwhile
/// from another address, is in within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_made_up_names_stays_bounded_and_lets_dana_in() {
    let (_dir, serve) = served().await;
    let mut attacker = Http::default();
    let csrf = form_token(&mut attacker, &serve).await;
    let pid = serve.pid();
    let before = rss_mib(pid);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampling = tokio::spawn({
        let done = done.clone();
        async move {
            let mut peak = 0;
            // Until the flood is answered, and a little after (at most 10 s).
            for _ in 0..1000 {
                peak = peak.max(rss_mib(pid));
                if done.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            peak.max(rss_mib(pid))
        }
    });
    // From four addresses: one may hold at most 64 connections.
    let flooded = Instant::now();
    let flood: Vec<_> = (0..128)
        .map(|i| {
            let mut http = Http::from_address(IpAddr::from([127, 0, 0, 10 + i % 4]));
            http.cookies = attacker.cookies.clone();
            let (url, csrf) = (serve.url("/login"), csrf.clone());
            tokio::spawn(async move {
                let name = format!("made-up-{i}");
                let reply = http
                    .form(
                        &url,
                        &[("csrf", &csrf), ("name", &name), ("password", "guess")],
                    )
                    .await;
                (reply.status, reply.header("retry-after"))
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // From an address of her own: the flood's address is past its budget.
    let mut dana = Http::from_address(IpAddr::from([127, 0, 0, 2]));
    let csrf_dana = form_token(&mut dana, &serve).await;
    let started = Instant::now();
    let signed_in = dana.log_in(&serve, &csrf_dana, DANA).await;
    let dana_took = started.elapsed();
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    let mut statuses = std::collections::BTreeMap::new();
    for answer in flood {
        let (status, retry) = answer.await.unwrap();
        assert!(matches!(status, 401 | 429 | 503), "{status}");
        if status != 401 {
            assert_eq!(retry.len(), 1, "{status} says when to retry");
        }
        *statuses.entry(status).or_insert(0) += 1;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let peak = sampling.await.unwrap();
    // Refusals are logged at most 20 a second; the rest are counted.
    let took = flooded.elapsed().as_secs() + 1;
    let said = serve.said();
    let lines = said
        .lines()
        .filter(|l| l.contains("sign-in failed") || l.contains("sign-in not checked"))
        .count();
    assert!(
        lines as u64 <= 20 * took,
        "{lines} refusal lines in {took} s"
    );
    // The next refusal's line, a second on, says how many were held back.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut late = Http::from_address(IpAddr::from([127, 0, 0, 20]));
    let csrf = form_token(&mut late, &serve).await;
    let wrong = late.log_in(&serve, &csrf, (VIC.0, "wrong")).await;
    assert_eq!(wrong.status, 401);
    serve.said_within("held=", 1);
    eprintln!("{lines} refusal lines logged for 128 in {took} s");
    eprintln!(
        "flood of 128 made-up names: RSS {before} MiB before, {peak} MiB at most; \
         dana signed in in {dana_took:?}; answers {statuses:?}"
    );
    assert!(peak < 300, "RSS peaked at {peak} MiB");
    assert!(
        dana_took < Duration::from_secs(1),
        "dana took {dana_took:?}"
    );
}

/// The lockout of issue 50: five strangers, each from an address of its
/// own, keep guessing dana's password faster than the inbox checks them,
/// for 4 s; dana, from her own address, signs in five times meanwhile,
/// each at once (before, her right password got 429 on every try). The
/// strangers are slowed and refused in their own lanes; vic is never
/// slowed by dana's guesses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_guessing_a_name_never_lock_its_owner_out() {
    let (_dir, serve) = served().await;
    let pressing = Instant::now() + Duration::from_secs(4);
    let mut strangers = Vec::new();
    for i in 3..8u8 {
        let address = IpAddr::from([127, 0, 0, i]);
        let mut http = Http::from_address(address);
        let csrf = form_token(&mut http, &serve).await;
        let url = serve.url("/login");
        strangers.push(tokio::spawn(async move {
            let mut guesses = tokio::task::JoinSet::new();
            let mut n = 0;
            while Instant::now() < pressing {
                n += 1;
                let mut guess = Http::from_address(address);
                guess.cookies = http.cookies.clone();
                let (url, csrf) = (url.clone(), csrf.clone());
                guesses.spawn(async move {
                    let password = format!("guess {i}/{n}");
                    let fields = [("csrf", &*csrf), ("name", DANA.0), ("password", &password)];
                    guess.form(&url, &fields).await.status
                });
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            // Those still waiting their turn are left.
            let mut answered = Vec::new();
            while let Ok(Some(status)) =
                tokio::time::timeout(Duration::from_millis(200), guesses.join_next()).await
            {
                answered.push(status.unwrap());
            }
            answered
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let mut dana = Http::from_address(IpAddr::from([127, 0, 0, 2]));
        let csrf = form_token(&mut dana, &serve).await;
        let started = Instant::now();
        let signed_in = dana.log_in(&serve, &csrf, DANA).await;
        assert_eq!(
            signed_in.status, 303,
            "the right password gets in: {}",
            signed_in.body
        );
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let mut statuses = std::collections::BTreeMap::new();
    for stranger in strangers {
        for status in stranger.await.unwrap() {
            assert!(matches!(status, 401 | 429), "{status}");
            *statuses.entry(status).or_insert(0) += 1;
        }
    }
    eprintln!("dana signed in 5 times while 5 strangers guessed; slowest {slowest:?}; strangers' answers {statuses:?}");
    assert!(slowest < Duration::from_secs(1), "dana took {slowest:?}");
    assert!(
        statuses.contains_key(&429),
        "the strangers are held back: {statuses:?}"
    );
    // And vic was never slowed down by dana's guesses.
    let mut vic = Http::default();
    let csrf = form_token(&mut vic, &serve).await;
    let started = Instant::now();
    let vic_in = vic.log_in(&serve, &csrf, VIC).await;
    assert_eq!(vic_in.status, 303);
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// A copy of dana's cookie taken before she signs out opens nothing after;
/// a session id planted in the browser before sign-in is not the one
/// signed in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_out_ends_the_session_for_every_copy_of_its_cookie() {
    let (_dir, serve) = served().await;
    let mut dana = Http::default();
    dana.cookies
        .insert("idem_session".into(), "planted-by-someone".into());
    crate::support::serve::sign_in(&mut dana, &serve, DANA).await;
    let session = dana.cookies["idem_session"].clone();
    assert_ne!(session, "planted-by-someone", "a new id at sign-in");
    let mut copy = Http::default();
    copy.cookies = dana.cookies.clone();
    assert_eq!(
        copy.get(&serve.url("/")).await.status,
        200,
        "the copy works while signed in"
    );

    let inbox = dana.get(&serve.url("/")).await;
    let csrf = hidden(&inbox.body, "csrf").unwrap();
    let out = dana.form(&serve.url("/logout"), &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 303);
    let after = copy.get(&serve.url("/")).await;
    assert_eq!(
        after.status, 303,
        "the copied cookie no longer signs anyone in"
    );
    assert_eq!(after.header("location"), ["/login"]);
    assert_eq!(copy.get(&serve.url("/events")).await.status, 401);
    assert_eq!(copy.get(&serve.url("/inbox/rows")).await.status, 401);
}

/// A page on another port of the same host tosses its own sign-in cookie
/// and token at the browser and posts the sign-in form as vic: refused,
/// and dana stays dana. Every other post from there is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_from_another_port_cannot_sign_anybody_in() {
    let (_dir, serve) = served().await;
    let mut dana = Http::default();
    crate::support::serve::sign_in(&mut dana, &serve, DANA).await;
    // The attacker's pair, as its own server got it from the inbox.
    let mut attacker = Http::default();
    let csrf = form_token(&mut attacker, &serve).await;
    dana.cookies
        .insert("idem_login".into(), attacker.cookies["idem_login"].clone());
    let port = serve.base.rsplit(':').next().unwrap();
    let other: u16 = if port == "9000" { 9001 } else { 9000 };
    let from_other = format!("http://127.0.0.1:{other}");
    let tossed = dana
        .send(
            "POST",
            &serve.url("/login"),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", &from_other),
                ("sec-fetch-site", "same-site"),
            ],
            &format!(
                "csrf={csrf}&name=vic&password={}",
                crate::support::http::encode(VIC.1)
            ),
        )
        .await;
    assert_eq!(tossed.status, 403, "{}", tossed.body);
    assert!(tossed.body.contains("not the inbox"), "{}", tossed.body);
    let inbox = dana.get(&serve.url("/")).await;
    assert!(
        inbox
            .body
            .contains("<strong id=\"signed-in-as\">dana</strong>"),
        "still dana"
    );
    let csrf = hidden(&inbox.body, "csrf").unwrap();
    let out = dana
        .send(
            "POST",
            &serve.url("/logout"),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", &from_other),
            ],
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(out.status, 403, "{}", out.body);
    // The inbox's own origin passes.
    let own = dana
        .send(
            "POST",
            &serve.url("/logout"),
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                ("origin", &serve.base),
                ("sec-fetch-site", "same-origin"),
            ],
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(own.status, 303, "{}", own.body);
}

/// The cookie-tossing attack of issue 34 in Chromium: dana is signed in;
/// a page on another port of the same host sets its own `idem_login`
/// cookie (cookies do not keep ports apart) and posts the sign-in form
/// with the matching token as vic. Refused, and dana stays dana.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_on_another_port_cannot_switch_the_signed_in_user_in_chromium() {
    let Some(browser) = crate::support::browser::Browser::start(
        "a_page_on_another_port_cannot_switch_the_signed_in_user_in_chromium",
    )
    .await
    else {
        return;
    };
    let page = Duration::from_secs(15);
    let (_dir, serve) = served().await;
    browser.goto(&serve.url("/login")).await;
    browser.fill("#name", DANA.0).await;
    browser.fill("#password", DANA.1).await;
    browser.submit("form#login").await;
    browser.wait_for("#signed-in-as", page).await;

    // The attacker's own valid pair, fetched by its server.
    let mut attacker = Http::default();
    let csrf = form_token(&mut attacker, &serve).await;
    let tossed = attacker.cookies["idem_login"].clone();
    let site = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let site_url = format!("http://{}/", site.local_addr().unwrap());
    let html = format!(
        "<!doctype html><form id=f method=post action=\"{}\">\
         <input name=csrf value=\"{csrf}\"><input name=name value=vic>\
         <input name=password value=\"{}\"></form>\
         <script>document.getElementById('f').submit()</script>",
        serve.url("/login"),
        VIC.1
    );
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nSet-Cookie: idem_login={tossed}; Path=/\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{html}",
        html.len()
    );
    let serving = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut stream, _)) = site.accept().await {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).await;
            let _ = stream.write_all(response.as_bytes()).await;
        }
    });
    browser.goto(&site_url).await;
    let deadline = Instant::now() + page;
    while !browser.current_url().await.starts_with(&serve.base) {
        assert!(Instant::now() < deadline, "the attack page never posted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = browser.wait_for("#error", page).await.text().await.unwrap();
    assert!(refused.contains("not the inbox's own"), "{refused}");
    browser.goto(&serve.url("/")).await;
    browser.wait_for("#signed-in-as", page).await;
    assert_eq!(browser.text("#signed-in-as").await, DANA.0, "still dana");
    serving.abort();
}
