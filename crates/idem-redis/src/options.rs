//! How a [`RedisStore`](crate::RedisStore) is configured: its
//! [`RedisOptions`], and the URL naming the servers, which may carry
//! options of its own.
//!
//! The URL's query holds idem's own options (`prefix`, `replicas`, and
//! for `rediss://` the TLS files `ca`, `cert` and `key`) next to the one
//! redis-rs reads (`protocol`); any other name is refused, so a misspelt
//! option is an error rather than silently ignored.

use std::path::PathBuf;
use std::time::Duration;

use idem_runtime::audit::DEFAULT_AUDIT_RETENTION;
use idem_runtime::store::{BadOption, StoreError, UnknownOption};

/// How to connect a [`RedisStore`](crate::RedisStore).
#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub(super) prefix: String,
    pub(super) connection_timeout: Duration,
    pub(super) response_timeout: Duration,
    /// Replicas that must hold a write before it counts, and how long to
    /// wait for them.
    pub(super) replicas: Option<(u32, Duration)>,
    pub(super) audit_retention: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            prefix: "idem".into(),
            connection_timeout: Duration::from_secs(2),
            response_timeout: Duration::from_secs(5),
            replicas: None,
            audit_retention: DEFAULT_AUDIT_RETENTION,
        }
    }
}

impl RedisOptions {
    /// The prefix of every key idem writes (default `idem`); no braces.
    /// Stores with different prefixes share a server or cluster without
    /// seeing each other's records. The URL option `prefix=NAME` sets it.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long connecting may take before the operation fails (default
    /// 2 s).
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout;
        self
    }

    /// How long a reply may take before the operation fails (default 5 s).
    /// The transition may still have been applied; the caller treats the
    /// failure as ambiguous and does not run the tool.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Count a transition as done only once `replicas` replicas of the
    /// primary hold it (`WAIT`, sent with the script in one round trip),
    /// waiting at most `timeout` for them; fewer in time is a
    /// [`StoreError::Unavailable`], so no call runs on a claim a failover
    /// could lose. Off by default (`0`): Redis replicates asynchronously,
    /// and a failover may lose the last transitions the old primary
    /// acknowledged — a lost claim lets a duplicate run the call again.
    /// The URL option `replicas=N` sets this with a 1 s timeout.
    ///
    /// While a replica is missing, every write waits out `timeout` on its
    /// node's shared connection; keep it short.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = (replicas > 0).then_some((replicas, timeout));
        self
    }

    /// Keep audit events for `retention` (default
    /// [`DEFAULT_AUDIT_RETENTION`]): [`StoreExt::sweep`](idem_runtime::store::StoreExt::sweep) trims older ones,
    /// judged by the server's clock.
    pub fn audit_retention(mut self, retention: Duration) -> Self {
        self.audit_retention = retention;
        self
    }
}

/// What a Redis URL names: the servers and idem's options.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) servers: Servers,
    /// `?prefix=…`, when given.
    pub(super) prefix: Option<String>,
    /// `?replicas=N`, when given.
    pub(super) replicas: Option<u32>,
    /// The TLS files a `rediss://` URL names: `None` for a plain URL.
    pub(super) tls: Option<TlsFiles>,
    /// The (first) host the URL names, as written: the name a server's
    /// certificate must carry, for messages.
    pub(super) host: String,
}

/// The files of a TLS connection, as a `rediss://` URL names them; each
/// `None` when not given.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct TlsFiles {
    /// `?ca=PATH`: the certificate authorities trusted instead of the
    /// platform's (PEM).
    pub(super) ca: Option<PathBuf>,
    /// `?cert=PATH`: the client certificate (chain) for mutual TLS (PEM).
    pub(super) cert: Option<PathBuf>,
    /// `?key=PATH`: the client certificate's private key (PEM).
    pub(super) key: Option<PathBuf>,
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
const KNOWN_OPTIONS: &str =
    "prefix=NAME, replicas=N, protocol=resp2|resp3, and with rediss:// ca=PATH, cert=PATH, key=PATH";

