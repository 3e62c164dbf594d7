//! Where a [`RedisStore`](super::RedisStore) connects — one server, or a
//! Redis Cluster through its seed nodes — as its URL says, and the one
//! connection type the store talks through either way.
//!
//! The URL's query holds idem's own options (`prefix`) next to the one
//! redis-rs reads (`protocol`); any other name is refused, so a misspelt
//! option is an error rather than silently ignored.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Client, Cmd, FromRedisValue, Pipeline, RedisResult, Script, ScriptInvocation};

use super::RedisOptions;
use crate::store::waiters::Waiters;
use crate::store::{Cause, StoreError};

/// What a Redis URL names: the servers and idem's options.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) servers: Servers,
    /// `?prefix=…`, when given.
    pub(super) prefix: Option<String>,
    /// `?replicas=N`, when given.
    pub(super) replicas: Option<u32>,
}

/// The servers of a [`Target`], as URLs redis-rs reads.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Servers {
    /// One server (`redis://`, `rediss://`, `redis+unix://`, …).
    Node(String),
    /// The seed nodes of a cluster (`redis+cluster://a,b,…`), each a
    /// `redis://` or `rediss://` URL; the client learns the others from
    /// them.
    Cluster(Vec<String>),
}

/// The options a Redis URL's query may hold.
const KNOWN_OPTIONS: &str = "prefix=NAME, replicas=N, protocol=resp2|resp3";

/// Read `url` (which [`redact`](crate::store::url::redact)ed is `name`).
pub(super) fn parse(url: &str, name: &str) -> Result<Target, StoreError> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut prefix = None;
    let mut replicas = None;
    let mut passed = Vec::new();
    let mut unknown = Vec::new();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (option, value) = param.split_once('=').unwrap_or((param, ""));
        match option {
            "prefix" => prefix = Some(percent_decode(value, name)?),
            "replicas" => match value.parse() {
                Ok(n) => replicas = Some(n),
                Err(_) => {
                    return Err(StoreError::Config(format!(
                        "{name}: replicas must be a number of replicas, not {value:?}"
                    )))
                }
            },
            "protocol" => passed.push(param),
            _ => unknown.push(format!("{option:?}")),
        }
    }
    if !unknown.is_empty() {
        return Err(StoreError::Config(format!(
            "unknown Redis URL option {} in {name}; known: {KNOWN_OPTIONS}",
            unknown.join(", ")
        )));
    }
    let query = match passed.is_empty() {
        true => String::new(),
        false => format!("?{}", passed.join("&")),
    };
    let (scheme, rest) = base.split_once("://").unwrap_or((base, ""));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let servers = match scheme {
        "redis+cluster" | "rediss+cluster" => {
            if !matches!(path, "" | "0") {
                return Err(StoreError::Config(format!(
                    "{name}: a Redis Cluster has only database 0, so the URL names no other"
                )));
            }
            let node_scheme = &scheme[..scheme.len() - "+cluster".len()];
            let (user, hosts) = match authority.rsplit_once('@') {
                Some((user, hosts)) => (format!("{user}@"), hosts),
                None => (String::new(), authority),
            };
            let mut nodes = Vec::new();
            for host in hosts.split(',') {
                if host.is_empty() {
                    return Err(StoreError::Config(format!(
                        "{name} lists an empty seed node; write redis+cluster://HOST:PORT[,HOST:PORT…]"
                    )));
                }
                nodes.push(format!("{node_scheme}://{user}{host}/{query}"));
            }
            Servers::Cluster(nodes)
        }
        _ if authority.contains(',') => {
            return Err(StoreError::Config(format!(
                "{name} names several servers; for a Redis Cluster write redis+cluster://HOST:PORT[,HOST:PORT…]"
            )))
        }
        _ => Servers::Node(format!("{base}{query}")),
    };
    Ok(Target {
        servers,
        prefix,
        replicas,
    })
}

/// `text` with its `%XX` escapes decoded.
fn percent_decode(text: &str, name: &str) -> Result<String, StoreError> {
    let bad = || StoreError::Config(format!("{name}: malformed %-escape in the prefix {text:?}"));
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        rest = tail;
        if b != b'%' {
            bytes.push(b);
            continue;
        }
        let hex = rest.get(..2).ok_or_else(bad)?;
        let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
        bytes.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
        rest = &rest[2..];
    }
    String::from_utf8(bytes).map_err(|_| bad())
}

/// The store's connection: a [`ConnectionManager`] to one server, or a
/// [`ClusterConnection`] that routes each command to the node holding its
/// key's slot. Both are cheap handles on one shared connection (per node).
#[derive(Clone)]
pub(super) enum Connection {
    Node(ConnectionManager),
    Cluster(ClusterConnection),
}

/// Run `$body` with `$conn` bound to whichever connection `$self` holds.
macro_rules! on_either {
    ($self:expr, $conn:ident => $body:expr) => {
        match $self {
            Connection::Node($conn) => $body,
            Connection::Cluster($conn) => $body,
        }
    };
}

