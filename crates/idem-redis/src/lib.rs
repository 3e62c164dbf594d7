//! The Redis store, for many workers on many machines.
//!
//! # How it works
//!
//! * Each transition is one Lua script (`src/scripts/*.lua`), so it is one
//!   round trip and atomic: claim, checkpoint, complete, release, replace,
//!   get. The scripts are loaded when the store connects, so a call is one
//!   `EVALSHA`. The layout of a record's hash is described at the top of
//!   `src/scripts/common.lua`.
//! * A record is a hash under `PREFIX:{SLOT}:r:KEY`, where `SLOT` is the
//!   first three hex digits of the key: a record, the fence counter of its
//!   slot (`PREFIX:{SLOT}:fence`) and the index of its slot
//!   (`PREFIX:{SLOT}:keys`) share a hash tag, so every script touches keys
//!   of one Redis Cluster slot. The 4,096 counters are never deleted, so a
//!   fence is never handed out twice for a key, even after the key was
//!   released or expired.
//! * [`StoreExt::scan`](idem_runtime::store::StoreExt::scan) pages through the slots' indexes — sorted sets of the
//!   keys of their records, kept by the scripts that create and delete
//!   records — in key order, the cursor being the last key returned. Unlike
//!   `SCAN`, which may return a key twice when the server resizes its
//!   table between two calls, this returns every record present for the
//!   whole scan exactly once, and reads no key of other data sharing the
//!   server. A record that lapses is deleted by Redis but stays in its
//!   index until a claim creating a record next to it drops it (scans skip
//!   it): in the steady state about a quarter of an index is such keys.
//! * [`StoreExt::scan_open`](idem_runtime::store::StoreExt::scan_open) pages newest first through the slots' *open
//!   sets* (`PREFIX:{SLOT}:open`, layout version 4): sorted sets of the
//!   keys of the slot's open records scored by their creation, kept by the
//!   same scripts that change the records, so claims and completions cost
//!   no more round trips. A page of 50 is three round trips whatever the
//!   size of the store (see `src/open_index.rs`); keys of records Redis
//!   deleted itself are dropped by the readers that meet them and by the
//!   sweep.
//! * Times come from the server's clock (`TIME` inside the scripts), never
//!   the worker's. A completed record's retention is the key's TTL
//!   (`PEXPIREAT`); the lease is a field of the hash — key expiry never
//!   doubles as the lease, and an in-flight record has no TTL (it is never
//!   swept). A record awaiting approval lapses the same way. Redis deletes
//!   expired records itself, so [`StoreExt::sweep`](idem_runtime::store::StoreExt::sweep) deletes none and returns
//!   0; it drops their keys from the open sets.
//! * The audit log is a stream per slot, `PREFIX:{SLOT}:audit` (see the top
//!   of `src/scripts/audit.lua`), beside the slot's records, so the replace
//!   script appends an operator's event in the same script as its swap.
//!   An event's `seq` comes from a counter per slot, so it grows with the
//!   appends to one slot, not across them. Events are read oldest first by
//!   stream id, which is the event's `at` unless an event with a later
//!   `at` was appended to the slot before it; a read for one key reads its
//!   slot. A read of every key goes by the audit index,
//!   `PREFIX:{audit}:slots`, which names the slots holding events of each
//!   millisecond and is told of an event before it is appended: a page of
//!   100 events is one round trip to the index and one to the streams it
//!   names. The part of a log written before the index (layout version 2)
//!   is read by merging the 4,096 streams (pipelined, 512 slots a round
//!   trip). [`StoreExt::sweep`](idem_runtime::store::StoreExt::sweep) trims each stream and the index to the events
//!   younger than the retention (`XTRIM MINID`, by the server's clock),
//!   returning 0 still. [`RedisStore::round_trips`] counts what an
//!   operation costs.
//! * Durability is the server's (`appendonly`, `appendfsync`): a script's
//!   writes reach the disk as the server is configured to, whatever the
//!   call's class, so [`ClaimRequest::durable`](idem_runtime::store::ClaimRequest::durable)
//!   changes nothing here. With `appendfsync always` every claim and
//!   outcome is on disk before it is answered; with `everysec` (Redis's
//!   default when the AOF is on) a power cut may lose the last second of
//!   claims, outcomes and decisions alike.
//! * Waiters ([`StoreExt::wait`](idem_runtime::store::StoreExt::wait), for a completion or a decision) are woken by
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
//! * Over TLS (`rediss://`, `rediss+cluster://`), through redis-rs's
//!   rustls support, the server's certificate is always verified, against
//!   the platform's certificate authorities or only those of `?ca=PATH`
//!   (else of the file `IDEM_TLS_CA_FILE` names); `?cert=PATH&key=PATH`
//!   gives a client certificate for mutual TLS. A connection that cannot
//!   be made for TLS's sake is a [`StoreError::Tls`] saying why and what to
//!   write.
//! * A store that cannot be reached fails every operation with
//!   [`StoreError::Unavailable`] naming the URL (without its password) and
//!   the cause.
//! * One server's connection is redis-rs' connection manager, spoken to
//!   in RESP3 unless the URL says `?protocol=resp2`: the server closing it
//!   (a restart, a failover, an idle timeout) is heard at once and the
//!   manager connects again, so a restart of the server costs no call made
//!   after it is back. A request refused a connection (the server was
//!   still down when the manager last tried) never reached the server and
//!   is sent once more on the next connection. A request whose connection
//!   dropped on the way may have run: only the read and the fenced renewal
//!   and checkpoint, the same run twice, are sent again; a claim,
//!   completion, release, replacement or audit append is not, so on one
//!   server a transition is never applied twice (on a cluster, see below).
//!   Over RESP2 the manager hears of a closed connection only from the
//!   request that fails on it.
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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use redis::Value as RedisValue;
use serde_json::Value;

