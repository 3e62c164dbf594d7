//! The Redis store, for many workers on many machines.
//!
//! # How it works
//!
//! * Each transition is one Lua script (`store/redis/*.lua`), so it is one
//!   round trip and atomic: claim, checkpoint, complete, release, replace,
//!   get. The scripts are loaded when the store connects, so a call is one
//!   `EVALSHA`. The layout of a record's hash is described at the top of
//!   `store/redis/common.lua`.
//! * A record is a hash under `PREFIX:{SLOT}:r:KEY`, where `SLOT` is the
//!   first three hex digits of the key: a record, the fence counter of its
//!   slot (`PREFIX:{SLOT}:fence`) and the index of its slot
//!   (`PREFIX:{SLOT}:keys`) share a hash tag, so every script touches keys
//!   of one Redis Cluster slot. The 4,096 counters are never deleted, so a
//!   fence is never handed out twice for a key, even after the key was
//!   released or expired.
//! * [`Store::scan`] pages through the slots' indexes — sorted sets of the
//!   keys of their records, kept by the scripts that create and delete
//!   records — in key order, the cursor being the last key returned. Unlike
//!   `SCAN`, which may return a key twice when the server resizes its
//!   table between two calls, this returns every record present for the
//!   whole scan exactly once, and reads no key of other data sharing the
//!   server. A record that lapses is deleted by Redis but stays in its
//!   index until a claim creating a record next to it drops it (scans skip
//!   it): in the steady state about a quarter of an index is such keys.
//! * Times come from the server's clock (`TIME` inside the scripts), never
//!   the worker's. A completed record's retention is the key's TTL
//!   (`PEXPIREAT`); the lease is a field of the hash — key expiry never
//!   doubles as the lease, and an in-flight record has no TTL (it is never
//!   swept). A record awaiting approval lapses the same way. Redis deletes
//!   expired records itself, so [`Store::sweep`] has nothing to do and
//!   returns 0.
//! * The audit log is a stream per slot, `PREFIX:{SLOT}:audit` (see the top
//!   of `store/redis/audit.lua`), beside the slot's records, so the replace
//!   script appends an operator's event in the same script as its swap.
//!   An event's `seq` comes from a counter per slot, so it grows with the
//!   appends to one slot, not across them. Events are read oldest first by
//!   stream id, which is the event's `at` unless an event with a later
//!   `at` was appended to the slot before it; a read for one key reads its
//!   slot, a read of every key merges the 4,096 streams (pipelined, 512
//!   slots a round trip). [`Store::sweep`] trims each stream to the events
//!   younger than the retention (`XTRIM MINID`, by the server's clock),
//!   returning 0 still.
//! * Waiters ([`Store::wait`], [`Store::wait_for_decision`]) are woken by
//!   pub/sub: the complete, release and replace scripts (an approval or a
//!   denial is a replace) publish the key on `PREFIX:done`, and one
//!   subscriber connection per store, in every process, wakes the local
//!   waiters of that key, typically within a millisecond. As a safety net
//!   (a message lost while the subscriber reconnects), waiters also re-read
//!   their record with a back-off from 5 ms to [`SAFETY_POLL`].
//! * The URL chooses one server (`redis://`, `rediss://`) or a Redis
//!   Cluster (`redis+cluster://host:port[,host:port…]`, see below), and
//!   may carry `?prefix=NAME` (the `PREFIX` above, default `idem`: stores
//!   with different prefixes share a server without seeing each other's
//!   records), `?replicas=N` ([`RedisOptions::wait_for_replicas`]) and
//!   redis-rs' `?protocol=resp3`. Other options are refused by name.
//! * A store that cannot be reached fails every operation with
//!   [`StoreError::Unavailable`] naming the URL (without its password) and
//!   the cause. On one server, connections are never retried *with* a
//!   request, so a transition is never applied twice (on a cluster, see
//!   below).
//!
//! # Redis Cluster
//!
//! `redis+cluster://[user:password@]host:port[,host:port…]` lists seed
//! nodes; redis-rs' cluster client learns the others and routes each
//! command to the primary of its key's slot.
//!
//! * Every script's keys share one hash tag (`{SLOT}`), so each transition
//!   is still one atomic script on one node. A scan sends its per-slot
//!   commands each to its own node, at once, rather than as one pipeline.
//! * A `PUBLISH` reaches every node of a cluster, so the subscriber that
//!   wakes waiters listens on one seed node, moving to the next when that
//!   one goes away; waiters re-read at least every [`SAFETY_POLL`] anyway.
//! * The cluster client follows `MOVED`/`ASK`, waits out `TRYAGAIN` and
//!   `CLUSTERDOWN`, and resends a request whose connection dropped, all
//!   within the response timeout. A resent script may be applied twice,
//!   which never runs a call twice: a repeated claim finds its own record
//!   in flight (the call waits out the lease, then takes it over, nothing
//!   having run), a repeated checkpoint or renewal changes nothing, and a
//!   repeated completion, release or replacement is refused as a stale
//!   fence (the first one stands; the caller sees an error).
//! * The scripts read the time of the node that runs them: keep the
//!   nodes' clocks in step (NTP), as for several workers.
//! * A primary that dies takes its slots' records with it until a replica
//!   takes over, and calls on those slots fail closed meanwhile. Writes the
//!   old primary acknowledged but had not yet replicated are lost in the
//!   takeover; with [`RedisOptions::wait_for_replicas`] no transition
//!   counts before a replica holds it.
//! * Data of schema version 1 (which never ran on a cluster) is migrated on
//!   a single server only; a cluster holding it refuses to connect.
//!
//! # What the server must promise
//!
//! The guarantees above hold only while Redis keeps what it was given:
//!
//! * `maxmemory-policy noeviction` (or no `maxmemory`). Under an
//!   `allkeys-*` policy Redis may evict an in-flight record (its call can
//!   then run again), a fence counter (a fence can then be handed out
//!   twice) or an index (scans then miss its slot's records); under a
//!   `volatile-*` policy it may evict a completed record before its
//!   retention ends (a duplicate then runs again). With
//!   `noeviction` a full server refuses the write, which idem reports as
//!   [`StoreError::Full`] and nothing runs.
//! * Persistence (`appendonly yes`) if records must survive a restart of
//!   the server; `appendfsync everysec` may lose the last second of claims
//!   on a crash of the machine. Likewise a failover to an asynchronously
//!   replicated replica may lose the last writes the old primary
//!   acknowledged.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use redis::{Script, Value as RedisValue};
use serde_json::Value;

use connection::Connection;

use super::redact::redact;
use super::wait_for::WaitFor;
use super::waiters::Waiters;
use super::{
    Cause, ClaimOutcome, ClaimRequest, Expected, ExpectedState, FenceHolder, ScanPage, Store,
    StoreError, Takeover,
};
use crate::audit::{self, AuditEvent, AuditPage, AuditQuery, DEFAULT_AUDIT_RETENTION};
use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::record::{CallInfo, CorruptRecord, Fence, Outcome, Record, RecordState};

mod connection;