impl Connection {
    /// Connect to `servers` within `options`' timeouts.
    ///
    /// A cluster connection follows redirections (`MOVED`, `ASK`), waits out
    /// `TRYAGAIN` and `CLUSTERDOWN`, and resends a request whose connection
    /// dropped, all within the response timeout. The resend may apply a
    /// script twice; every idem script applied twice still runs no call
    /// twice (see the [store's docs](super::RedisStore)).
    pub(super) async fn open(
        servers: &Servers,
        options: &RedisOptions,
        unavailable: impl Fn(redis::RedisError) -> StoreError,
        name: &str,
    ) -> Result<Connection, StoreError> {
        let config =
            |e: redis::RedisError| StoreError::Config(format!("bad Redis URL {name}: {e}"));
        let limit = options.connection_timeout * 3;
        let in_time = |result: Result<RedisResult<Connection>, _>| match result {
            Ok(result) => result.map_err(&unavailable),
            Err(_) => Err(StoreError::Unavailable {
                store: name.to_owned(),
                cause: Cause::from(format!("no connection within {limit:?}")),
            }),
        };
        match servers {
            Servers::Node(url) => {
                let client = Client::open(url.as_str()).map_err(config)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(options.connection_timeout))
                    .set_response_timeout(Some(options.response_timeout))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let connecting = async {
                    ConnectionManager::new_with_config(client, config)
                        .await
                        .map(Connection::Node)
                };
                in_time(tokio::time::timeout(limit, connecting).await)
            }
            Servers::Cluster(nodes) => {
                let client = ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(options.connection_timeout)
                    .response_timeout(options.response_timeout)
                    .build()
                    .map_err(config)?;
                let connecting =
                    async { client.get_async_connection().await.map(Connection::Cluster) };
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
        match self {
            Connection::Node(conn) => {
                let mut pipe = redis::pipe();
                for cmd in cmds {
                    pipe.add_command(cmd);
                }
                pipe.query_async(conn).await
            }
            Connection::Cluster(conn) => {
                let replies = cmds.iter().map(|cmd| {
                    let mut conn = conn.clone();
                    async move { cmd.query_async(&mut conn).await }
                });
                futures_util::future::try_join_all(replies).await
            }
        }
    }
}

/// Keep one subscription to `channel` alive, waking the waiters of each key
/// published on it. After every (re)connection all waiters re-read, since
/// messages sent while disconnected are lost.
///
/// On a cluster a `PUBLISH` reaches every node, so subscribing on any one
/// node is enough: the subscriber takes the seed nodes in turn, moving to
/// the next when its node goes away.
pub(super) fn subscriber(
    servers: &Servers,
    channel: String,
    waiters: Arc<Waiters>,
    connect_timeout: Duration,
    subscribed: tokio::sync::oneshot::Sender<()>,
) -> Result<impl Future<Output = ()> + Send + 'static, redis::RedisError> {
    let clients = match servers {
        Servers::Node(url) => vec![Client::open(url.as_str())?],
        Servers::Cluster(nodes) => nodes
            .iter()
            .map(|url| Client::open(url.as_str()))
            .collect::<RedisResult<_>>()?,
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
    let mut pause = Duration::from_millis(100);
    for client in clients.iter().cycle() {
        let connected = tokio::time::timeout(connect_timeout, client.get_async_pubsub()).await;
        if let Ok(Ok(mut pubsub)) = connected {
            if pubsub.subscribe(&channel).await.is_ok() {
                pause = Duration::from_millis(100);
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
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(url: &str) -> Target {
        parse(url, url).unwrap()
    }

    fn parse_err(url: &str) -> String {
        parse(url, url).unwrap_err().to_string()
    }

    #[test]
    fn a_single_server_url_passes_through_without_idem_options() {
        assert_eq!(
            parse_ok("redis://:pw@h:1/2?prefix=app1&protocol=resp3"),
            Target {
                servers: Servers::Node("redis://:pw@h:1/2?protocol=resp3".into()),
                prefix: Some("app1".into()),
                replicas: None,
            }
        );
        assert_eq!(
            parse_ok("redis://h").servers,
            Servers::Node("redis://h".into())
        );
    }

    #[test]
    fn a_cluster_url_becomes_one_url_per_seed_node_with_the_credentials() {
        assert_eq!(
            parse_ok("redis+cluster://u:p@a:7000,b:7001/?protocol=resp3&prefix=x%3Ay&replicas=1"),
            Target {
                servers: Servers::Cluster(vec![
                    "redis://u:p@a:7000/?protocol=resp3".into(),
                    "redis://u:p@b:7001/?protocol=resp3".into(),
                ]),
                prefix: Some("x:y".into()),
                replicas: Some(1),
            }
        );
        assert_eq!(
            parse_ok("rediss+cluster://a:1").servers,
            Servers::Cluster(vec!["rediss://a:1/".into()])
        );
    }

    #[test]
    fn unknown_options_are_refused_by_name() {
        let err = parse_err("redis://h/?prefix=a&prefx=b&db=3");
        assert!(err.contains(r#""prefx", "db""#), "{err}");
        assert!(err.contains("known: prefix=NAME"), "{err}");
    }

    #[test]
    fn cluster_urls_that_cannot_mean_anything_are_refused() {
        assert!(parse_err("redis+cluster://a:1/3").contains("only database 0"));
        assert!(parse_err("redis+cluster://a:1,,b:2").contains("empty seed node"));
        assert!(parse_err("redis://a:1,b:2").contains("redis+cluster://"));
        assert!(parse_err("redis://h/?prefix=%zz").contains("%-escape"));
        assert!(parse_err("redis://h/?replicas=all").contains("number of replicas"));
    }
}