use codec::{audit_text, decode, encode, json, number, text};
use connection::Connection;
use scripts::Scripts;

use idem_runtime::audit::{AuditEvent, AuditPage, AuditQuery};
use idem_runtime::clock::Timestamp;
use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::record::{CorruptRecord, Fence, Outcome, Record};
use idem_runtime::store::backend::Waiters;
use idem_runtime::store::{Answer, Operation, WaitFor};
use idem_runtime::store::{
    ClaimOutcome, ClaimRequest, Expected, ExpectedState, ScanPage, Store, StoreError, Takeover,
};

mod audit_index;
mod backend;
mod codec;
mod connect;
mod connection;
mod error;
mod migrate;
mod notify;
mod open_index;
mod options;
mod scan;
mod schema;
mod scripts;
mod tls;

pub use backend::{Redis, BACKEND};
pub use notify::SAFETY_POLL;
pub use options::RedisOptions;
pub use schema::{OLDEST_READABLE, SCHEMA_VERSION};

/// Records in Redis. See the [module docs](self).
pub struct RedisStore {
    /// Shared by every operation; `None` once closed.
    conn: Mutex<Option<Connection>>,
    /// The connection's count of round trips.
    trips: Arc<std::sync::atomic::AtomicU64>,
    /// When the audit index is complete from (`None`: no index; see
    /// `audit_index`).
    indexed_since: Option<u64>,
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
    /// Whether the slots' open sets are complete (layout version 4), so
    /// that [`StoreExt::scan_open`](idem_runtime::store::StoreExt::scan_open) reads them.
    open_indexed: bool,
}

#[async_trait]
impl Store for RedisStore {
    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn call(&self, op: Operation<'_>) -> Result<Answer, StoreError> {
        idem_runtime::answer_operation!(self, op)
    }
}