/// The data layout this build writes and understands, kept under
/// `PREFIX:schema`.
///
/// Version 2 (idem 0.2) adds records awaiting approval, call details, the
/// worker and operator audit to the record's hash, and the per-slot
/// indexes that scans page through. Data of version 1 is migrated when a
/// version 2 store connects to it: its records are indexed (they read
/// unchanged, lacking only what version 1 did not record), then the version
/// is set to 2, so a version 1 build refuses to connect rather than
/// misread a record awaiting approval. Records that version 1 workers still
/// connected at that moment create afterwards are not indexed: claims and
/// reads find them, scans do not, so stop version 1 workers before the
/// first version 2 store connects.
pub const SCHEMA_VERSION: u32 = 2;

/// The oldest data layout a store connected read-only
/// ([`RedisStore::connect_read_only`]) reads without migrating it: version
/// 1 kept no indexes, so scans would miss every record. Older data is
/// refused with [`StoreError::SchemaTooOld`].
pub const OLDEST_READABLE: u32 = 2;

/// How many slots (hash tags) the records are spread over: keys are hex,
/// and a slot is a key's first three digits.
const SLOTS: u16 = 4096;

/// How many slots' index sizes one round trip of a scan counts.
const COUNT_WINDOW: u16 = 512;

/// The most records one scan page reads.
const MAX_SCAN_PAGE: usize = 10_000;

/// The longest a waiter goes without re-reading its record when no
/// notification arrives.
pub const SAFETY_POLL: Duration = Duration::from_secs(1);

macro_rules! script {
    ($file:literal) => {
        concat!(
            include_str!("common.lua"),
            include_str!($file)
        )
    };
}

/// A script that appends to the audit log: [`script!`] with
/// `redis/audit.lua` between the shared part and the script's own.
macro_rules! audited_script {
    ($file:literal) => {
        concat!(
            include_str!("common.lua"),
            include_str!("audit.lua"),
            include_str!($file)
        )
    };
}

/// How to connect a [`RedisStore`].
#[derive(Debug, Clone)]
pub struct RedisOptions {
    prefix: String,
    connection_timeout: Duration,
    response_timeout: Duration,
    /// Replicas that must hold a write before it counts, and how long to
    /// wait for them.
    replicas: Option<(u32, Duration)>,
    audit_retention: Duration,
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
    /// [`DEFAULT_AUDIT_RETENTION`]): [`Store::sweep`] trims older ones,
    /// judged by the server's clock.
    pub fn audit_retention(mut self, retention: Duration) -> Self {
        self.audit_retention = retention;
        self
    }
}

/// Records in Redis. See the [module docs](self).
pub struct RedisStore {
    /// Shared by every operation; `None` once closed.
    conn: Mutex<Option<Connection>>,
    scripts: Arc<Scripts>,
    name: String,
    prefix: String,
    channel: String,
    waiters: Arc<Waiters>,
    subscriber: tokio::task::JoinHandle<()>,
    replicas: Option<(u32, Duration)>,
    audit_retention: Duration,
    /// Connected with [`RedisStore::connect_read_only`]: only reads run.
    read_only: bool,
    /// The layout version found on connecting (`None`: this store wrote
    /// the first).
    schema_found: Option<u32>,
}

struct Scripts {
    claim: Script,
    checkpoint: Script,
    renew: Script,
    complete: Script,
    release: Script,
    replace: Script,
    get: Script,
    append_audit: Script,
}

impl Scripts {
    fn new() -> Scripts {
        Scripts {
            claim: Script::new(script!("claim.lua")),
            checkpoint: Script::new(script!("checkpoint.lua")),
            renew: Script::new(script!("renew.lua")),
            complete: Script::new(script!("complete.lua")),
            release: Script::new(script!("release.lua")),
            replace: Script::new(audited_script!("replace.lua")),
            get: Script::new(script!("get.lua")),
            append_audit: Script::new(audited_script!("append_audit.lua")),
        }
    }

    fn all(&self) -> [&Script; 8] {
        [
            &self.claim,
            &self.checkpoint,
            &self.renew,
            &self.complete,
            &self.release,
            &self.replace,
            &self.get,
            &self.append_audit,
        ]
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("store", &self.name)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.subscriber.abort();
    }
}

impl RedisStore {
    /// Connect to `url` with default options: one server,
    /// `redis://[user:password@]host[:port][/db][?prefix=NAME]`, or a
    /// cluster, `redis+cluster://[user:password@]host:port[,host:port…][?prefix=NAME]`
    /// (see the [module docs](self)).
    pub async fn connect(url: &str) -> Result<RedisStore, StoreError> {
        Self::connect_with(url, RedisOptions::default()).await
    }

