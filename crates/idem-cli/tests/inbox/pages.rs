//! The inbox a page at a time: 50 items, the newest call first, read from
//! the store's open records; the live stream names what changed.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::AsyncReadExt;

use crate::lifecycle::open_stream;
use crate::support::schema;
use crate::support::serve::{sign_in, Http, Scene, DANA};
use crate::support::tools::{delete_call, tenant};

/// Every page of `GET /api/inbox?QUERY`, following `next`.
async fn api_pages(scene: &mut Scene, query: &str) -> Vec<Vec<Value>> {
    let mut pages = Vec::new();
    let mut after = String::new();
    loop {
        let path = format!("/api/inbox?{query}{after}");
        let reply = scene.http.bot(&scene.serve, &path, None).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let page = reply.json();
        schema::check(&page, "inbox");
        pages.push(page["items"].as_array().unwrap().clone());
        match page["next"].as_str() {
            Some(next) => after = format!("&after={}", crate::support::http::encode(next)),
            None => return pages,
        }
        assert!(pages.len() < 10, "the pages do not end");
    }
}

/// 120 calls wait for approval: the API gives them in pages of 50, 50 and
/// 20, each once, the newest first; the HTML inbox links its pages; a bad
/// `after` is refused; and a call that arrives is named in the live
/// stream's next event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_pages_newest_first_and_its_stream_names_what_arrived() {
    let (_dir, _, mut scene) = Scene::on_sqlite().await;
    let namespace = scene.namespace.clone();
    for i in 0..120 {
        let call = delete_call(&format!("page-{i:03}"), &format!("customer-{i}"));
        let _ = scene.agent.dispatch_one(call, &tenant(&namespace)).await;
    }

    let query = format!("namespace={namespace}");
    let pages = api_pages(&mut scene, &query).await;
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [50, 50, 20], "pages of 50");
    let ids: Vec<&str> = pages
        .iter()
        .flatten()
        .map(|i| i["call_id"].as_str().unwrap())
        .collect();
    let distinct: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), 120, "every call once");
    // Newest first: calls made in the same millisecond are ordered by key,
    // so only the ends are certain.
    assert!(pages[0].iter().any(|i| i["call_id"] == "page-119"));
    assert!(pages[2].iter().any(|i| i["call_id"] == "page-000"));
    let first_half: usize = ids[..60].iter().filter(|id| &id[5..] >= "060").count();
    assert!(first_half > 50, "the newer calls come first: {ids:?}");

    let bad = scene
        .http
        .bot(&scene.serve, "/api/inbox?after=not-a-cursor", None)
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json()["error"]["code"], "bad_request");

    // The page links the next one, which links back to the newest.
    let mut http = Http::default();
    sign_in(&mut http, &scene.serve, DANA).await;
    let first = http.get(&scene.serve.url(&format!("/?{query}"))).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body.matches("<tr class=\"item").count(), 50);
    let older = first
        .body
        .split("href=\"")
        .find_map(|s| s.split_once("\" rel=\"next\"").map(|(href, _)| href))
        .expect("an Older link")
        .replace("&#38;", "&")
        .replace("&amp;", "&");
    assert!(!first.body.contains("← Newest"));
    let second = http.get(&scene.serve.url(&older)).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.body.matches("<tr class=\"item").count(), 50);
    assert!(second.body.contains("← Newest"), "{older}: {}", second.body);
    assert!(second.body.contains("data-first=\"false\""));

    // The live stream: its first event, then one naming a new call.
    let cookie = format!("idem_session={}", http.cookies["idem_session"]);
    let (mut stream, status) = open_stream(&scene.serve.base, &cookie).await;
    assert!(status.contains(" 200 "), "{status}");
    let mut seen = String::new();
    read_until(&mut stream, &mut seen, |s| s.contains("event: inbox")).await;
    let call = delete_call("page-new", "customer-new");
    let _ = scene.agent.dispatch_one(call, &tenant(&namespace)).await;
    let newest = &api_pages(&mut scene, &query).await[0][0];
    assert_eq!(newest["call_id"], "page-new");
    let key = newest["key"].as_str().unwrap().to_owned();
    read_until(&mut stream, &mut seen, |s| {
        s.lines()
            .any(|l| l.starts_with("data: ") && l.contains("\"added\"") && l.contains(&key))
    })
    .await;
}

/// Read `stream` into `seen` until `done` says so, for at most 20 s.
async fn read_until(
    stream: &mut tokio::net::TcpStream,
    seen: &mut String,
    done: impl Fn(&str) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buffer = [0u8; 4096];
    let start = seen.len();
    while !done(&seen[start..]) {
        let left = deadline.saturating_duration_since(Instant::now());
        let read = tokio::time::timeout(left, stream.read(&mut buffer))
            .await
            .unwrap_or_else(|_| panic!("not within 20 s; the stream said: {seen}"))
            .unwrap();
        assert!(read > 0, "the stream ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }
}
