//! One principal opening sessions as fast as it can: the proxy keeps at
//! most 64 of them, and gives the memory of the others back.

use std::time::{Duration, Instant};

use crate::support::mcp_http::{http, serve_upstream, Proxy, Session};
use crate::support::rss_mib;
use serde_json::json;

/// 10,000 MCP sessions, 64 at a time, from one principal (`--no-auth`:
/// every caller is one): it holds 64 at the end, and once it has ended
/// them RSS is back within 10 % of where it started in at most a minute
/// (read every half second, for at most 75 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_sessions_leave_64_and_their_memory_is_returned() {
    const SESSIONS: usize = 10_000;
    const AT_ONCE: usize = 64;
    const PER_PRINCIPAL: usize = 64;
    let upstream = serve_upstream().await;
    let dir = idem_testkit::TempDir::new("idem-proxy-storm").expect("a directory");

    let proxy = Proxy::start(upstream, dir.path(), &[]);
    let pid = proxy.pid();
    let client = http();
    // Warm: the first session and call allocate what every later one reuses.
    let first = Session::open(client.clone(), proxy.url.clone()).await;
    assert!(
        first.call("echo", "warm", 0).await,
        "the first call answered"
    );
    drop(first);
    let before = rss_mib(pid);

    let started = Instant::now();
    let mut peak = before;
    let mut opened = 0;
    let mut kept = std::collections::VecDeque::new();
    while opened < SESSIONS {
        let wave: Vec<_> = (0..AT_ONCE.min(SESSIONS - opened))
            .map(|_| {
                let (client, url) = (client.clone(), proxy.url.clone());
                tokio::spawn(async move { Session::open(client, url).await })
            })
            .collect();
        for session in wave {
            let session = session.await.expect("a session opened");
            opened += 1;
            kept.push_back(session);
            if kept.len() > 2 * AT_ONCE {
                kept.pop_front();
            }
        }
        if opened % 1_000 == 0 {
            peak = peak.max(rss_mib(pid));
        }
    }
    let storm = started.elapsed();
    peak = peak.max(rss_mib(pid));
    // Of the last 128 opened, the principal still holds 64: the others
    // were closed as it opened more.
    let mut alive = 0;
    for (n, session) in kept.iter().enumerate() {
        let ping = json!({"jsonrpc": "2.0", "id": n, "method": "ping"});
        if let Some((_, answer)) = session.post(ping).await {
            alive += usize::from(answer.get("result").is_some());
        }
    }
    assert_eq!(alive, PER_PRINCIPAL, "sessions still open after the storm");
    // It leaves, as MCP's clients do: each session it holds is ended.
    for session in kept {
        session.end().await;
    }

    let ended = Instant::now();
    let mut after = rss_mib(pid);
    while after * 10 > before * 11 && ended.elapsed() < Duration::from_secs(75) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        after = rss_mib(pid);
    }
    let back = ended.elapsed();
    eprintln!(
        "{SESSIONS} sessions in {storm:.1?}: RSS {before} MiB before, {peak} MiB at the peak, \
         {after} MiB {back:.1?} after"
    );
    // The proxy still answers, in a session of its own.
    let last = Session::open(client.clone(), proxy.url.clone()).await;
    assert!(
        last.call("echo", "after", 1).await,
        "a call after the storm"
    );
    assert!(
        after * 10 <= before * 11,
        "RSS {after} MiB {back:.1?} after the storm, {before} MiB before it"
    );
}