    /// Connect to `url`, check the data layout version, load the scripts and
    /// start the subscriber that wakes waiters. Options in the URL's query
    /// (`prefix`, `replicas`) override those of `options`.
    ///
    /// Data written by an older idem is migrated first (see
    /// [`SCHEMA_VERSION`]; on a single server only).
    ///
    /// Fails with [`StoreError::Unavailable`] when the server cannot be
    /// reached, [`StoreError::SchemaTooNew`] when a newer idem wrote the
    /// data, and [`StoreError::Config`] for a malformed URL or prefix or an
    /// unknown URL option.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<RedisStore, StoreError> {
        Self::open(url, options, false).await
    }

    /// Connect to `url` for reading only, with default options. See
    /// [`RedisStore::connect_read_only_with`].
    pub async fn connect_read_only(url: &str) -> Result<RedisStore, StoreError> {
        Self::connect_read_only_with(url, RedisOptions::default()).await
    }

    /// Connect to `url` for reading only: the layout version under
    /// `PREFIX:schema` is read, never written or migrated, and every
    /// operation but reads ([`Store::get`], [`Store::scan`],
    /// [`Store::wait`], [`Store::now`]) fails with [`StoreError::ReadOnly`]
    /// before it reaches the server. Only idem's scripts are loaded into
    /// the server's script cache, which holds no data.
    ///
    /// Every store connected read-write writes the layout version first,
    /// so a prefix without it was never an idem store's:
    /// [`StoreError::NotAnIdemStore`]. Data older than [`OLDEST_READABLE`]
    /// is [`StoreError::SchemaTooOld`], newer than [`SCHEMA_VERSION`]
    /// [`StoreError::SchemaTooNew`]; otherwise it fails as
    /// [`RedisStore::connect_with`] does.
    pub async fn connect_read_only_with(
        url: &str,
        options: RedisOptions,
    ) -> Result<RedisStore, StoreError> {
        Self::open(url, options, true).await
    }

    /// Whether this store was connected read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The layout version the data had when this store connected: `None`
    /// when this store wrote the first, an older version than
    /// [`SCHEMA_VERSION`] when a store connected read-write migrated it (a
    /// store connected read-only never does).
    pub fn schema_found(&self) -> Option<u32> {
        self.schema_found
    }

    async fn open(
        url: &str,
        options: RedisOptions,
        read_only: bool,
    ) -> Result<RedisStore, StoreError> {
        let name = redact(url);
        let target = connection::parse(url, &name)?;
        let mut options = match target.prefix {
            Some(prefix) => options.prefix(prefix),
            None => options,
        };
        if let Some(replicas) = target.replicas {
            options = options.wait_for_replicas(replicas, Duration::from_secs(1));
        }
        if options.prefix.is_empty() || options.prefix.contains(['{', '}']) {
            return Err(StoreError::Config(format!(
                "Redis key prefix {:?} must be non-empty and contain no braces",
                options.prefix
            )));
        }
        let unavailable = |e: redis::RedisError| StoreError::Unavailable {
            store: name.clone(),
            cause: Cause::from_error(e),
        };
        let mut conn = Connection::open(&target.servers, &options, unavailable, &name).await?;

        let schema_key = format!("{}:schema", options.prefix);
        let (found, schema_found) = match read_only {
            true => {
                let found: Option<String> = conn
                    .query(redis::cmd("GET").arg(&schema_key))
                    .await
                    .map_err(unavailable)?;
                let Some(found) = found else {
                    return Err(StoreError::NotAnIdemStore {
                        store: name,
                        cause: format!("there is no {schema_key} key").into(),
                    });
                };
                let version = found.parse::<u32>().ok();
                if let Some(v) = version.filter(|&v| v < OLDEST_READABLE) {
                    return Err(StoreError::SchemaTooOld {
                        store: name,
                        found: v,
                        oldest_readable: OLDEST_READABLE,
                    });
                }
                (found, version)
            }
            false => {
                let claimed =
                    Self::claim_layout(&mut conn, &options.prefix, &schema_key, &name).await?;
                // A store that existed before this build may hold unknown
                // outcomes written with a key TTL.
                keep_unknown_outcomes(&mut conn, &options.prefix, claimed.1.is_none())
                    .await
                    .map_err(unavailable)?;
                claimed
            }
        };
        match found.parse::<u32>() {
            // A store connected read-only reads older layouts it can.
            Ok(v) if v == SCHEMA_VERSION || (read_only && (OLDEST_READABLE..SCHEMA_VERSION).contains(&v)) => {}
            Ok(v) if v > SCHEMA_VERSION => {
                return Err(StoreError::SchemaTooNew {
                    store: name,
                    found: v,
                    supported: SCHEMA_VERSION,
                })
            }
            _ => {
                return Err(StoreError::Unavailable {
                    store: name,
                    cause: format!(
                        "{schema_key} holds {found:?}, not a schema version this idem knows ({SCHEMA_VERSION})"
                    )
                    .into(),
                })
            }
        }

        let scripts = Arc::new(Scripts::new());
        for script in scripts.all() {
            conn.load(script).await.map_err(unavailable)?;
        }

        let waiters = Arc::new(Waiters::new(SAFETY_POLL));
        let channel = format!("{}:done", options.prefix);
        let (subscribed, ready) = tokio::sync::oneshot::channel();
        let subscriber = tokio::spawn(
            connection::subscriber(
                &target.servers,
                channel.clone(),
                waiters.clone(),
                options.connection_timeout,
                subscribed,
            )
            .map_err(|e| StoreError::Config(format!("bad Redis URL {name}: {e}")))?,
        );
        // Waiters poll as a safety net, so a slow subscriber is no error;
        // but give it a moment so the first waiters are woken promptly.
        let _ = tokio::time::timeout(options.connection_timeout, ready).await;

        Ok(RedisStore {
            conn: Mutex::new(Some(conn)),
            scripts,
            name,
            prefix: options.prefix,
            channel,
            waiters,
            subscriber,
            replicas: options.replicas,
            audit_retention: options.audit_retention,
            read_only,
            schema_found,
        })
    }

    /// Write this build's layout version if the store is new, migrate data
    /// of version 1, and return the version then there (checked by the
    /// caller) with the one found first (`None`: written now).
    async fn claim_layout(
        conn: &mut Connection,
        prefix: &str,
        schema_key: &str,
        name: &str,
    ) -> Result<(String, Option<u32>), StoreError> {
        let unavailable = |e: redis::RedisError| StoreError::Unavailable {
            store: name.to_owned(),
            cause: Cause::from_error(e),
        };
        // Claim the layout for this version if the store is new, then read
        // what was and what is there: one round trip.
        let (before, mut found): (Option<String>, String) = conn
            .pipeline(
                redis::pipe()
                    .cmd("GET")
                    .arg(schema_key)
                    .cmd("SET")
                    .arg(schema_key)
                    .arg(SCHEMA_VERSION)
                    .arg("NX")
                    .ignore()
                    .cmd("GET")
                    .arg(schema_key),
            )
            .await
            .map_err(unavailable)?;
        if found == "1" {
            found = match conn {
                Connection::Node(node) => migrate_from_1(node, prefix, schema_key)
                    .await
                    .map_err(unavailable)?,
                // Version 1 never ran on a cluster (it could not connect
                // to one), so its data is there only if copied in.
                Connection::Cluster(_) => {
                    return Err(StoreError::Unavailable {
                        store: name.to_owned(),
                        cause: format!(
                            "{schema_key} says schema version 1, which idem migrates on a single server only; \
                             migrate it there (connect once to a server holding a copy) before moving the data to a cluster"
                        )
                        .into(),
                    })
                }
            };
        }
        Ok((found, before.and_then(|v| v.parse().ok())))
    }

    /// [`StoreError::ReadOnly`] on a store connected read-only (after
    /// [`StoreError::Closed`] once closed).
    fn writable(&self) -> Result<(), StoreError> {
        self.conn()?;
        match self.read_only {
            false => Ok(()),
            true => Err(StoreError::ReadOnly {
                store: self.name.clone(),
                cause:
                    "it was connected read-only, for reading; connect it read-write to change it"
                        .into(),
            }),
        }
    }

    /// A handle on the shared connection, or [`StoreError::Closed`].
    fn conn(&self) -> Result<Connection, StoreError> {
        self.conn
            .lock()
            .expect("not poisoned")
            .clone()
            .ok_or_else(|| StoreError::Closed {
                store: self.name.clone(),
            })
    }

    /// The Redis key holding the record of `key`.
    pub fn record_key(&self, key: &IdempotencyKey) -> String {
        format!("{}:{{{}}}:r:{}", self.prefix, slot(key), key.as_str())
    }

    fn fence_key(&self, key: &IdempotencyKey) -> String {
        format!("{}:{{{}}}:fence", self.prefix, slot(key))
    }

    /// The index of the slot of `key`.
    fn index_key(&self, key: &IdempotencyKey) -> String {
        index_key(&self.prefix, slot(key))
    }

    /// The typed error for a Redis failure; `e` stays its source.
    fn unavailable(&self, e: redis::RedisError) -> StoreError {
        let store = self.name.clone();
        let read_only = e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly);
        let cause = Cause::from_error(e);
        if read_only {
            StoreError::ReadOnly { store, cause }
        } else if cause.contains("OOM") {
            StoreError::Full { store, cause }
        } else {
            StoreError::Unavailable { store, cause }
        }
    }

    async fn run(
        &self,
        script: &Script,
        key: &IdempotencyKey,
        extra_keys: &[String],
        args: &[&[u8]],
    ) -> Result<Vec<RedisValue>, StoreError> {
        let writes = !std::ptr::eq(script, &self.scripts.get);
        if writes {
            self.writable()?;
        }
        let mut conn = self.conn()?;
        let replicas = self.replicas.filter(|_| writes);
        let Some((replicas, timeout)) = replicas else {
            let mut invocation = script.key(self.record_key(key));
            for k in extra_keys {
                invocation.key(k);
            }
            for a in args {
                invocation.arg(*a);
            }
            return conn
                .invoke(&invocation)
                .await
                .map_err(|e| self.unavailable(e));
        };
        // The script and WAIT in one pipeline: on a cluster it goes whole
        // to the primary of the record's slot, on one connection, so WAIT
        // covers the script's writes.
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(1 + extra_keys.len())
            .arg(self.record_key(key))
            .arg(extra_keys)
            .arg(args)
            .cmd("WAIT")
            .arg(replicas)
            .arg(super::span_millis(timeout));
        let mut sent = conn.pipeline(&pipe).await;
        if matches!(&sent, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
        {
            // A node that never saw the script (a replica promoted since
            // it was loaded, say): load it there and send again.
            conn.load(script).await.map_err(|e| self.unavailable(e))?;
            sent = conn.pipeline(&pipe).await;
        }
        let (reply, acknowledged): (Vec<RedisValue>, u32) =
            sent.map_err(|e| self.unavailable(e))?;
        if acknowledged < replicas {
            return Err(StoreError::Unavailable {
                store: self.name.clone(),
                cause: format!(
                    "{acknowledged} of the {replicas} replicas required acknowledged the write within {timeout:?}; \
                     it may be lost in a failover, so it does not count"
                )
                .into(),
            });
        }
        Ok(reply)
    }

    /// Run `cmds` (see [`Connection::batch`]), each reply read as a `T`.
    async fn batch<T: redis::FromRedisValue>(
        &self,
        conn: &mut Connection,
        cmds: Vec<redis::Cmd>,
    ) -> Result<Vec<T>, StoreError> {
        let replies = conn.batch(cmds).await.map_err(|e| self.unavailable(e))?;
        replies
            .into_iter()
            .map(redis::from_redis_value)
            .collect::<Result<_, _>>()
            .map_err(|e| self.unavailable(e.into()))
    }

    /// Turn a script's rejection (`stale …`, `corrupt …`) into an error.
    fn rejection(&self, key: &IdempotencyKey, fence: Fence, reply: &[RedisValue]) -> StoreError {
        let word = |i: usize| reply.get(i).and_then(text).unwrap_or_default();
        match word(0).as_str() {
            "stale" => {
                let holder = word(2).parse().map(Fence);
                let current = match (word(1).as_str(), holder) {
                    ("in_flight", Ok(f)) => FenceHolder::InFlight(f),
                    ("awaiting_approval", Ok(f)) => FenceHolder::AwaitingApproval(f),
                    ("completed", Ok(f)) => FenceHolder::Completed(f),
                    _ => FenceHolder::Nobody,
                };
                StoreError::StaleFence {
                    key: key.clone(),
                    given: fence,
                    current,
                }
            }
            "corrupt" => StoreError::Corrupt(CorruptRecord {
                key: key.as_str().to_owned(),
                detail: word(1),
            }),
            other => self.protocol(other),
        }
    }

    fn protocol(&self, what: &str) -> StoreError {
        StoreError::Unavailable {
            store: self.name.clone(),
            cause: format!("unexpected reply from an idem script: {what:?}").into(),
        }
    }

    async fn read(&self, key: &IdempotencyKey) -> Result<(Option<Record>, Timestamp), StoreError> {
        let reply = self.run(&self.scripts.get, key, &[], &[]).await?;
        let now = reply
            .first()
            .and_then(number)
            .map(Timestamp)
            .ok_or_else(|| self.protocol("get without a time"))?;
        let record = match reply.get(1) {
            Some(RedisValue::Array(flat)) if flat.is_empty() => None,
            Some(RedisValue::Array(flat)) => Some(decode(key, flat)?),
            _ => return Err(self.protocol("get without fields")),
        };
        Ok((record.filter(|r| !r.is_expired(now)), now))
    }
}

