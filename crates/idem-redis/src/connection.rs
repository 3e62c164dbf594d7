//! The one connection type a [`RedisStore`](crate::RedisStore) talks
//! through — to one server, or to a Redis Cluster through its seed nodes —
//! and the walk over every slot that migrations make with it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, FromRedisValue, Pipeline, RedisResult, Script, ScriptInvocation, TlsCertificates,
};

use crate::codec::text;
use crate::options::{RedisOptions, Servers};
use crate::schema::{COUNT_WINDOW, SLOTS};
use crate::tls;
use idem_runtime::store::{Cause, StoreError};

/// The store's connection: a [`ConnectionManager`] to one server, or a
/// [`ClusterConnection`] that routes each command to the node holding its
/// key's slot. Both are cheap handles on one shared connection (per node).
#[derive(Clone)]
pub(super) struct Connection {
    pub(super) link: Link,
    /// The requests sent and waited for ([`RedisStore::round_trips`](crate::RedisStore::round_trips)).
    pub(super) trips: Arc<AtomicU64>,
}

/// One server or a cluster.
#[derive(Clone)]
pub(super) enum Link {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

/// Run `$body` with `$conn` bound to whichever connection `$self` holds,
/// counting one round trip; once more when the first failure proves the
/// request never reached the server ([`never_sent`]).
macro_rules! on_either {
    ($self:expr, $conn:ident => $body:expr) => {{
        $self.trips.fetch_add(1, Ordering::Relaxed);
        let first = match &mut $self.link {
            Link::Node($conn) => $body,
            Link::Cluster($conn) => $body,
        };
        match first {
            Err(e) if never_sent(&e) => {
                $self.trips.fetch_add(1, Ordering::Relaxed);
                match &mut $self.link {
                    Link::Node($conn) => $body,
                    Link::Cluster($conn) => $body,
                }
            }
            answered => answered,
        }
    }};
}

/// Whether a request that failed with `e` cannot have reached the server:
/// no connection could be made for it (refused). Such a request is sent
/// again, once, on the connection made next.
///
/// One server's connection is a [`ConnectionManager`] speaking RESP3 (see
/// [`Connection::open`]): the server's closing of the connection (a
/// restart, a failover, an idle timeout) reaches it as a push, and it
/// connects again at once, so a request made once the server is back goes
/// out on a fresh connection. If the server was still down when it tried,
/// the manager holds that failure, and the next request is refused with it
/// before anything is sent; the manager then connects again, and the
/// request is sent on that connection.
///
/// Any other failure may have reached the server, which may have run the
/// script: it is the caller's, never resent here.
pub(super) fn never_sent(e: &redis::RedisError) -> bool {
    e.is_connection_refusal()
}

impl Connection {
    /// Connect to `servers` within `options`' timeouts.
    ///
    /// A cluster connection follows redirections (`MOVED`, `ASK`), waits out
    /// `TRYAGAIN` and `CLUSTERDOWN`, and resends a request whose connection
    /// dropped, all within the response timeout. The resend may apply a
    /// script twice; every idem script applied twice still runs no call
    /// twice (see the [store's docs](crate::RedisStore)).
    pub(super) async fn open(
        servers: &Servers,
        certificates: Option<&TlsCertificates>,
        options: &RedisOptions,
        unavailable: impl Fn(redis::RedisError) -> StoreError,
        name: &str,
    ) -> Result<Connection, StoreError> {
        let config = |e| invalid_url(name, e);
        let limit = options.connection_timeout * 3;
        let in_time = |result: Result<RedisResult<Link>, _>| match result {
            Ok(result) => result.map_err(&unavailable).map(|link| Connection {
                link,
                trips: Arc::default(),
            }),
            Err(_) => Err(StoreError::Unavailable {
                store: name.to_owned(),
                cause: Cause::from(format!("no connection within {limit:?}")),
            }),
        };
        match servers {
            Servers::Node(url) => {
                let client = tls::client(resp3(url).map_err(config)?, certificates);
                let client = client.map_err(config)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(options.connection_timeout))
                    .set_response_timeout(Some(options.response_timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let connecting = async {
                    ConnectionManager::new_with_config(client, config)
                        .await
                        .map(Link::Node)
                };
                in_time(tokio::time::timeout(limit, connecting).await)
            }
            Servers::Cluster(nodes) => {
                let mut builder = ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(options.connection_timeout)
                    .response_timeout(options.response_timeout);
                if let Some(certificates) = certificates {
                    builder = builder.certs(certificates.clone());
                }
                let client = builder.build().map_err(config)?;
                let connecting = async { client.get_async_connection().await.map(Link::Cluster) };
                in_time(tokio::time::timeout(limit, connecting).await)
            }
        }
    }

    /// Run one command.
    pub(super) async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        on_either!(self, conn => cmd.query_async(conn).await)
    }

