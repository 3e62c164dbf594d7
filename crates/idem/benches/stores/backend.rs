//! Backends: each store under test, opened with the probe in front of it
//! and an executor on it, and filled with records directly, bypassing
//! idem.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use idem::{Executor, MemoryStore};
use idem_postgres::PostgresStore;
use idem_redis::RedisStore;
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::Outcome;
use idem_runtime::store::{ClaimOutcome, ClaimRequest, Store};
use idem_sqlite::{SqliteOptions, SqliteStore, Synchronous};
use idem_testkit::servers::TestCertificates;
use idem_testkit::{PostgresServer, RedisServer, TempDir};
use sha2::{Digest, Sha256};

use crate::common::{args, send_email, EmailSent};
use crate::config::env_or;
use crate::probe::{probe, Probe};
use idem_runtime::store::StoreExt;

/// Where records can be written directly, bypassing idem, to fill a store.
pub enum Raw {
    Memory,
    Sqlite(std::path::PathBuf),
    Redis(redis::Client),
    Postgres(tokio_postgres::Client),
}

/// A store under test, the probe in front of it and an executor on it.
pub struct Backend {
    pub name: &'static str,
    pub probe: Arc<Probe>,
    pub exec: Executor,
    pub raw: Raw,
    /// The server's URL (Redis, PostgreSQL).
    pub url: Option<String>,
    // Dropped last: the server or directory the store lives in.
    pub _home: Box<dyn std::any::Any + Send + Sync>,
}

/// The key of the `i`th pre-populated record. Uniform, like the keys idem
/// derives (SHA-256): the memory store hashes a key by its first 16 hex
/// digits and Redis places it by its first three, so counters would pile
/// the records into a few buckets and slots.
pub fn filler_key(i: u64) -> String {
    hex::encode(Sha256::digest(format!("filler-{i}")))
}

/// [`filler_key`]'s counterparts: random keys in SQLite (no hash function
/// in SQL; drawn once per row in the series), two MD5s in PostgreSQL, two
/// SHA-1s in Redis.
pub const SQLITE_KEY: &str =
    "printf('%016x%016x%016x%016x', random(), random(), random(), random())";
pub const POSTGRES_KEY: &str = "md5('a' || g) || md5('b' || g)";

/// Copies the record `KEYS[1]` to the filler keys `ARGV[2] ..= ARGV[3]`
/// under prefix `ARGV[1]`, with their slot indexes and expiry, as the
/// claim script lays them out (one server, not a cluster: the keys are
/// computed in the script).
pub const REDIS_FILL: &str = r"
local t = redis.call('HGETALL', KEYS[1])
local exp = redis.call('HGET', KEYS[1], 'exp')
for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  local key = redis.sha1hex('a' .. i) .. string.sub(redis.sha1hex('b' .. i), 1, 24)
  local slot = string.sub(key, 1, 3)
  local rk = ARGV[1] .. ':{' .. slot .. '}:r:' .. key
  redis.call('HSET', rk, unpack(t))
  if exp then redis.call('PEXPIREAT', rk, exp) end
  redis.call('ZADD', ARGV[1] .. ':{' .. slot .. '}:keys', 0, key)
end
return 0";

/// Gives the filler records `ARGV[2] ..= ARGV[3]` under prefix `ARGV[1]`
/// (laid out by [`REDIS_FILL`]) the absolute expiry `ARGV[4]`, in
/// milliseconds: the record's `exp` field and the key's TTL.
pub const REDIS_EXPIRE: &str = r"
for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  local key = redis.sha1hex('a' .. i) .. string.sub(redis.sha1hex('b' .. i), 1, 24)
  local rk = ARGV[1] .. ':{' .. string.sub(key, 1, 3) .. '}:r:' .. key
  redis.call('HSET', rk, 'exp', ARGV[4])
  redis.call('PEXPIREAT', rk, ARGV[4])