/// The hash slot tag of `key`: its first three hex digits (4,096 slots).
fn slot(key: &IdempotencyKey) -> &str {
    &key.as_str()[..3]
}

/// The index of the records of `slot` (three hex digits).
fn index_key(prefix: &str, slot: &str) -> String {
    format!("{prefix}:{{{slot}}}:keys")
}

/// Where a scan resumes: the slot to read first, and the last key returned
/// in it (`None`: from the slot's start). A cursor is that key, or the name
/// of the slot (three hex digits) when the previous page ended with a whole
/// slot.
fn parse_cursor(cursor: &str) -> Option<(u16, Option<&str>)> {
    let slot = cursor.get(..3)?;
    if !slot.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let slot = u16::from_str_radix(slot, 16).ok()?;
    match cursor.len() {
        3 => Some((slot, None)),
        _ => IdempotencyKey::parse(cursor)
            .ok()
            .map(|_| (slot, Some(cursor))),
    }
}

/// `text` as a literal in a `SCAN MATCH` pattern.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The slot and key of a record's Redis key `PREFIX:{SLOT}:r:KEY`, or
/// `None` for any other key.
fn parse_record_key<'a>(prefix: &str, redis_key: &'a str) -> Option<(&'a str, &'a str)> {
    let rest = redis_key.strip_prefix(prefix)?.strip_prefix(":{")?;
    let (slot, key) = rest.split_once("}:r:")?;
    (slot.len() == 3 && key.starts_with(slot) && IdempotencyKey::parse(key).is_ok())
        .then_some((slot, key))
}