/// The operations [`Store::call`] answers, one method each
/// ([`answer_operation!`](idem_runtime::answer_operation)).
impl RedisStore {
    async fn on_claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let lease = idem_runtime::store::backend::span_millis(req.lease).to_string();
        let info = match req.info.is_empty() {
            true => String::new(),
            false => json(&req.info),
        };
        let reply = self
            .run(
                &self.scripts.claim,
                req.key,
                &[
                    self.fence_key(req.key),
                    self.index_key(req.key),
                    self.open_key(req.key),
                ],
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

    async fn on_checkpoint(
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
                    idem_runtime::store::backend::span_millis(lease)
                        .to_string()
                        .as_bytes(),
                ],
            )
            .await?;
        self.ok(key, fence, &reply)
    }

    async fn on_renew(
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
                    idem_runtime::store::backend::span_millis(lease)
                        .to_string()
                        .as_bytes(),
                ],
            )
            .await?;
        self.ok(key, fence, &reply)
    }

    async fn on_complete(
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
                &[self.open_key(key)],
                &[
                    fence.0.to_string().as_bytes(),
                    &serde_json::to_vec(outcome).expect("an outcome serializes"),
                    idem_runtime::store::backend::span_millis(ttl)
                        .to_string()
                        .as_bytes(),
                    self.channel.as_bytes(),
                    key.as_str().as_bytes(),
                    // An unknown outcome is still open.
                    if matches!(outcome, Outcome::Unknown { .. }) {
                        b"1"
                    } else {
                        b"0"
                    },
                ],
            )
            .await?;
        self.ok(key, fence, &reply)
    }

    async fn on_release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        let reply = self
            .run(
                &self.scripts.release,
                key,
                &[self.index_key(key), self.open_key(key)],
                &[
                    fence.0.to_string().as_bytes(),
                    self.channel.as_bytes(),
                    key.as_str().as_bytes(),
                ],
            )
            .await?;
        self.ok(key, fence, &reply)
    }

    async fn on_get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        Ok(self.read(key).await?.0)
    }

    async fn on_wait(
        &self,
        key: &IdempotencyKey,
        until: WaitFor,
        timeout: Duration,
    ) -> Result<Option<Record>, StoreError> {
        self.waiters
            .wait(key, until, timeout, || self.read(key))
            .await
    }

    async fn on_replace(
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
            if new.is_some_and(Record::is_open) {
                b"1"
            } else {
                b"0"
            },
        ];
        let mut keys = vec![self.fence_key(key), self.index_key(key), self.open_key(key)];
        let event = audit.map(|event| (event.at.as_millis().to_string(), audit_text(event)));
        if let Some((at, text)) = &event {
            keys.extend(self.audit_keys(key));
            args.extend([at.as_bytes(), text.as_bytes()]);
        }
        for (name, value) in &fields {
            args.extend([name.as_bytes(), value.as_bytes()]);
        }
        if let Some(event) = audit {
            self.index_audit(event.at, key).await?;
        }
        let reply = self.run(&self.scripts.replace, key, &keys, &args).await?;
        if let (Some("ok"), Some(event)) = (reply.first().and_then(text).as_deref(), audit) {
            let ms = reply.get(2).and_then(number);
            self.indexed_append(event, ms).await?;
        }
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
    async fn on_scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        self.scan_page(cursor, limit).await
    }

    /// Pages newest first through the slots' open sets (see the [module
    /// docs](self)): a round trip to read the newest open key of every
    /// slot (eight on a cluster, 512 slots each), one to read the few slots
    /// that may hold the page's keys further, and one to read their
    /// records. A store connected read-only
    /// to data of layout version 3, which kept no open sets, reads the whole
    /// store instead ([`scan_open_by_scanning`](idem_runtime::store::scan_open_by_scanning)).
    async fn on_scan_open(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage, StoreError> {
        if !self.open_indexed {
            return idem_runtime::store::scan_open_by_scanning(self, cursor, limit).await;
        }
        self.open_page(cursor, limit).await
    }

    async fn on_sweep(&self) -> Result<u64, StoreError> {
        // Completed records and approval requests carry a key TTL: Redis
        // deletes them itself.
        self.writable()?;
        self.sweep_open().await?;
        self.sweep_audit().await?;
        Ok(0)
    }

    async fn on_append_audit(&self, event: &AuditEvent) -> Result<u64, StoreError> {
        let (at, body) = (event.at.as_millis().to_string(), audit_text(event));
        self.index_audit(event.at, &event.key).await?;
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
            (Some("ok"), Some(seq)) => {
                let ms = reply.get(2).and_then(number);
                self.indexed_append(event, ms).await?;
                Ok(seq)
            }
            _ => Err(self.protocol("append_audit without a seq")),
        }
    }

    /// Reads one slot's stream for a query by key, otherwise merges every
    /// slot's (see the [module docs](self)); the cursor is the stream id
    /// and slot of the page's last event.
    async fn on_audit(
        &self,
        query: &AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        self.audit_page(query, cursor, limit).await
    }

    async fn on_now(&self) -> Result<Timestamp, StoreError> {
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
    async fn on_close(&self) {
        let conn = self.conn.lock().expect("not poisoned").take();
        drop(conn);
        self.subscriber.abort();
        self.waiters.wake_all();
    }
}
