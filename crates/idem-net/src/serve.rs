//! Serving an axum router with bounded connections: what `axum::serve`
//! does, plus the limits it has no place for.
//!
//! * **A request's head must arrive within [`Limits::header_read`]** of
//!   the server's being ready for it, and an idle keep-alive connection is
//!   closed after as long (hyper's `header_read_timeout`, which axum's
//!   `serve` cannot set: it runs hyper without a timer). A client that
//!   sends one header line every few seconds no longer holds its
//!   connection for ever. A response under way (a live event stream) is
//!   not a head being read, and is not cut.
//! * **At most [`Limits::connections`] connections at once** per listener
//!   (half the process's descriptor limit, at most 512), and, unless the
//!   server is behind a proxy (every connection from its address), **at
//!   most [`Limits::per_source`] from one address** (an eighth of those;
//!   an IPv6 address counts with its /64, which one host is given): a
//!   connection past either is closed as soon as it is accepted, so that
//!   idle clients cannot take every descriptor of the process, and the
//!   process never runs out of them (`accept` failing with `EMFILE`).
//!   A program that serves calls [`raise_descriptor_limit`] first.
//!
//! The peer's address is given to handlers as axum's `ConnectInfo`; on
//! the stop signal no new connection is accepted and those open are shut
//! down gracefully (hyper-util's `GracefulShutdown`), as with
//! `axum::serve(..).with_graceful_shutdown(..)`.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::sync::Semaphore;
use tower_service::Service;

/// How many connections a listener holds, and for how long a request's
/// head may take.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The longest a request's head may take to arrive, and an idle
    /// keep-alive connection may stay open (10 s).
    pub header_read: Duration,
    /// Connections open at once: half the process's descriptor limit
    /// when the limits are made, leaving the rest to the store and files;
    /// at most 512, at least 8.
    pub connections: usize,
    /// Connections open at once from one address: an eighth of
    /// `connections` (64 of 512); `None` behind a proxy, where every
    /// connection comes from its address.
    pub per_source: Option<usize>,
}

impl Default for Limits {
    fn default() -> Self {
        let connections = descriptor_limit().map_or(512, |n| (n / 2).clamp(8, 512));
        Limits {
            header_read: Duration::from_secs(10),
            connections,
            per_source: Some(connections / 8),
        }
    }
}

/// The process's (soft) limit on open descriptors, if it has one.
fn descriptor_limit() -> Option<usize> {
    #[cfg(unix)]
    let limit = rlimit::Resource::NOFILE.get_soft().ok();
    #[cfg(not(unix))]
    let limit: Option<u64> = None;
    limit.map(|n| usize::try_from(n).unwrap_or(usize::MAX))
}

/// Raise the process's limit on open descriptors to its hard limit, as a
/// server that holds many connections should before it makes its
/// [`Limits`]; the soft limit after, when there is one. Often 1,024
/// soft against 524,288 hard: [`Limits::default`] then allows 512
/// connections instead of 512 of the 1,024.
pub fn raise_descriptor_limit() -> Option<u64> {
    #[cfg(unix)]
    let raised = rlimit::increase_nofile_limit(u64::MAX).ok();
    #[cfg(not(unix))]
    let raised = None;
    raised
}

/// What connections are counted by: an IPv4 address, or an IPv6 one's
/// /64 (a host is given a /64 and may use any address in it; an IPv4
/// address written in IPv6 counts as itself).
fn source(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

/// Connections open per address.
#[derive(Default)]
struct Sources(Mutex<HashMap<IpAddr, usize>>);

/// One connection counted against its address; counted off when dropped.
struct Counted {
    sources: Arc<Sources>,
    ip: IpAddr,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut open = self.sources.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

impl Sources {
    /// Count one more connection of `ip`, unless it has `max` already.
    fn enter(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<Counted> {
        let mut open = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Counted {
            sources: self.clone(),
            ip,
        })
    }
}

/// Serve `router` on `listener` within `limits` until `shutdown`
/// resolves; then stop accepting, shut the open connections down
/// gracefully and return once they are closed.
pub async fn serve<L>(
    mut listener: L,
    router: axum::Router,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    L: Listener<Addr = SocketAddr>,
{
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read);
    let open = Arc::new(Semaphore::new(limits.connections));
    let sources = Arc::new(Sources::default());
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        // Past a limit the connection is dropped, which closes it.
        let Ok(permit) = open.clone().try_acquire_owned() else {
            continue;
        };
        let counted = match limits.per_source {
            Some(max) => match sources.enter(source(peer.ip()), max) {
                Some(counted) => Some(counted),
                None => continue,
            },
            None => None,
        };
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            router.clone().call(request)
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(io), service));
        tokio::spawn(async move {
            // A client that goes away is no error of the server's.
            let _ = connection.await;
            drop((permit, counted));
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_may_hold_only_its_share_and_gets_it_back() {
        let sources = Arc::new(Sources::default());
        let ip: IpAddr = [127, 0, 0, 3].into();
        let held: Vec<_> = (0..3).map(|_| sources.enter(ip, 3).unwrap()).collect();
        assert!(sources.enter(ip, 3).is_none());
        assert!(sources.enter([127, 0, 0, 2].into(), 3).is_some());
        drop(held);
        assert!(sources.enter(ip, 3).is_some());
        assert_eq!(sources.0.lock().unwrap().len(), 0, "nothing kept");
    }

    #[test]
    fn an_ipv6_host_counts_as_its_64_and_mapped_ipv4_as_itself() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff:ffff:ffff:fffe".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(source(a), source(b));
        assert_ne!(source(a), source(c));
        let mapped: IpAddr = "::ffff:127.0.0.5".parse().unwrap();
        assert_eq!(source(mapped), IpAddr::from([127, 0, 0, 5]));
    }

    #[test]
    fn the_limits_leave_half_the_descriptors_and_an_eighth_to_one_address() {
        let limits = Limits::default();
        let descriptors = descriptor_limit().unwrap_or(1024);
        assert!(limits.connections <= descriptors / 2 || limits.connections == 8);
        assert!((8..=512).contains(&limits.connections));
        assert_eq!(limits.per_source, Some(limits.connections / 8));
    }
}