/// Migrate data of schema version 1 to 2: index every record (version 1
/// kept no indexes), then set the version, unless another store did it
/// meanwhile. Returns the version then found. Several stores connecting at
/// once may all do it; indexing a key twice changes nothing.
async fn migrate_from_1(
    conn: &mut redis::aio::ConnectionManager,
    prefix: &str,
    schema_key: &str,
) -> redis::RedisResult<String> {
    let pattern = format!("{}:{{???}}:r:*", glob_escape(prefix));
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        let mut pipe = redis::pipe();
        for redis_key in &keys {
            if let Some((slot, key)) = parse_record_key(prefix, redis_key) {
                pipe.cmd("ZADD")
                    .arg(index_key(prefix, slot))
                    .arg(0)
                    .arg(key)
                    .ignore();
            }
        }
        if !keys.is_empty() {
            pipe.query_async::<()>(conn).await?;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Script::new(
        "if redis.call('GET', KEYS[1]) == '1' then redis.call('SET', KEYS[1], ARGV[1]) end \
         return redis.call('GET', KEYS[1])",
    )
    .key(schema_key)
    .arg(SCHEMA_VERSION)
    .invoke_async(conn)
    .await
}

/// Once per store: give every unknown outcome stored before idem 0.3 (with
/// its record's retention as the key's TTL, so that Redis would delete it
/// and let the call run again) the form unknown outcomes have now, kept
/// until a person settles them (`keep_unknown.lua`). `PREFIX:unknown_kept`
/// says it was done; a worker that finds another doing it (its lock,
/// `PREFIX:unknown_kept:lock`, held for at most a minute) leaves it to
/// that one; `created` (this connect created the store) only marks it
/// done. Each script looks at one slot's next 1,000 records, so no call
/// waits long behind it.
async fn keep_unknown_outcomes(
    conn: &mut Connection,
    prefix: &str,
    created: bool,
) -> redis::RedisResult<()> {
    const BATCH: usize = 1000;
    let done = format!("{prefix}:unknown_kept");
    let lock = format!("{done}:lock");
    if created {
        // A store this build created holds nothing to fix.
        return conn.query(redis::cmd("SET").arg(&done).arg(1)).await;
    }
    let already: Option<String> = conn.query(redis::cmd("GET").arg(&done)).await?;
    if already.is_some() {
        return Ok(());
    }
    let locked: Option<String> = conn
        .query(
            redis::cmd("SET")
                .arg(&lock)
                .arg(1)
                .arg("NX")
                .arg("PX")
                .arg(60_000),
        )
        .await?;
    if locked.is_none() {
        return Ok(());
    }
    let script = include_str!("keep_unknown.lua");
    // (slot, the member to resume after) of every slot not yet done.
    let mut pending: Vec<(String, String)> = (0..SLOTS)
        .map(|s| (format!("{s:03x}"), String::new()))
        .collect();
    while !pending.is_empty() {
        let mut next = Vec::new();
        for window in pending.chunks(usize::from(COUNT_WINDOW)) {
            let cmds = window
                .iter()
                .map(|(slot, after)| {
                    let mut cmd = redis::cmd("EVAL");
                    cmd.arg(script)
                        .arg(1)
                        .arg(index_key(prefix, slot))
                        .arg(format!("{prefix}:{{{slot}}}:r:"))
                        .arg(after)
                        .arg(BATCH);
                    cmd
                })
                .collect();
            let replies = conn.batch(cmds).await?;
            for ((slot, _), reply) in window.iter().zip(replies) {
                match text(&reply) {
                    Some(last) if !last.is_empty() => next.push((slot.clone(), last)),
                    _ => {}
                }
            }
        }
        pending = next;
    }
    conn.query::<()>(redis::cmd("SET").arg(&done).arg(1))
        .await?;
    conn.query::<()>(redis::cmd("DEL").arg(&lock)).await?;
    Ok(())
}

fn text(v: &RedisValue) -> Option<String> {
    match v {
        RedisValue::BulkString(b) => String::from_utf8(b.clone()).ok(),
        RedisValue::SimpleString(s) => Some(s.clone()),
        RedisValue::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn number(v: &RedisValue) -> Option<u64> {
    text(v)?.parse().ok()
}

/// Decode a record from its hash fields (a flat `HGETALL` list). A missing
/// or malformed field is a [`CorruptRecord`].
fn decode(key: &IdempotencyKey, flat: &[RedisValue]) -> Result<Record, CorruptRecord> {
    let corrupt = |detail: String| CorruptRecord {
        key: key.as_str().to_owned(),
        detail,
    };
    let mut fields = BTreeMap::new();
    for pair in flat.chunks(2) {
        match pair {
            [k, v] => {
                let k = text(k).ok_or_else(|| corrupt("a field name is not text".into()))?;
                let v = text(v).ok_or_else(|| corrupt(format!("field {k} is not text")))?;
                fields.insert(k, v);
            }
            _ => return Err(corrupt("odd number of hash fields".into())),
        }
    }
    let field = |name: &str| {
        fields
            .get(name)
            .cloned()
            .ok_or_else(|| corrupt(format!("field {name} is missing")))
    };
    let time = |name: &str| -> Result<Timestamp, CorruptRecord> {
        field(name)?
            .parse()
            .map(Timestamp)
            .map_err(|e| corrupt(format!("field {name}: {e}")))
    };
    let fence = Fence(
        field("fence")?
            .parse()
            .map_err(|e| corrupt(format!("field fence: {e}")))?,
    );
    let state = match field("state")?.as_str() {
        "f" => RecordState::InFlight {
            fence,
            lease_until: time("lease")?,
        },
        "a" => RecordState::AwaitingApproval {
            fence,
            requested_at: time("req")?,
            expires_at: time("exp")?,
            message: field("msg")?,
        },
        "c" => RecordState::Completed {
            fence,
            outcome: serde_json::from_str::<Outcome>(&field("outcome")?)
                .map_err(|e| corrupt(format!("field outcome: {e}")))?,
            completed_at: time("done")?,
            expires_at: time("exp")?,
        },
        other => return Err(corrupt(format!("unknown state {other:?}"))),
    };
    let mut steps = BTreeMap::new();
    for (name, value) in &fields {
        if let Some(step) = name.strip_prefix("s:") {
            let value =
                serde_json::from_str(value).map_err(|e| corrupt(format!("step {step}: {e}")))?;
            steps.insert(step.to_owned(), value);
        }
    }
    // Fields that came with schema version 2: absent from older records.
    let info = match fields.get("info") {
        Some(text) => {
            serde_json::from_str(text).map_err(|e| corrupt(format!("field info: {e}")))?
        }
        None => CallInfo::default(),
    };
    let audit = match fields.get("audit") {
        Some(text) => {
            serde_json::from_str(text).map_err(|e| corrupt(format!("field audit: {e}")))?
        }
        None => Vec::new(),
    };
    Ok(Record {
        key: key.clone(),
        tool: field("tool")?,
        fingerprint: Fingerprint::new(field("fp")?),
        created_at: time("created")?,
        state,
        steps,
        info,
        worker: fields.get("worker").cloned(),
        audit,
    })
}

/// `value` as JSON text.
fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("a record's parts serialize")
}

/// The hash fields of `record` as [`decode`] reads them, but its fence
/// (which the replace script allocates).
fn encode(record: &Record) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = vec![
        ("tool".into(), record.tool.clone()),
        ("fp".into(), record.fingerprint.as_str().to_owned()),
        ("created".into(), record.created_at.0.to_string()),
    ];
    let mut field = |name: &str, value: String| fields.push((name.to_owned(), value));
    match &record.state {
        RecordState::InFlight { lease_until, .. } => {
            field("state", "f".into());
            field("lease", lease_until.0.to_string());
        }
        RecordState::AwaitingApproval {
            requested_at,
            expires_at,
            message,
            ..
        } => {
            field("state", "a".into());
            field("req", requested_at.0.to_string());
            field("exp", expires_at.0.to_string());
            field("msg", message.clone());
        }
        RecordState::Completed {
            outcome,
            completed_at,
            expires_at,
            ..
        } => {
            field("state", "c".into());
            field("outcome", json(outcome));
            field("done", completed_at.0.to_string());
            field("exp", expires_at.0.to_string());
        }
    }
    if !record.info.is_empty() {
        field("info", json(&record.info));
    }
    if let Some(worker) = &record.worker {
        field("worker", worker.clone());
    }
    if !record.audit.is_empty() {
        field("audit", json(&record.audit));
    }
    for (step, value) in &record.steps {
        field(&format!("s:{step}"), json(value));
    }
    fields
}

#[async_trait]
impl Store for RedisStore {
    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let lease = super::span_millis(req.lease).to_string();
        let info = match req.info.is_empty() {
            true => String::new(),
            false => json(&req.info),
        };
        let reply = self
            .run(
                &self.scripts.claim,
                req.key,
                &[self.fence_key(req.key), self.index_key(req.key)],
                &[
                    req.tool.as_bytes(),
                    req.fingerprint.as_str().as_bytes(),
                    if req.check_fingerprint { b"1" } else { b"0" },
                    lease.as_bytes(),
                    if req.worker.is_some() { b"1" } else { b"0" },
                    req.worker.unwrap_or_default().as_bytes(),
                    info.as_bytes(),
                    req.key.as_str().as_bytes(),
                ],
            )
            .await?;
        let word = |i: usize| reply.get(i).and_then(text).unwrap_or_default();
        let num = |i: usize| {
            reply
                .get(i)
                .and_then(number)
                .ok_or_else(|| self.protocol(&word(0)))
        };
        let flat = |i: usize| match reply.get(i) {
            Some(RedisValue::Array(flat)) => Ok(decode(req.key, flat)?),
            _ => Err(self.protocol(&word(0))),
        };
        match word(0).as_str() {
            "acquired" => Ok(ClaimOutcome::Acquired {
                fence: Fence(num(1)?),
                lease_until: Timestamp(num(2)?),
                steps: BTreeMap::new(),
                takeover: None,
            }),
            "taken_over" => Ok(ClaimOutcome::Acquired {
                fence: Fence(num(1)?),
                lease_until: Timestamp(num(2)?),
                takeover: Some(Takeover {
                    previous: Fence(num(3)?),
                }),
                steps: flat(4)?.steps,
            }),
            "approved" => Ok(ClaimOutcome::Acquired {
                fence: Fence(num(1)?),
                lease_until: Timestamp(num(2)?),
                takeover: None,
                steps: flat(3)?.steps,
            }),
            "awaiting" => Ok(ClaimOutcome::AwaitingApproval(Arc::new(flat(2)?))),
            "in_flight" => Ok(ClaimOutcome::InFlight {
                fence: Fence(num(1)?),
                lease_until: Timestamp(num(2)?),
            }),
            "completed" => Ok(ClaimOutcome::Completed(Arc::new(flat(2)?))),
            "reused" => Ok(ClaimOutcome::KeyReused {
                tool: word(1),
                fingerprint: Fingerprint::new(word(2)),
            }),
            "corrupt" => Err(self.rejection(req.key, Fence(0), &reply)),
            other => Err(self.protocol(other)),
        }
    }

    async fn checkpoint(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        step: &str,
        value: &Value,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let reply = self
            .run(
                &self.scripts.checkpoint,
                key,
                &[],
                &[
                    fence.0.to_string().as_bytes(),
                    step.as_bytes(),
                    &serde_json::to_vec(value).expect("a JSON value serializes"),
                    super::span_millis(lease).to_string().as_bytes(),
                ],
            )
            .await?;
        self.ok(key, fence, &reply)
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let reply = self
            .run(
                &self.scripts.renew,
                key,
                &[],
                &[
                    fence.0.to_string().as_bytes(),
                    super::span_millis(lease).to_string().as_bytes(),
                ],
            )
            .await?;
        self.ok(key, fence, &reply)
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let reply = self
            .run(
                &self.scripts.complete,
                key,
                &[],
                &[
                    fence.0.to_string().as_bytes(),
                    &serde_json::to_vec(outcome).expect("an outcome serializes"),
                    super::span_millis(ttl).to_string().as_bytes(),
                    self.channel.as_bytes(),
                    key.as_str().as_bytes(),
                ],
            )
            .await?;
        self.ok(key, fence, &reply)
    }

    async fn release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        let reply = self
            .run(
                &self.scripts.release,
                key,
                &[self.index_key(key)],
                &[
                    fence.0.to_string().as_bytes(),
                    self.channel.as_bytes(),
                    key.as_str().as_bytes(),
                ],
            )
            .await?;
        self.ok(key, fence, &reply)
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Ok(self.read(key).await?.0)
    }

    async fn wait(
        &self,
        key: &IdempotencyKey,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.waiters
            .wait(key, WaitFor::Completion, timeout, || self.read(key))
            .await
    }

    async fn wait_for_decision(
        &self,
        key: &IdempotencyKey,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.waiters
            .wait(key, WaitFor::Decision, timeout, || self.read(key))
            .await
    }

    async fn replace(
        &self,
        key: &IdempotencyKey,
        expected: Expected,
        new: Option<&Record>,
        audit: Option<&AuditEvent>,
    ) -> Result<Option<Fence>, StoreError> {
        let state: &[u8] = match expected.state {
            ExpectedState::InFlight => b"f",
            ExpectedState::LeaseExpired => b"l",
            ExpectedState::AwaitingApproval => b"a",
            ExpectedState::Completed => b"c",
        };
        let fence = expected.fence.0.to_string();
        let fields = new.map(encode).unwrap_or_default();
        let mut args: Vec<&[u8]> = vec![
            fence.as_bytes(),
            state,
            self.channel.as_bytes(),
            key.as_str().as_bytes(),
        ];
        let mut keys = vec![self.fence_key(key), self.index_key(key)];
        let event = audit.map(|event| (event.at.as_millis().to_string(), audit_text(event)));
        if let Some((at, text)) = &event {
            keys.extend(self.audit_keys(key));
            args.extend([at.as_bytes(), text.as_bytes()]);
        }
        for (name, value) in &fields {
            args.extend([name.as_bytes(), value.as_bytes()]);
        }
        let reply = self.run(&self.scripts.replace, key, &keys, &args).await?;
        match (reply.first().and_then(text).as_deref(), new) {
            (Some("ok"), None) => Ok(None),
            (Some("ok"), Some(_)) => match reply.get(1).and_then(number) {
                Some(fence) => Ok(Some(Fence(fence))),
                None => Err(self.protocol("replace without a fence")),
            },
            (Some("invalid"), _) => Err(StoreError::Corrupt(CorruptRecord {
                key: key.as_str().to_owned(),
                detail: format!(
                    "the replacement was refused, nothing was written: {}",
                    reply.get(1).and_then(text).unwrap_or_default()
                ),
            })),
            _ => Err(self.rejection(key, expected.fence, &reply)),
        }
    }

    /// Pages in key order through the slots' indexes (see the [module
    /// docs](self)); the cursor is the last key of the page, or the next
    /// slot's name. A page costs a round trip to count the keys of the next
    /// slots (more for a sparse store: 512 slots a trip), one to list them
    /// and one to read their records.
    async fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        let limit = limit.clamp(1, MAX_SCAN_PAGE);
        let (mut next, after) = match cursor {
            None => (0, None),
            Some(c) => parse_cursor(c).ok_or_else(|| {
                StoreError::Config(format!("{c:?} is not a scan cursor of {}", self.name))
            })?,
        };
        let from = |slot: u16| match after {
            Some(key) if key.starts_with(&format!("{slot:03x}")) => format!("({key}"),
            _ => "-".to_owned(),
        };
        let index = |slot: u16| index_key(&self.prefix, &format!("{slot:03x}"));
        let mut conn = self.conn()?;

        // The slots that hold the page's keys, counted a window at a time.
        let mut slots = Vec::new();
        let mut counted = 0;
        while next < SLOTS && counted < limit {
            let window = next..(next + COUNT_WINDOW).min(SLOTS);
            let cmds = window.clone().map(|slot| {
                let mut cmd = redis::cmd("ZLEXCOUNT");
                cmd.arg(index(slot)).arg(from(slot)).arg("+");
                cmd
            });
            let counts: Vec<usize> = self.batch(&mut conn, cmds.collect()).await?;
            for (slot, count) in window.zip(counts) {
                next = slot + 1;
                if count > 0 {
                    slots.push(slot);
                    counted += count;
                    if counted >= limit {
                        break;
                    }
                }
            }
        }

        // Their keys, in order. Every slot but the last holds fewer than
        // `limit`, so the reply holds fewer than twice `limit` keys.
        let mut keys: Vec<String> = Vec::new();
        if !slots.is_empty() {
            let cmds = slots.iter().map(|&slot| {
                let mut cmd = redis::cmd("ZRANGEBYLEX");
                cmd.arg(index(slot))
                    .arg(from(slot))
                    .arg("+")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(limit);
                cmd
            });
            let ranges: Vec<Vec<String>> = self.batch(&mut conn, cmds.collect()).await?;
            keys = ranges.into_iter().flatten().take(limit).collect();
        }
        // A full page ends at its last key (its slot may hold more);
        // otherwise every slot listed was read whole.
        let cursor = match keys.last() {
            Some(last) if keys.len() == limit => Some(last.clone()),
            _ if next < SLOTS => Some(format!("{next:03x}")),
            _ => None,
        };

        // Their records; a key whose record lapsed, or was released since
        // it was listed, reads as nothing and is left out.
        let mut keys_read = Vec::with_capacity(keys.len());
        let mut corrupt = Vec::new();
        let mut cmds = vec![redis::cmd("TIME")];
        for key in &keys {
            let Ok(key) = IdempotencyKey::parse(key) else {
                corrupt.push(CorruptRecord {
                    key: key.clone(),
                    detail: "the index of its slot holds a malformed key".into(),
                });
                continue;
            };
            let mut cmd = redis::cmd("HGETALL");
            cmd.arg(self.record_key(&key));
            cmds.push(cmd);
            keys_read.push(key);
        }
        let replies: Vec<RedisValue> = self.batch(&mut conn, cmds).await?;
        let now = match replies.first() {
            Some(RedisValue::Array(time)) => {
                match (time.first().and_then(number), time.get(1).and_then(number)) {
                    (Some(secs), Some(micros)) => Timestamp(secs * 1000 + micros / 1000),
                    _ => return Err(self.protocol("TIME")),
                }
            }
            _ => return Err(self.protocol("TIME")),
        };
        let mut records = Vec::with_capacity(keys_read.len());
        for (key, reply) in keys_read.iter().zip(replies.into_iter().skip(1)) {
            let flat = match reply {
                RedisValue::Array(flat) => flat,
                // RESP3 answers HGETALL with a map.
                RedisValue::Map(pairs) => pairs.into_iter().flat_map(|(k, v)| [k, v]).collect(),
                _ => return Err(self.protocol("HGETALL")),
            };
            if flat.is_empty() {
                continue;
            }
            match decode(key, &flat) {
                Ok(record) if record.is_expired(now) => {}
                Ok(record) => records.push(record),
                Err(e) => corrupt.push(e),
            }
        }
        Ok(ScanPage {
            records,
            corrupt,
            cursor,
        })
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        // Completed records and approval requests carry a key TTL: Redis
        // deletes them itself.
        self.writable()?;
        self.sweep_audit().await?;
        Ok(0)
    }

    async fn append_audit(&self, event: &AuditEvent) -> Result<u64, StoreError> {
        let (at, body) = (event.at.as_millis().to_string(), audit_text(event));
        let reply = self
            .run(
                &self.scripts.append_audit,
                &event.key,
                &self.audit_keys(&event.key),
                &[
                    at.as_bytes(),
                    event.key.as_str().as_bytes(),
                    body.as_bytes(),
                ],
            )
            .await?;
        match (
            reply.first().and_then(text).as_deref(),
            reply.get(1).and_then(number),
        ) {
            (Some("ok"), Some(seq)) => Ok(seq),
            _ => Err(self.protocol("append_audit without a seq")),
        }
    }

    /// Reads one slot's stream for a query by key, otherwise merges every
    /// slot's (see the [module docs](self)); the cursor is the stream id
    /// and slot of the page's last event.
    async fn audit(
        &self,
        query: &AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        let limit = limit.clamp(1, audit::MAX_AUDIT_PAGE);
        let after = match cursor {
            None => None,
            Some(c) => Some(parse_audit_cursor(c).ok_or_else(|| {
                StoreError::Config(format!("{c:?} is not an audit cursor of {}", self.name))
            })?),
        };
        let mut conn = self.conn()?;
        let slots: Vec<u16> = match &query.key {
            Some(key) => vec![u16::from_str_radix(slot(key), 16).expect("keys are hex")],
            None => (0..SLOTS).collect(),
        };
        // Read each slot from where the page starts in it, until it has
        // `limit + 1` of the query's events or ends; the page is the first
        // of their merge.
        let mut found: Vec<(StreamId, u16, AuditEvent)> = Vec::new();
        let mut reading: Vec<(u16, String)> = slots
            .iter()
            .map(|&s| (s, audit_start(query, after, s)))
            .collect();
        let end = match query.until {
            Some(Timestamp(0)) => return Ok(AuditPage::default()),
            Some(until) => format!("({}-0", until.as_millis()),
            None => "+".to_owned(),
        };
        let mut wanted: BTreeMap<u16, usize> = slots.iter().map(|&s| (s, limit + 1)).collect();
        while !reading.is_empty() {
            let mut next = Vec::new();
            for window in reading.chunks(usize::from(COUNT_WINDOW)) {
                let cmds = window.iter().map(|(s, start)| {
                    let mut cmd = redis::cmd("XRANGE");
                    cmd.arg(audit_key(&self.prefix, *s))
                        .arg(start)
                        .arg(&end)
                        .arg("COUNT")
                        .arg(limit + 1);
                    cmd
                });
                let replies: Vec<RedisValue> = self.batch(&mut conn, cmds.collect()).await?;
                for ((s, _), reply) in window.iter().zip(replies) {
                    let entries = self.stream_entries(reply)?;
                    let full = entries.len() > limit;
                    let mut last = None;
                    for entry in entries {
                        last = Some(entry.id);
                        if query.key.as_ref().is_some_and(|k| k.as_str() != entry.key) {
                            continue;
                        }
                        let (id, event) = (entry.id, entry.decode()?);
                        if query.matches(&event) {
                            found.push((id, *s, event));
                            let left = wanted.get_mut(s).expect("every slot read is wanted");
                            *left -= 1;
                            if *left == 0 {
                                break;
                            }
                        }
                    }
                    if let (true, Some(last)) = (full && wanted[s] > 0, last) {
                        next.push((*s, format!("({}-{}", last.0, last.1)));
                    }
                }
            }
            reading = next;
        }
        found.sort_by_key(|(id, s, _)| (*id, *s));
        let more = found.len() > limit;
        found.truncate(limit);
        let cursor = more
            .then(|| found.last())
            .flatten()
            .map(|(id, s, _)| format!("{}-{}@{s:03x}", id.0, id.1));
        Ok(AuditPage {
            events: found.into_iter().map(|(_, _, event)| event).collect(),
            cursor,
        })
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        let mut conn = self.conn()?;
        let (secs, micros): (u64, u64) = conn
            .query(&redis::cmd("TIME"))
            .await
            .map_err(|e| self.unavailable(e))?;
        Ok(Timestamp(secs * 1000 + micros / 1000))
    }

    /// Stop the subscriber and drop the store's connection; it closes once
    /// the operations already under way have their replies (every
    /// transition is one script, so none is left half done). Later
    /// operations, and waiters, fail with [`StoreError::Closed`].
    async fn close(&self) {
        let conn = self.conn.lock().expect("not poisoned").take();
        drop(conn);
        self.subscriber.abort();
        self.waiters.wake_all();
    }
}