end
return 0";

impl Backend {
    pub async fn open(name: &'static str) -> Option<Backend> {
        Self::open_with(name, false).await
    }

    /// As [`Backend::open`]; with `fsync`, PostgreSQL's server runs with
    /// `fsync=on` (the other stores are the same either way).
    pub async fn open_with(name: &'static str, fsync: bool) -> Option<Backend> {
        let mut url = None;
        let (store, raw, home): (Arc<dyn Store>, Raw, Box<dyn std::any::Any + Send + Sync>) =
            match name {
                "memory" => (Arc::new(MemoryStore::new()), Raw::Memory, Box::new(())),
                "sqlite-full" | "sqlite-normal" => {
                    let dir = TempDir::new("idem-bench").expect("temporary directory");
                    let path = dir.path().join("idem.db");
                    let sync = match name {
                        "sqlite-full" => Synchronous::Full,
                        _ => Synchronous::Normal,
                    };
                    let cache = env_or(
                        "IDEM_BENCH_SQLITE_RECORD_CACHE",
                        idem_sqlite::DEFAULT_RECORD_CACHE,
                    );
                    let options = SqliteOptions::default()
                        .synchronous(sync)
                        .record_cache(cache);
                    let store = SqliteStore::open_with(&path, options).await.expect("open");
                    (Arc::new(store), Raw::Sqlite(path), Box::new(dir))
                }
                "redis" => {
                    let Some(server) = RedisServer::start() else {
                        println!("SKIPPED redis: redis-server is not installed");
                        return None;
                    };
                    let store = RedisStore::connect(&server.url()).await.expect("connect");
                    let client = redis::Client::open(server.url()).expect("redis client");
                    url = Some(server.url());
                    (Arc::new(store), Raw::Redis(client), Box::new(server))
                }
                "postgres" => {
                    let server = if fsync {
                        PostgresServer::start_with(&["fsync=on"])
                    } else {
                        PostgresServer::start()
                    };
                    let Some(server) = server else {
                        println!("SKIPPED postgres: PostgreSQL is not installed");
                        return None;
                    };
                    let store = PostgresStore::connect(&server.url())
                        .await
                        .expect("connect");
                    let (client, connection) =
                        tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
                            .await
                            .expect("connect");
                    tokio::spawn(connection);
                    url = Some(server.url());
                    (Arc::new(store), Raw::Postgres(client), Box::new(server))
                }
                "redis-tls" => {
                    let certs = TestCertificates::new();
                    let Some(server) = RedisServer::start_tls(&certs.server, &certs.ca, false)
                    else {
                        println!("SKIPPED redis-tls: redis-server is not installed");
                        return None;
                    };
                    let store_url = format!("{}?ca={}", server.url(), certs.ca.display());
                    let store = RedisStore::connect(&store_url).await.expect("connect");
                    let ca = std::fs::read(&certs.ca).expect("the CA's certificate");
                    let tls = redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(ca),
                    };
                    let client =
                        redis::Client::build_with_tls(server.url(), tls).expect("redis client");
                    url = Some(store_url);
                    (
                        Arc::new(store),
                        Raw::Redis(client),
                        Box::new((server, certs)),
                    )
                }
                "postgres-tls" => {
                    // TLS offered beside plain text: the store over TLS,
                    // the filler over a plain connection.
                    let certs = TestCertificates::new();
                    let Some(server) = PostgresServer::start_tls(&certs.server, &certs.ca, false)
                    else {
                        println!("SKIPPED postgres-tls: PostgreSQL is not installed");
                        return None;
                    };
                    let store_url = format!(
                        "{}?sslmode=verify-full&sslrootcert={}",
                        server.url(),
                        certs.ca.display()
                    );
                    let store = PostgresStore::connect(&store_url).await.expect("connect");
                    let plain = format!("{}?sslmode=disable", server.url());
                    let (client, connection) =
                        tokio_postgres::connect(&plain, tokio_postgres::NoTls)
                            .await
                            .expect("connect");
                    tokio::spawn(connection);
                    url = Some(store_url);
                    (
                        Arc::new(store),
                        Raw::Postgres(client),
                        Box::new((server, certs)),
                    )
                }
                other => unreachable!("unknown store {other}"),
            };
        let probe = Arc::new(probe(store));
        let exec = Executor::builder_shared(probe.clone()).build();
        Some(Backend {
            name,
            probe,
            exec,
            raw,
            url,
            _home: home,
        })
    }

    pub async fn call(&self, run: &str, step: u64) -> idem::executor::CallOutput<EmailSent> {
        self.exec
            .call(send_email, args())
            .run(run, step)
            .await
            .expect("call")
    }

    pub fn ops(&self) -> u64 {
        self.probe.hook().ops.load(Ordering::Relaxed)
    }

    /// The server's WAL insert position (PostgreSQL), in bytes.
    pub async fn wal(&self) -> Option<u64> {
        let Raw::Postgres(client) = &self.raw else {
            return None;
        };
        let row = client
            .query_one("SELECT pg_current_wal_insert_lsn()::text", &[])
            .await
            .expect("wal position");
        let lsn: String = row.get(0);
        let (hi, lo) = lsn.split_once('/').expect("an LSN");
        Some((u64::from_str_radix(hi, 16).unwrap() << 32) | u64::from_str_radix(lo, 16).unwrap())
    }

    /// Let the writes of the phase before finish settling: a SQLite WAL is
    /// checkpointed, so that the next figure is not the checkpointer
    /// copying that phase's pages beside it (the machine has two cores).
    pub async fn settle(&self) {
        if let Raw::Sqlite(path) = &self.raw {
            let path = path.clone();
            tokio::task::spawn_blocking(move || {
                let conn = rusqlite::Connection::open(path).unwrap();
                conn.busy_timeout(Duration::from_secs(60)).unwrap();
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                    .unwrap();
            })
            .await
            .unwrap();
        }
    }

    /// The key of a real call recorded through the executor, kept for
    /// `ttl`: the record every filler record copies.
    pub async fn template(&self, ttl: Duration) -> IdempotencyKey {
        let exec = Executor::builder_shared(self.probe.inner().clone())
            .ttl(ttl)
            .build();
        let run = format!("template-{}", ttl.as_millis());
        let out = exec.call(send_email, args()).run(run, 0).await.unwrap();
        out.meta.key.expect("a write has a key")
    }

    /// Add the filler records `from .. to` (see [`filler_key`]), copies of
    /// a real record kept for `ttl` (already expired when `ttl` is 1 ms).
    pub async fn fill(&self, from: u64, to: u64, ttl: Duration) {
        if from >= to {
            return;
        }
        let template = self.template(ttl).await;
        if ttl < Duration::from_millis(100) {
            tokio::time::sleep(ttl + Duration::from_millis(20)).await;
        }
        const BATCH: u64 = 100_000;
        match &self.raw {
            Raw::Memory => {
                let store = self.probe.inner();
                let f = idem_runtime::key::Fingerprint::new("0".repeat(64));
                let outcome = Outcome::Success {
                    output: idem_runtime::record::OutputJson::from_value(&serde_json::json!({
                        "message_id": "<15@example.com>"
                    })),
                };
                for i in from..to {
                    let key = IdempotencyKey::parse(&filler_key(i)).unwrap();
                    let req = ClaimRequest {
                        key: &key,
                        tool: "send_email",
                        fingerprint: &f,
                        check_fingerprint: true,
                        lease: Duration::from_secs(60),
                        info: idem_runtime::record::CallInfoRef::EMPTY,
                        worker: None,
                        durable: true,
                    };
                    let ClaimOutcome::Acquired { fence, .. } = store.claim(&req).await.unwrap()
                    else {
                        panic!("filler key {i} taken");
                    };
                    store.complete(&key, fence, &outcome, ttl).await.unwrap();
                }
                if ttl < Duration::from_millis(100) {
                    tokio::time::sleep(ttl + Duration::from_millis(20)).await;
                }
            }
            Raw::Sqlite(path) => {
                let path = path.clone();
                let template = template.as_str().to_owned();
                tokio::task::spawn_blocking(move || {
                    let conn = rusqlite::Connection::open(path).unwrap();
                    conn.busy_timeout(Duration::from_secs(60)).unwrap();
                    let sql = format!(
                        "WITH RECURSIVE s(i, k) AS (
                             SELECT ?1, {SQLITE_KEY}
                             UNION ALL SELECT i + 1, {SQLITE_KEY} FROM s WHERE i + 1 < ?2
                         )
                         INSERT INTO idem_records (key, expires_at, record)
                         SELECT k, t.expires_at,
                                CAST(replace(CAST(t.record AS TEXT), t.key, k) AS BLOB)
                         FROM s, idem_records AS t WHERE t.key = ?3"
                    );
                    let mut start = from;
                    while start < to {
                        let end = (start + BATCH).min(to);
                        let n = conn
                            .execute(&sql, rusqlite::params![start as i64, end as i64, template])
                            .unwrap();
                        assert_eq!(n as u64, end - start);
                        start = end;
                    }
                })
                .await
                .unwrap();
            }
            Raw::Redis(client) => {
                let mut conn = client.get_multiplexed_async_connection().await.unwrap();
                let template = format!("idem:{{{}}}:r:{}", &template.as_str()[..3], template);
                let script = redis::Script::new(REDIS_FILL);
                let mut start = from;
                while start < to {
                    // A script blocks the server: keep each one short.
                    let end = (start + BATCH / 50).min(to);
                    let _: i64 = script
                        .key(&template)
                        .arg("idem")
                        .arg(start)
                        .arg(end - 1)
                        .invoke_async(&mut conn)
                        .await
                        .unwrap();
                    start = end;
                }
            }
            Raw::Postgres(client) => {
                let columns = "tool, fingerprint, created_at, fence, prev_fence, state, \
                    lease_until, outcome, completed_at, expires_at, steps, requested_at, \
                    message, namespace, call_id, run_id, step, args, worker, audit";
                let sql = format!(
                    "INSERT INTO idem_records (key, {columns})
                     SELECT {POSTGRES_KEY}, {columns}
                     FROM idem_records AS t, generate_series($1::bigint, $2::bigint) AS g
                     WHERE t.key = $3"
                );
                let mut start = from;
                while start < to {
                    let end = (start + BATCH).min(to);
                    let n = client
                        .execute(
                            &sql,
                            &[&(start as i64), &(end as i64 - 1), &template.as_str()],
                        )
                        .await
                        .unwrap();
                    assert_eq!(n, end - start);
                    start = end;
                }
                client.batch_execute("ANALYZE idem_records").await.unwrap();
            }
        }
    }

    /// Give the filler records `from .. to` of a Redis store one absolute
    /// expiry, `at` (see [`REDIS_EXPIRE`]), so that the server deletes
    /// them all at once.
    pub async fn expire_at(&self, from: u64, to: u64, at: Timestamp) {
        let Raw::Redis(client) = &self.raw else {
            panic!(
                "{}: only a Redis store's records are expired this way",
                self.name
            );
        };
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let script = redis::Script::new(REDIS_EXPIRE);
        let mut start = from;
        while start < to {
            // A script blocks the server: keep each one short.
            let end = (start + 2000).min(to);
            let _: i64 = script
                .arg("idem")
                .arg(start)
                .arg(end - 1)
                .arg(at.as_millis())
                .invoke_async(&mut conn)
                .await
                .unwrap();
            start = end;
        }
    }
}
