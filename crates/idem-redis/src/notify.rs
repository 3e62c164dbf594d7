//! Waking waiters: the subscriber that hears the keys the scripts publish
//! when a record is settled.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::{Client, RedisResult, TlsCertificates};

use crate::options::Servers;
use crate::tls::client;
use idem_runtime::store::backend::{reconnect_pause, Waiters};

/// The longest a waiter goes without re-reading its record when no
/// notification arrives.
pub const SAFETY_POLL: Duration = Duration::from_secs(1);

/// Keep one subscription to `channel` alive, waking the waiters of each key
/// published on it. After every (re)connection all waiters re-read, since
/// messages sent while disconnected are lost.
///
/// On a cluster a `PUBLISH` reaches every node, so subscribing on any one
/// node is enough: the subscriber takes the seed nodes in turn, moving to
/// the next when its node goes away.
pub(super) fn subscriber(
    servers: &Servers,
    certificates: Option<TlsCertificates>,
    channel: String,
    waiters: Arc<Waiters>,
    connect_timeout: Duration,
    subscribed: tokio::sync::oneshot::Sender<()>,
) -> Result<impl Future<Output = ()> + Send + 'static, redis::RedisError> {
    let clients = match servers {
        Servers::Node(url) => vec![client(url.as_str(), certificates.as_ref())?],
        Servers::Cluster(nodes) => nodes
            .iter()
            .map(|url| client(url.as_str(), certificates.as_ref()))
            .collect::<RedisResult<Vec<Client>>>()?,
    };
    Ok(subscribe(
        clients,
        channel,
        waiters,
        connect_timeout,
        subscribed,
    ))
}

async fn subscribe(
    clients: Vec<Client>,
    channel: String,
    waiters: Arc<Waiters>,
    connect_timeout: Duration,
    subscribed: tokio::sync::oneshot::Sender<()>,
) {
    let mut subscribed = Some(subscribed);
    let mut failures = 0;
    for client in clients.iter().cycle() {
        let connected = tokio::time::timeout(connect_timeout, client.get_async_pubsub()).await;
        if let Ok(Ok(mut pubsub)) = connected {
            if pubsub.subscribe(&channel).await.is_ok() {
                failures = 0;
                if let Some(tx) = subscribed.take() {
                    let _ = tx.send(());
                }
                waiters.wake_all();
                let mut messages = pubsub.on_message();
                while let Some(msg) = messages.next().await {
                    if let Ok(key) = std::str::from_utf8(msg.get_payload_bytes()) {
                        waiters.wake(key);
                    }
                }
            }
        }
        waiters.wake_all();
        failures += 1;
        tokio::time::sleep(reconnect_pause(failures)).await;
    }
}