impl RedisStore {
    /// The audit stream and counter of the slot of `key`.
    fn audit_keys(&self, key: &IdempotencyKey) -> [String; 2] {
        let slot = slot(key);
        [
            format!("{}:{{{slot}}}:audit", self.prefix),
            format!("{}:{{{slot}}}:audit_seq", self.prefix),
        ]
    }

    /// The entries of an `XRANGE` reply.
    fn stream_entries(&self, reply: RedisValue) -> Result<Vec<AuditEntry>, StoreError> {
        let RedisValue::Array(entries) = reply else {
            return Err(self.protocol("XRANGE"));
        };
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            let RedisValue::Array(parts) = entry else {
                return Err(self.protocol("XRANGE entry"));
            };
            let id = parts
                .first()
                .and_then(text)
                .as_deref()
                .and_then(parse_stream_id)
                .ok_or_else(|| self.protocol("XRANGE entry id"))?;
            let fields: Vec<RedisValue> = match parts.into_iter().nth(1) {
                Some(RedisValue::Array(fields)) => fields,
                Some(RedisValue::Map(pairs)) => {
                    pairs.into_iter().flat_map(|(k, v)| [k, v]).collect()
                }
                _ => return Err(self.protocol("XRANGE entry fields")),
            };
            let mut entry = AuditEntry {
                id,
                seq: String::new(),
                key: String::new(),
                event: String::new(),
            };
            for pair in fields.chunks(2) {
                match (
                    pair.first().and_then(text).as_deref(),
                    pair.get(1).and_then(text),
                ) {
                    (Some("seq"), Some(v)) => entry.seq = v,
                    (Some("key"), Some(v)) => entry.key = v,
                    (Some("event"), Some(v)) => entry.event = v,
                    _ => {}
                }
            }
            out.push(entry);
        }
        Ok(out)
    }

    /// Trim every slot's audit stream to the events younger than the
    /// retention, 512 slots a round trip.
    async fn sweep_audit(&self) -> Result<(), StoreError> {
        let now = self.now().await?;
        let Some(cutoff) = audit::retention_cutoff(now, self.audit_retention) else {
            return Ok(());
        };
        let mut conn = self.conn()?;
        let mut slot = 0;
        while slot < SLOTS {
            let window = slot..(slot + COUNT_WINDOW).min(SLOTS);
            slot = window.end;
            let cmds = window.map(|s| {
                let mut cmd = redis::cmd("XTRIM");
                cmd.arg(audit_key(&self.prefix, s))
                    .arg("MINID")
                    .arg(cutoff.as_millis());
                cmd
            });
            let _: Vec<u64> = self.batch(&mut conn, cmds.collect()).await?;
        }
        Ok(())
    }

    fn ok(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        reply: &[RedisValue],
    ) -> Result<(), StoreError> {
        match reply.first().and_then(text).as_deref() {
            Some("ok") => Ok(()),
            _ => Err(self.rejection(key, fence, reply)),
        }
    }
}

