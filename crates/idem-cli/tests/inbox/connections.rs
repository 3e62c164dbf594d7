//! Connections held by strangers: a request head must arrive within 10 s
//! (and an idle connection is closed as long after), and one address may
//! hold at most 64 connections, so neither slow clients nor idle ones can
//! take the inbox's descriptors from everyone else.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::serve::{Http, Serve};

/// A connection to `serve` from `address` (any of 127.0.0.0/8).
async fn connect(serve: &Serve, address: [u8; 4]) -> TcpStream {
    let to = serve.base.trim_start_matches("http://").parse().unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind((IpAddr::from(address), 0).into()).unwrap();
    socket.connect(to).await.unwrap()
}

/// A SQLite store made by an agent's dispatcher (which `idem serve` needs
/// to exist), the dispatcher and the store's URL.
async fn store() -> (idem_testkit::TempDir, impl Sized, String) {
    let (dir, url) = crate::support::sqlite();
    let agent = crate::support::tools::dispatcher(
        &url,
        &crate::support::tools::App::default(),
        Duration::ZERO,
    )
    .await;
    (dir, agent, url)
}

/// Whether the server closed `stream` (a read ends or fails) within
/// `limit`.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buffer = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buffer)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

/// 40 clients send one header line every 2 s and never finish; 64 more,
/// from another address, connect and send nothing, and that address's
/// 65th connection is closed at once. Someone else is served meanwhile,
/// and every held connection is closed by the server within 12 s (a
/// slow writer learns it at its next writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_are_bounded_and_closed() {
    let (_dir, _agent, url) = store().await;
    let serve = Serve::start(&url, None, &[]);
    let started = Instant::now();
    let mut slow = Vec::new();
    for _ in 0..40 {
        let mut stream = connect(&serve, [127, 0, 0, 3]).await;
        stream.write_all(b"GET /login HTTP/1.1\r\n").await.unwrap();
        slow.push(tokio::spawn(async move {
            for i in 0.. {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let line = format!("X-Slow-{i}: still coming\r\n");
                if stream.write_all(line.as_bytes()).await.is_err() {
                    break;
                }
                if i > 10 {
                    return None;
                }
            }
            Some(started.elapsed())
        }));
    }
    let mut idle = Vec::new();
    for _ in 0..64 {
        idle.push(connect(&serve, [127, 0, 0, 4]).await);
    }
    let mut one_too_many = connect(&serve, [127, 0, 0, 4]).await;
    assert!(
        closed_within(&mut one_too_many, Duration::from_secs(1)).await,
        "the 65th connection of one address is closed at once"
    );
    let mut someone = Http::from_address(IpAddr::from([127, 0, 0, 2]));
    let answered = someone.get(&serve.url("/login")).await;
    assert_eq!(answered.status, 200, "{}", answered.body);

    for stream in &mut idle {
        let left = Duration::from_secs(12).saturating_sub(started.elapsed());
        assert!(
            closed_within(stream, left).await,
            "an idle connection is closed"
        );
    }
    for client in slow {
        let closed = client.await.unwrap();
        // Cut off at 10 s; a writer learns it at its next write or the one
        // after (every 2 s), later still on a loaded machine.
        let after = closed.expect("a slow head is cut off");
        assert!(after < Duration::from_secs(20), "{after:?}");
    }
    eprintln!(
        "40 slow heads and 64 idle connections closed within {:?}",
        started.elapsed()
    );
}

/// The descriptors `pid` has open (its entries in /proc/PID/fd).
fn descriptors_open(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// `idem serve` allowed 128 descriptors (soft and hard): it holds at most
/// 64 connections and 8 from one address. 160 idle connections from 20
/// addresses never take the last descriptor (the server goes on reading
/// its store and answering once they are closed), those past the caps are
/// closed at once, and everything held is closed within the header
/// timeout, after which the inbox answers someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_never_take_the_last_descriptor() {
    let (_dir, _agent, url) = store().await;
    let serve = Serve::with_descriptor_limit(&url, 128);
    let pid = serve.pid();
    let started = Instant::now();
    let mut streams = Vec::new();
    for address in 0..20u8 {
        // The ninth from one address is past its share.
        for _ in 0..9 {
            streams.push(connect(&serve, [127, 0, 1, address]).await);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut held = Vec::new();
    let mut closed_at_once = 0;
    for mut stream in streams {
        if closed_within(&mut stream, Duration::from_millis(5)).await {
            closed_at_once += 1;
        } else {
            held.push(stream);
        }
    }
    let open = descriptors_open(pid);
    eprintln!(
        "180 idle connections from 20 addresses: {} held, {closed_at_once} closed at once, \
         {open} descriptors of 128 open",
        held.len()
    );
    assert!(held.len() <= 64, "{} connections held", held.len());
    assert!(open < 128, "{open} descriptors open");
    for stream in &mut held {
        let left = Duration::from_secs(13).saturating_sub(started.elapsed());
        assert!(
            closed_within(stream, left).await,
            "an idle connection is closed"
        );
    }
    let mut someone = Http::from_address(IpAddr::from([127, 0, 0, 2]));
    let answered = someone.get(&serve.url("/login")).await;
    assert_eq!(answered.status, 200, "{}", answered.body);
    let ready = someone.get(&serve.url("/readyz")).await;
    assert_eq!(ready.status, 200, "the store is read: {}", ready.body);
}