    /// Run a pipeline whose commands touch keys of one slot (on a cluster,
    /// it goes whole to the node of the first key).
    pub(super) async fn pipeline<T: FromRedisValue>(&mut self, pipe: &Pipeline) -> RedisResult<T> {
        on_either!(self, conn => pipe.query_async(conn).await)
    }

    /// Run a script (`EVALSHA`, loading it first if the server lacks it).
    pub(super) async fn invoke<T: FromRedisValue>(
        &mut self,
        invocation: &ScriptInvocation<'_>,
    ) -> RedisResult<T> {
        on_either!(self, conn => invocation.invoke_async(conn).await)
    }

    /// Load `script` (on a cluster, into every primary).
    pub(super) async fn load(&mut self, script: &Script) -> RedisResult<String> {
        on_either!(self, conn => script.prepare_invoke().load_async(conn).await)
    }

    /// Run commands whose keys may lie in different slots, each reply in
    /// the order of `cmds`: one pipeline on one server; on a cluster, each
    /// command sent at once to its own node (a cluster pipeline must stay
    /// within one slot).
    pub(super) async fn batch(&mut self, cmds: Vec<Cmd>) -> RedisResult<Vec<redis::Value>> {
        self.trips.fetch_add(1, Ordering::Relaxed);
        match &mut self.link {
            Link::Node(conn) => {
                let mut pipe = redis::pipe();
                for cmd in cmds {
                    pipe.add_command(cmd);
                }
                pipe.query_async(conn).await
            }
            Link::Cluster(conn) => {
                let replies = cmds.iter().map(|cmd| {
                    let mut conn = conn.clone();
                    async move { cmd.query_async(&mut conn).await }
                });
                futures_util::future::try_join_all(replies).await
            }
        }
    }
}

/// The server of `url`, spoken to in RESP3 unless the URL asks for a
/// protocol (`?protocol=resp2`): a RESP3 connection hears the server close
/// it, and its [`ConnectionManager`] reconnects before the next request
/// rather than failing it (see [`never_sent`]).
fn resp3(url: &str) -> redis::RedisResult<redis::ConnectionInfo> {
    use redis::IntoConnectionInfo as _;
    let info = url.into_connection_info()?;
    let chosen = url
        .split_once('?')
        .is_some_and(|(_, query)| query.split('&').any(|p| p.starts_with("protocol=")));
    if chosen {
        return Ok(info);
    }
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    Ok(info.set_redis_settings(settings))
}

/// The URL `name` (password hidden), refused by redis-rs's URL parser as
/// `e`: the parser's error is the source.
pub(super) fn invalid_url(name: &str, e: redis::RedisError) -> StoreError {
    StoreError::InvalidUrl {
        store: name.to_owned(),
        reason: Cause::with_source(format!("bad Redis URL: {e}"), e),
    }
}

/// Run a script over every slot's index a batch at a time, [`COUNT_WINDOW`]
/// slots a round trip, until every slot is done: `command(slot, after)` is
/// the slot's next batch from the member `after` (empty: the start), whose
/// reply is the member to resume after (empty: the slot is done). For
/// migrations that visit every record.
pub(super) async fn walk_slots(
    conn: &mut Connection,
    command: impl Fn(u16, &str) -> redis::Cmd,
) -> redis::RedisResult<()> {
    let mut pending: Vec<(u16, String)> = (0..SLOTS).map(|s| (s, String::new())).collect();
    while !pending.is_empty() {
        let mut next = Vec::new();
        for window in pending.chunks(usize::from(COUNT_WINDOW)) {
            let cmds = window
                .iter()
                .map(|(slot, after)| command(*slot, after))
                .collect();
            let replies = conn.batch(cmds).await?;
            for ((slot, _), reply) in window.iter().zip(replies) {
                if let Some(last) = text(&reply).filter(|last| !last.is_empty()) {
                    next.push((*slot, last));
                }
            }
        }
        pending = next;
    }
    Ok(())
}