/// Read `url` (which [`redact`](idem_runtime::store::redact)ed is `name`).
pub(super) fn parse(url: &str, name: &str) -> Result<Target, StoreError> {
    let invalid = |reason: &str| StoreError::InvalidUrl {
        store: name.to_owned(),
        reason: reason.into(),
    };
    if url.contains('#') {
        // redis-rs reads `#insecure` as "skip verifying the certificate".
        return Err(invalid(
            "idem always verifies TLS certificates, so the URL takes no #fragment (no #insecure); \
             for a server whose certificate a private CA signed, name that CA with ?ca=PATH",
        ));
    }
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut prefix = None;
    let mut replicas = None;
    let mut files = TlsFiles::default();
    let mut passed = Vec::new();
    let mut unknown = Vec::new();
    for param in query.split('&').filter(|p| !p.is_empty()) {
        let (option, value) = param.split_once('=').unwrap_or((param, ""));
        match option {
            "prefix" => prefix = Some(percent_decode(value, "prefix", name)?),
            "ca" => files.ca = Some(percent_decode(value, "ca", name)?.into()),
            "cert" => files.cert = Some(percent_decode(value, "cert", name)?.into()),
            "key" => files.key = Some(percent_decode(value, "key", name)?.into()),
            "replicas" => match value.parse() {
                Ok(n) => replicas = Some(n),
                Err(_) => {
                    return Err(BadOption {
                        store: name.to_owned(),
                        option: "replicas",
                        value: value.to_owned(),
                        expected: "a number of replicas",
                    }
                    .into())
                }
            },
            "protocol" => passed.push(param),
            _ => unknown.push(option.to_owned()),
        }
    }
    if !unknown.is_empty() {
        return Err(UnknownOption {
            store: name.to_owned(),
            backend: "Redis",
            options: unknown,
            known: KNOWN_OPTIONS,
        }
        .into());
    }
    let query = match passed.is_empty() {
        true => String::new(),
        false => format!("?{}", passed.join("&")),
    };
    let (scheme, rest) = base.split_once("://").unwrap_or((base, ""));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let tls = match scheme {
        "rediss" | "rediss+cluster" => Some(files),
        _ if files != TlsFiles::default() => {
            return Err(invalid(
                "ca=, cert= and key= are TLS options: write rediss:// (or rediss+cluster://) to connect with TLS",
            ))
        }
        _ => None,
    };
    if let Some(files) = &tls {
        if files.cert.is_some() != files.key.is_some() {
            return Err(invalid(
                "a client certificate needs its key: write both ?cert=PATH and &key=PATH",
            ));
        }
    }
    let hosts = authority
        .rsplit_once('@')
        .map_or(authority, |(_, hosts)| hosts);
    let first = hosts.split(',').next().unwrap_or_default();
    let host = match first.strip_prefix('[') {
        // An IPv6 address: `[::1]:6379`.
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => first.split(':').next().unwrap_or_default(),
    }
    .to_owned();
    let servers = match scheme {
        "redis+cluster" | "rediss+cluster" => {
            if !matches!(path, "" | "0") {
                return Err(invalid(
                    "a Redis Cluster has only database 0, so the URL names no other",
                ));
            }
            let node_scheme = &scheme[..scheme.len() - "+cluster".len()];
            let (user, hosts) = match authority.rsplit_once('@') {
                Some((user, hosts)) => (format!("{user}@"), hosts),
                None => (String::new(), authority),
            };
            let mut nodes = Vec::new();
            for host in hosts.split(',') {
                if host.is_empty() {
                    return Err(invalid(
                        "the URL lists an empty seed node; write redis+cluster://HOST:PORT[,HOST:PORT…]",
                    ));
                }
                nodes.push(format!("{node_scheme}://{user}{host}/{query}"));
            }
            Servers::Cluster(nodes)
        }
        _ if authority.contains(',') => {
            return Err(invalid(
                "the URL names several servers; for a Redis Cluster write redis+cluster://HOST:PORT[,HOST:PORT…]",
            ))
        }
        _ => Servers::Node(format!("{base}{query}")),
    };
    Ok(Target {
        servers,
        prefix,
        replicas,
        tls,
        host,
    })
}

/// `text`, the value of `option`, with its `%XX` escapes decoded. A `%`
/// not followed by two hex digits is refused: percent-encoding's decoder
/// would keep it as it is, and a path read otherwise than written is
/// worse than an error.
fn percent_decode(text: &str, option: &'static str, name: &str) -> Result<String, StoreError> {
    let well_formed = text.split('%').skip(1).all(|after| {
        after
            .get(..2)
            .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
    });
    let decoded = match well_formed {
        true => percent_encoding::percent_decode_str(text)
            .decode_utf8()
            .ok(),
        false => None,
    };
    decoded.map(|text| text.into_owned()).ok_or_else(|| {
        BadOption {
            store: name.to_owned(),
            option,
            value: text.to_owned(),
            expected:
                "a value with well-formed %-escapes (% and two hex digits, decoding to UTF-8)",
        }
        .into()
    })
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
                tls: None,
                host: "h".into(),
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
                tls: None,
                host: "a".into(),
            }
        );
        assert_eq!(
            parse_ok("rediss+cluster://a:1").servers,
            Servers::Cluster(vec!["rediss://a:1/".into()])
        );
    }

    #[test]
    fn a_tls_url_names_its_files_and_keeps_them_from_the_driver() {
        let target = parse_ok("rediss://:pw@cache:6380/0?ca=/etc/ca.pem&cert=/c%20d.pem&key=k.pem");
        assert_eq!(
            target.servers,
            Servers::Node("rediss://:pw@cache:6380/0".into())
        );
        assert_eq!(
            target.tls,
            Some(TlsFiles {
                ca: Some("/etc/ca.pem".into()),
                cert: Some("/c d.pem".into()),
                key: Some("k.pem".into()),
            })
        );
        assert_eq!(target.host, "cache");
        let cluster = parse_ok("rediss+cluster://u:p@[::1]:7000,b:7001?ca=ca.pem");
        assert_eq!(
            cluster.servers,
            Servers::Cluster(vec![
                "rediss://u:p@[::1]:7000/".into(),
                "rediss://u:p@b:7001/".into()
            ])
        );
        assert_eq!(cluster.host, "::1");
        assert_eq!(parse_ok("rediss://h").tls, Some(TlsFiles::default()));
    }

    #[test]
    fn tls_options_that_cannot_be_honoured_are_refused() {
        assert!(parse_err("redis://h/?ca=ca.pem").contains("write rediss://"));
        assert!(parse_err("rediss://h/?cert=c.pem").contains("needs its key"));
        assert!(parse_err("rediss://h/?key=k.pem").contains("needs its key"));
        assert!(parse_err("rediss://h/#insecure").contains("always verifies"));
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

    #[test]
    fn option_values_are_percent_decoded_and_bad_escapes_refused() {
        let target = parse_ok("rediss://h/?prefix=app%2F1&ca=/etc/my%20ca.pem");
        assert_eq!(target.prefix.as_deref(), Some("app/1"));
        let ca = target.tls.and_then(|files| files.ca);
        assert_eq!(ca, Some("/etc/my ca.pem".into()));
        for bad in ["%4", "%", "a%g1", "%+1", "%ff"] {
            let err = parse_err(&format!("redis://h/?prefix={bad}"));
            assert!(err.contains("%-escape"), "{bad}: {err}");
        }
    }
}