/// A stream entry id: milliseconds and sequence.
type StreamId = (u64, u64);

fn parse_stream_id(id: &str) -> Option<StreamId> {
    let (ms, n) = id.split_once('-')?;
    Some((ms.parse().ok()?, n.parse().ok()?))
}

/// The audit stream of `slot`.
fn audit_key(prefix: &str, slot: u16) -> String {
    format!("{prefix}:{{{slot:03x}}}:audit")
}

/// Where an audit page resumes: after the entry with this id in this slot
/// (`ID@SLOT`).
fn parse_audit_cursor(cursor: &str) -> Option<(StreamId, u16)> {
    let (id, slot) = cursor.split_once('@')?;
    let slot = u16::from_str_radix(slot, 16).ok().filter(|s| *s < SLOTS)?;
    Some((parse_stream_id(id)?, slot))
}

/// The `XRANGE` start of `slot` for a page of `query` after `after`:
/// entries merge in (id, slot) order, so a slot after the cursor's starts
/// at its id, the others just past it; never before `query.since`.
fn audit_start(query: &AuditQuery, after: Option<(StreamId, u16)>, slot: u16) -> String {
    let since = query.since.map_or((0, 0), |t| (t.as_millis(), 0));
    match after {
        Some((id, s)) if id >= since => match slot > s {
            true => format!("{}-{}", id.0, id.1),
            false => format!("({}-{}", id.0, id.1),
        },
        _ => format!("{}-{}", since.0, since.1),
    }
}

/// An event as stored: JSON without its seq (the entry's field holds it).
fn audit_text(event: &AuditEvent) -> String {
    let stored = AuditEvent {
        seq: None,
        ..event.clone()
    };
    json(&stored)
}

/// One entry of a slot's audit stream, its fields as stored.
struct AuditEntry {
    id: StreamId,
    seq: String,
    key: String,
    event: String,
}

impl AuditEntry {
    /// The event, its seq from the entry's field.
    fn decode(&self) -> Result<AuditEvent, CorruptRecord> {
        let corrupt = |detail: String| CorruptRecord {
            key: format!("audit entry {}-{}", self.id.0, self.id.1),
            detail,
        };
        let seq: u64 = self
            .seq
            .parse()
            .map_err(|e| corrupt(format!("field seq: {e}")))?;
        let event: AuditEvent =
            serde_json::from_str(&self.event).map_err(|e| corrupt(format!("field event: {e}")))?;
        Ok(AuditEvent {
            seq: Some(seq),
            ..event
        })
    }
}
