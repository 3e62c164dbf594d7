//! The PostgreSQL store, for many workers on many machines.
//!
//! # How it works
//!
//! * Each transition is one prepared statement, so one round trip: a claim
//!   is an `INSERT … ON CONFLICT DO UPDATE … WHERE` (insert a new record,
//!   replace an expired one, take over an expired lease, or acquire an
//!   approved call) that, when it changes nothing, returns the existing row
//!   from the same statement; checkpoint, complete and release are
//!   single-row updates fenced by `WHERE key = $1 AND fence = $2 AND state =
//!   in flight` (a replace by the fence and state it expects) that report
//!   the current holder when they match nothing.
//! * Fences come from a sequence, so they are unique per key forever.
//! * Times come from the server's clock (`statement_timestamp()`), never
//!   the worker's.
//! * The schema (`idem_meta`, `idem_records`, sequence `idem_fence`) is
//!   created or migrated on start under an advisory lock; a schema newer
//!   than this build is refused with [`StoreError::SchemaTooNew`].
//! * Applications can share one database, each in a PostgreSQL schema of
//!   its own: `postgres://u@h/db?schema=app1` creates schema `app1` if it
//!   is missing and keeps idem's tables and sequence there (every
//!   connection's `search_path` is set to it), migrating it under an
//!   advisory lock of its own. Tables of two schemas never see each other.
//!   Without `schema` the tables go where the connection's `search_path`
//!   says, normally `public`. The notification channel is per database:
//!   a completion in one schema may wake a waiter of the same key in
//!   another, which re-reads its own record and waits on.
//! * Sweeping deletes expired completed records and approval requests in
//!   batches selected with `FOR UPDATE SKIP LOCKED`, so several sweepers
//!   never block each other or a claim.
//! * Scanning pages through the primary key (`key > cursor ORDER BY key`).
//! * Waiters ([`Store::wait`], [`Store::wait_for_decision`]) are woken by
//!   LISTEN/NOTIFY: completing, releasing or replacing a record (an
//!   approval or a denial is a replace) notifies channel `idem_done` with
//!   the key, inside the same statement (delivered at commit), and one
//!   listening connection per store, in every process, wakes the local
//!   waiters of that key, typically within a millisecond. As a safety net
//!   waiters also re-read their record with a back-off from 5 ms to
//!   [`SAFETY_POLL`].
//! * Connections come from a [`bb8`] pool; each connection prepares every
//!   statement once when it opens. Nothing is retried with a request, so a
//!   transition is never applied twice.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use serde_json::Value;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls, Row, Statement};

use super::redact::redact;
use super::wait_for::WaitFor;
use super::waiters::Waiters;
use super::{
    transition, Cause, ClaimOutcome, ClaimRequest, Expected, ExpectedState, FenceHolder, ScanPage,
    Store, StoreError, Takeover,
};
use crate::audit::{self, AuditEvent, AuditPage, AuditQuery, DEFAULT_AUDIT_RETENTION};
use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::record::{
    AuditEntry, CallInfo, CorruptRecord, Fence, Outcome, Record, RecordState, APPROVAL_STEP,
};

/// The schema version this build creates and understands. Version 2 (idem
/// 0.2) adds records awaiting approval (state 2), the call's details, the
/// worker and the operator audit; a version 1 schema is migrated on
/// connect (its records read unchanged), and a version 1 build refuses a
/// version 2 schema rather than misreading a record it does not know.
///
/// Version 3 (idem 0.3) records the tool's TTL with each call (`ttl_ms`),
/// what decisions about it are kept for; adds the audit log (table
/// `idem_audit`); and keeps completed records with an unknown outcome until
/// a person settles them: the migration gives those already stored the
/// longest retention the store writes.
pub const SCHEMA_VERSION: u32 = 3;

// Every migration step moves the schema one version.
const _: () = assert!(MIGRATIONS.len() == SCHEMA_VERSION as usize);

/// The oldest schema version a store connected read-only
/// ([`PostgresStore::connect_read_only`]) reads without migrating it: the
/// statements every connection prepares name version 2's columns, so an
/// older schema is refused with [`StoreError::SchemaTooOld`].
pub const OLDEST_READABLE: u32 = 3;

/// The longest a waiter goes without re-reading its record when no
/// notification arrives.
pub const SAFETY_POLL: Duration = Duration::from_secs(1);

/// Subscribes to the channel completions and releases are notified on
/// (`idem_done`, written into the statements).
const LISTEN: &str = "LISTEN idem_done";

/// Migrations: entry `i` takes the schema from version `i` to `i + 1`, in
/// the transaction that records the new version. Indexes are not built
/// here but by [`build_indexes`], after the commit: see [`INDEXES`].
const MIGRATIONS: &[&str] = &[
    "CREATE SEQUENCE idem_fence;
     CREATE TABLE idem_records (
         key          text PRIMARY KEY,
         tool         text NOT NULL,
         fingerprint  text NOT NULL,
         created_at   bigint NOT NULL,
         fence        bigint NOT NULL,
         prev_fence   bigint,
         state        smallint NOT NULL CHECK (state IN (0, 1)),
         lease_until  bigint,
         outcome      text,
         completed_at bigint,
         expires_at   bigint,
         steps        jsonb NOT NULL DEFAULT '{}'
     );",
    // Adding nullable columns and a constant default rewrites nothing. The
    // new state check is a superset of the old one, which every row already
    // passed, so it is added NOT VALID instead of scanning the table under
    // the migration's exclusive lock. The expiry index now covers approval
    // requests too, which lapse and are swept like completed records:
    // version 1's is dropped here (a catalog change), the new one built
    // after the commit (see `INDEXES`).
    "ALTER TABLE idem_records
         ADD COLUMN requested_at bigint,
         ADD COLUMN message      text,
         ADD COLUMN namespace    text,
         ADD COLUMN call_id      text,
         ADD COLUMN run_id       text,
         ADD COLUMN step         bigint,
         ADD COLUMN args         text,
         ADD COLUMN worker       text,
         ADD COLUMN audit        jsonb NOT NULL DEFAULT '[]',
         DROP CONSTRAINT idem_records_state_check,
         ADD CONSTRAINT idem_records_state_check CHECK (state IN (0, 1, 2)) NOT VALID;
     DROP INDEX IF EXISTS idem_records_expiry;",
    // The tool's TTL, recorded at the first claim (what decisions about
    // the call are kept for); the audit log (its indexes in `INDEXES`);
    // and unknown outcomes kept until a person settles them: those stored
    // with a retention get the longest the store writes (`MAX_SPAN_MILLIS`,
    // 2^52 ms, from now).
    "ALTER TABLE idem_records ADD COLUMN ttl_ms bigint;
     CREATE TABLE idem_audit (
         seq   bigserial PRIMARY KEY,
         at    bigint NOT NULL,
         key   text NOT NULL,
         event text NOT NULL
     );
     UPDATE idem_records
     SET expires_at = 4503599627370496 + floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint
     WHERE state = 1 AND outcome::jsonb ->> 'status' = 'unknown';",
];

/// The indexes of [`SCHEMA_VERSION`]: name, and what follows `ON` in its
/// definition. Built with `CREATE INDEX CONCURRENTLY` after the migration
/// commits ([`build_indexes`]), since building an index in the migration's
/// transaction would hold every worker's claims for as long as the build
/// of a large table takes.
const INDEXES: &[(&str, &str)] = &[
    (
        "idem_records_expiry",
        "idem_records (expires_at) WHERE state IN (1, 2)",
    ),
    ("idem_audit_key", "idem_audit (key, seq)"),
    ("idem_audit_at", "idem_audit (at)"),
];

/// How many expired records one sweep statement deletes at most.
const SWEEP_BATCH: i64 = 1000;

/// The most records one scan page reads.
const SCAN_MAX: usize = 10_000;

/// A record's columns, in the order [`decode`] reads them.
const RECORD: &str = "key, tool, fingerprint, created_at, fence, prev_fence, state, lease_until, \
     outcome, completed_at, expires_at, steps::text, requested_at, message, \
     namespace, call_id, run_id, step, args, worker, audit::text, ttl_ms";

/// How many columns [`RECORD`] lists.
const RECORD_COLUMNS: usize = 22;

/// States as stored.
const IN_FLIGHT: i16 = 0;
const COMPLETED: i16 = 1;
const AWAITING_APPROVAL: i16 = 2;

/// The statements, with `{now}` (the server's time in milliseconds),
/// `{record}` (a record's columns) and `{approval}` (the approval step's
/// name) filled in.
struct Sql {
    claim: String,
    checkpoint: String,
    renew: String,
    complete: String,
    release: String,
    replace: String,
    remove: String,
    get: String,
    scan: String,
    sweep: String,
    now: String,
}

static SQL: LazyLock<Sql> = LazyLock::new(|| {
    // States: 0 in flight, 1 completed, 2 awaiting approval (approved once
    // the step `idem:approval` is among its steps). Steps hold each step's
    // value as JSON text, so values come back byte for byte.
    let fill = |s: &str| {
        s.replace(
            "{now}",
            "floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint",
        )
        .replace("{record}", RECORD)
        .replace("{approval}", APPROVAL_STEP)
    };
    // Who holds the key, for a fenced write that matched nothing.
    let stale = |cte: &str| {
        format!(
            "SELECT 'stale', state, fence, expires_at, {{now}} FROM idem_records \
             WHERE key = $1 AND NOT EXISTS (SELECT 1 FROM {cte})"
        )
    };
    let notify = "notified AS (SELECT pg_notify('idem_done', key) FROM changed)";
    // The record of key $1 holds fence $2 and is as the `ExpectedState`
    // coded in $3 says (see `expected_state`); an expired record counts as
    // absent.
    let expected = "key = $1 AND fence = $2 AND CASE $3::smallint
                 WHEN 0 THEN state = 0
                 WHEN 1 THEN state = 0 AND lease_until <= {now}
                 WHEN 2 THEN state = 2 AND expires_at > {now}
                 WHEN 3 THEN state = 1 AND expires_at > {now}
                 ELSE false
               END";
    Sql {
        // `cur` reads the row first: when it is a live completed record, a
        // live owner's, one awaiting an approval not yet given, or another
        // call's, nothing is inserted, so a duplicate takes no row lock,
        // writes no WAL and draws no fence. Otherwise the upsert decides, as
        // the authority on races: it creates the record, replaces an
        // expired one (then it counts as absent: `fresh`), takes over an
        // expired lease, or acquires an approved call (no takeover: nothing
        // ran before).
        claim: fill(
            &"WITH cur AS (
               SELECT * FROM idem_records WHERE key = $1
             ),
             claimed AS (
               INSERT INTO idem_records AS r
                   (key, tool, fingerprint, created_at, fence, state, lease_until,
                    namespace, call_id, run_id, step, args, worker, ttl_ms)
               SELECT $1::text, $2::text, $3::text, {now}, nextval('idem_fence'), 0,
                      {now} + $5::bigint,
                      $6::text, $7::text, $8::text, $9::bigint, $10::text, $11::text,
                      $12::bigint
               WHERE NOT EXISTS (
                   SELECT 1 FROM cur
                   WHERE (cur.state = 0 OR cur.expires_at > {now})
                     AND (cur.tool <> $2::text
                          OR ($4::boolean AND cur.fingerprint <> $3::text)
                          OR cur.state = 1
                          OR (cur.state = 0 AND cur.lease_until > {now})
                          OR (cur.state = 2 AND (NOT cur.steps ? '{approval}'
                                                 OR cur.fingerprint <> $3::text)))
               )
               ON CONFLICT (key) DO UPDATE SET
                   fingerprint  = CASE WHEN {fresh} THEN excluded.fingerprint ELSE r.fingerprint END,
                   created_at   = CASE WHEN {fresh} THEN excluded.created_at ELSE r.created_at END,
                   steps        = CASE WHEN {fresh} THEN '{}'::jsonb ELSE r.steps END,
                   namespace    = CASE WHEN {fresh} THEN excluded.namespace ELSE r.namespace END,
                   call_id      = CASE WHEN {fresh} THEN excluded.call_id ELSE r.call_id END,
                   run_id       = CASE WHEN {fresh} THEN excluded.run_id ELSE r.run_id END,
                   step         = CASE WHEN {fresh} THEN excluded.step ELSE r.step END,
                   args         = CASE WHEN {fresh} THEN excluded.args ELSE r.args END,
                   ttl_ms       = CASE WHEN {fresh} THEN excluded.ttl_ms ELSE r.ttl_ms END,
                   audit        = CASE WHEN {fresh} THEN '[]'::jsonb ELSE r.audit END,
                   prev_fence   = CASE WHEN r.state = 0 THEN r.fence END,
                   worker       = excluded.worker,
                   tool         = excluded.tool,
                   fence        = excluded.fence,
                   state        = 0,
                   lease_until  = excluded.lease_until,
                   outcome      = NULL,
                   completed_at = NULL,
                   expires_at   = NULL,
                   requested_at = NULL,
                   message      = NULL
               WHERE {fresh}
                  OR (r.tool = excluded.tool
                      AND ((r.state = 0 AND r.lease_until <= excluded.created_at
                            AND (NOT $4::boolean OR r.fingerprint = excluded.fingerprint))
                           OR (r.state = 2 AND r.steps ? '{approval}'
                               AND r.fingerprint = excluded.fingerprint)))
               RETURNING r.*
             )
             SELECT true, {record}, {now} FROM claimed
             UNION ALL
             SELECT false, {record}, {now} FROM cur
             WHERE NOT EXISTS (SELECT 1 FROM claimed)"
                .replace(
                    "{fresh}",
                    "(r.state <> 0 AND r.expires_at <= excluded.created_at)",
                ),
        ),
        checkpoint: fill(&format!(
            "WITH changed AS (
               UPDATE idem_records
               SET steps = steps || jsonb_build_object($3::text, $4::text),
                   lease_until = {{now}} + $5
               WHERE key = $1 AND fence = $2 AND state = 0
               RETURNING key
             )
             SELECT 'ok', NULL::smallint, NULL::bigint, NULL::bigint, {{now}} FROM changed
             UNION ALL {}",
            stale("changed")
        )),
        renew: fill(&format!(
            "WITH changed AS (
               UPDATE idem_records
               SET lease_until = {{now}} + $3
               WHERE key = $1 AND fence = $2 AND state = 0
               RETURNING key
             )
             SELECT 'ok', NULL::smallint, NULL::bigint, NULL::bigint, {{now}} FROM changed
             UNION ALL {}",
            stale("changed")
        )),
        complete: fill(&format!(
            "WITH changed AS (
               UPDATE idem_records
               SET state = 1, outcome = $3, completed_at = {{now}}, expires_at = {{now}} + $4,
                   lease_until = NULL, prev_fence = NULL
               WHERE key = $1 AND fence = $2 AND state = 0
               RETURNING key
             ), {notify}
             SELECT 'ok', NULL::smallint, NULL::bigint, NULL::bigint, {{now}} FROM changed
             WHERE (SELECT count(*) FROM notified) >= 0
             UNION ALL {}",
            stale("changed")
        )),
        release: fill(&format!(
            "WITH changed AS (
               DELETE FROM idem_records
               WHERE key = $1 AND fence = $2 AND state = 0
               RETURNING key
             ), {notify}
             SELECT 'ok', NULL::smallint, NULL::bigint, NULL::bigint, {{now}} FROM changed
             WHERE (SELECT count(*) FROM notified) >= 0
             UNION ALL {}",
            stale("changed")
        )),
        // Every column from the record, under a fresh fence (returned in
        // the third column); waiters are woken as by a completion.
        replace: fill(&format!(
            "WITH changed AS (
               UPDATE idem_records
               SET tool = $4, fingerprint = $5, created_at = $6,
                   fence = nextval('idem_fence'), prev_fence = NULL,
                   state = $7, lease_until = $8, outcome = $9, completed_at = $10,
                   expires_at = $11, steps = $12::text::jsonb, requested_at = $13,
                   message = $14, namespace = $15, call_id = $16, run_id = $17,
                   step = $18, args = $19, worker = $20, audit = $21::text::jsonb,
                   ttl_ms = $22
               WHERE {expected}
               RETURNING key, fence
             ), {notify}
             SELECT 'ok', NULL::smallint, fence, NULL::bigint, {{now}} FROM changed
             WHERE (SELECT count(*) FROM notified) >= 0
             UNION ALL {}",
            stale("changed")
        )),
        remove: fill(&format!(
            "WITH changed AS (
               DELETE FROM idem_records
               WHERE {expected}
               RETURNING key
             ), {notify}
             SELECT 'ok', NULL::smallint, NULL::bigint, NULL::bigint, {{now}} FROM changed
             WHERE (SELECT count(*) FROM notified) >= 0
             UNION ALL {}",
            stale("changed")
        )),
        get: fill(
            "SELECT {now}, {record} FROM (SELECT 1) AS one
             LEFT JOIN idem_records ON key = $1",
        ),
        // Expired records are read (and left out by the caller), so a page
        // costs at most `limit` rows however much is waiting to be swept.
        scan: fill(
            "SELECT {now}, {record} FROM idem_records
             WHERE key > $1
             ORDER BY key
             LIMIT $2",
        ),
        sweep: fill(
            "WITH doomed AS (
               SELECT key FROM idem_records
               WHERE state IN (1, 2) AND expires_at <= {now}
               ORDER BY expires_at
               LIMIT $1
               FOR UPDATE SKIP LOCKED
             )
             DELETE FROM idem_records AS r USING doomed
             WHERE r.key = doomed.key AND r.state IN (1, 2) AND r.expires_at <= {now}",
        ),
        now: fill("SELECT {now}"),
    }
});

/// How to connect a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    pool_size: u32,
    connect_timeout: Duration,
    audit_retention: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            pool_size: 16,
            connect_timeout: Duration::from_secs(5),
            audit_retention: DEFAULT_AUDIT_RETENTION,
        }
    }
}

impl PostgresOptions {
    /// How many connections the pool keeps at most (default 16).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size.max(1);
        self
    }

    /// How long connecting, or waiting for a pooled connection, may take
    /// before the operation fails (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Keep audit events for `retention` (default
    /// [`DEFAULT_AUDIT_RETENTION`]): [`Store::sweep`] deletes older ones,
    /// judged by the server's clock.
    pub fn audit_retention(mut self, retention: Duration) -> Self {
        self.audit_retention = retention;
        self
    }
}

/// Records in PostgreSQL. See the [module docs](self).
pub struct PostgresStore {
    /// `None` once closed.
    pool: Mutex<Option<bb8::Pool<Manager>>>,
    name: String,
    /// The schema version found on connecting (`None`: created).
    schema_found: Option<u32>,
    waiters: Arc<Waiters>,
    listener: tokio::task::JoinHandle<()>,
    audit_retention: Duration,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("store", &self.name)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

/// A pooled connection with every statement prepared.
struct Conn {
    client: Client,
    claim: Statement,
    checkpoint: Statement,
    renew: Statement,
    complete: Statement,
    release: Statement,
    replace: Statement,
    remove: Statement,
    get: Statement,
    scan: Statement,
    sweep: Statement,
    now: Statement,
}

/// Opens [`Conn`]s for the pool.
struct Manager {
    config: Config,
}

async fn open(config: &Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        // Ends when the client is dropped or the server goes away; the
        // client then reports itself closed and the pool drops it.
        let _ = connection.await;
    });
    Ok(client)
}

impl bb8::ManageConnection for Manager {
    type Connection = Conn;
    type Error = tokio_postgres::Error;

    async fn connect(&self) -> Result<Conn, tokio_postgres::Error> {
        let client = open(&self.config).await?;
        let sql = &*SQL;
        // Prepared concurrently: the client pipelines them.
        let (claim, checkpoint, renew, complete, release, replace, remove, get, scan, sweep, now) =
            tokio::try_join!(
                client.prepare(&sql.claim),
                client.prepare(&sql.checkpoint),
                client.prepare(&sql.renew),
                client.prepare(&sql.complete),
                client.prepare(&sql.release),
                client.prepare(&sql.replace),
                client.prepare(&sql.remove),
                client.prepare(&sql.get),
                client.prepare(&sql.scan),
                client.prepare(&sql.sweep),
                client.prepare(&sql.now),
            )?;
        Ok(Conn {
            client,
            claim,
            checkpoint,
            renew,
            complete,
            release,
            replace,
            remove,
            get,
            scan,
            sweep,
            now,
        })
    }

    async fn is_valid(&self, conn: &mut Conn) -> Result<(), tokio_postgres::Error> {
        conn.client.simple_query("").await.map(drop)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.client.is_closed()
    }
}

/// The advisory lock that serialises migrations of the default schema.
const MIGRATION_LOCK: i64 = 7283640051;

/// The advisory lock, taken without waiting, under which one worker builds
/// the default schema's [`INDEXES`]. Apart from [`MIGRATION_LOCK`], so
/// that a build in progress holds up nobody's migration check.
const INDEX_LOCK: i64 = 7283640052;

/// With a hash of the schema's name, [`INDEX_LOCK`] for a schema named in
/// the URL.
const SCHEMA_INDEX_LOCK: i32 = 728364006;

/// With a hash of its name, the advisory lock (two-key form, apart from
/// [`MIGRATION_LOCK`]) that serialises migrations of a schema named in the
/// URL.
const SCHEMA_MIGRATION_LOCK: i32 = 728364005;

/// `url` without its `schema` query parameter, and that parameter's
/// value, checked: a PostgreSQL identifier idem can use unquoted and
/// unambiguous (lower-case ASCII letters, digits and `_`, not starting with
/// a digit or `pg_`, at most 63 bytes).
fn take_schema(url: &str) -> Result<(String, Option<String>), StoreError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), None));
    };
    let mut schema = None;
    let mut rest = Vec::new();
    for param in query.split('&') {
        match param.split_once('=') {
            Some(("schema", value)) => {
                if schema.replace(value).is_some() {
                    return Err(StoreError::Config(format!(
                        "{} names the schema twice",
                        redact(url)
                    )));
                }
            }
            _ => rest.push(param),
        }
    }
    if let Some(name) = schema {
        let valid = !name.is_empty()
            && name.len() <= 63
            && !name.starts_with("pg_")
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(StoreError::Config(format!(
                "schema {name:?} in {} is not a usable schema name: write lower-case letters, \
                 digits and _ (not first a digit, not starting with pg_, at most 63 bytes)",
                redact(url)
            )));
        }
    }
    let url = match rest.is_empty() {
        true => base.to_owned(),
        false => format!("{base}?{}", rest.join("&")),
    };
    Ok((url, schema.map(str::to_owned)))
}

impl PostgresStore {
    /// Connect to `url` (`postgres://user[:password]@host[:port]/db`, with
    /// `?schema=NAME` for a schema of idem's own: see the
    /// [module docs](self)) with default options.
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connect to `url`, create or migrate the schema, and start the
    /// listener that wakes waiters.
    ///
    /// Fails with [`StoreError::Unavailable`] when the server cannot be
    /// reached, [`StoreError::SchemaTooNew`] when a newer idem created the
    /// schema, and [`StoreError::Config`] for a malformed URL or schema
    /// name.
    pub async fn connect_with(
        url: &str,
        options: PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        let (config, name, schema) = config(url, &options, false)?;
        let client = first_connection(&config, &name, &options).await?;
        let found = migrate(client, &name, schema.as_deref()).await?;
        Ok(Self::start(config, name, &options, found).await)
    }

    /// Connect to `url` for reading only, with default options. See
    /// [`PostgresStore::connect_read_only_with`].
    pub async fn connect_read_only(url: &str) -> Result<PostgresStore, StoreError> {
        Self::connect_read_only_with(url, PostgresOptions::default()).await
    }

    /// Connect to `url` for reading only: nothing is created or migrated,
    /// and every session runs with `default_transaction_read_only = on`,
    /// so the server itself refuses anything that would write, as
    /// [`StoreError::ReadOnly`]. Reads work as on a store connected
    /// read-write.
    ///
    /// Refuses, changing nothing: a database or PostgreSQL schema without
    /// idem's tables and schema version ([`StoreError::NotAnIdemStore`]),
    /// a schema older than [`OLDEST_READABLE`]
    /// ([`StoreError::SchemaTooOld`]) or newer than [`SCHEMA_VERSION`]
    /// ([`StoreError::SchemaTooNew`]); otherwise fails as
    /// [`PostgresStore::connect_with`] does.
    pub async fn connect_read_only_with(
        url: &str,
        options: PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        let (config, name, schema) = config(url, &options, true)?;
        let client = first_connection(&config, &name, &options).await?;
        let found = check_read_only(&client, &name, schema.as_deref()).await?;
        Ok(Self::start(config, name, &options, Some(found)).await)
    }

    /// The schema version the database had when this store connected:
    /// `None` when this store created the schema, an older version than
    /// [`SCHEMA_VERSION`] when a store connected read-write migrated it (a
    /// store connected read-only never does).
    pub fn schema_found(&self) -> Option<u32> {
        self.schema_found
    }
}

/// The driver's configuration for `url`, its name for messages (password
/// hidden) and the PostgreSQL schema it names; `read_only` makes every
/// session's transactions read-only.
fn config(
    url: &str,
    options: &PostgresOptions,
    read_only: bool,
) -> Result<(Config, String, Option<String>), StoreError> {
    let name = redact(url);
    let (driver_url, schema) = take_schema(url)?;
    let mut config = Config::from_str(&driver_url)
        .map_err(|e| StoreError::Config(format!("bad PostgreSQL URL {name}: {e}")))?;
    // Every connection, pooled and listening, resolves idem's unqualified
    // names in the schema, and a read-only store's sessions refuse writes;
    // `options` the URL already gives are kept.
    let mut settings = Vec::new();
    if let Some(schema) = &schema {
        settings.push(format!("-c search_path={schema}"));
    }
    if read_only {
        settings.push("-c default_transaction_read_only=on".to_owned());
    }
    if !settings.is_empty() {
        let settings = settings.join(" ");
        let options = match config.get_options() {
            Some(given) => format!("{given} {settings}"),
            None => settings,
        };
        config.options(&options);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(options.connect_timeout);
    }
    config.application_name("idem");
    Ok((config, name, schema))
}

/// The connection that checks (or migrates) the schema.
async fn first_connection(
    config: &Config,
    name: &str,
    options: &PostgresOptions,
) -> Result<Client, StoreError> {
    tokio::time::timeout(options.connect_timeout, open(config))
        .await
        .map_err(|_| StoreError::Unavailable {
            store: name.to_owned(),
            cause: format!("no connection within {:?}", options.connect_timeout).into(),
        })?
        .map_err(|e| error(name, e))
}

impl PostgresStore {
    /// The pool and the listener, on a checked schema.
    async fn start(
        config: Config,
        name: String,
        options: &PostgresOptions,
        schema_found: Option<u32>,
    ) -> PostgresStore {
        let pool = bb8::Pool::builder()
            .max_size(options.pool_size)
            .connection_timeout(options.connect_timeout)
            // A checkout must not cost a round trip; broken connections are
            // noticed by `has_broken` and replaced.
            .test_on_check_out(false)
            .build_unchecked(Manager {
                config: config.clone(),
            });

        let waiters = Arc::new(Waiters::new(SAFETY_POLL));
        let (listening, ready) = tokio::sync::oneshot::channel();
        let listener = tokio::spawn(listen(
            config,
            waiters.clone(),
            options.connect_timeout,
            listening,
        ));
        let _ = tokio::time::timeout(options.connect_timeout, ready).await;
        PostgresStore {
            pool: Mutex::new(Some(pool)),
            name,
            schema_found,
            waiters,
            listener,
            audit_retention: options.audit_retention,
        }
    }

    /// A pooled connection, or [`StoreError::Closed`].
    async fn conn(&self) -> Result<bb8::PooledConnection<'static, Manager>, StoreError> {
        let pool = self.pool.lock().expect("not poisoned").clone();
        let Some(pool) = pool else {
            return Err(StoreError::Closed {
                store: self.name.clone(),
            });
        };
        pool.get_owned().await.map_err(|e| match e {
            bb8::RunError::User(e) => self.error(e),
            bb8::RunError::TimedOut => StoreError::Unavailable {
                store: self.name.clone(),
                cause: "timed out waiting for a connection".into(),
            },
        })
    }

    fn error(&self, e: tokio_postgres::Error) -> StoreError {
        error(&self.name, e)
    }

    /// Run a fenced write and turn "matched nothing" into the rejection.
    /// Returns the new fence a replace wrote (`None` for other writes).
    async fn fenced(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        statement: impl Fn(&Conn) -> &Statement,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Option<Fence>, StoreError> {
        let conn = self.conn().await?;
        let rows = conn
            .client
            .query(statement(&conn), params)
            .await
            .map_err(|e| self.error(e))?;
        self.fenced_answer(key, fence, &rows)
    }

    /// What a fenced write's rows say: the new fence of a replace, or the
    /// rejection when it matched nothing.
    fn fenced_answer(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        rows: &[Row],
    ) -> Result<Option<Fence>, StoreError> {
        let Some(row) = rows.first() else {
            return Err(StoreError::StaleFence {
                key: key.clone(),
                given: fence,
                current: FenceHolder::Nobody,
            });
        };
        let status: &str = row.get(0);
        if status == "ok" {
            return Ok(row.get::<_, Option<i64>>(2).map(|f| Fence(f as u64)));
        }
        let now: i64 = row.get(4);
        let live = row.get::<_, Option<i64>>(3).is_some_and(|e| e > now);
        let current = match (row.get::<_, i16>(1), Fence(row.get::<_, i64>(2) as u64)) {
            (IN_FLIGHT, f) => FenceHolder::InFlight(f),
            (AWAITING_APPROVAL, f) if live => FenceHolder::AwaitingApproval(f),
            (COMPLETED, f) if live => FenceHolder::Completed(f),
            _ => FenceHolder::Nobody,
        };
        Err(StoreError::StaleFence {
            key: key.clone(),
            given: fence,
            current,
        })
    }

    async fn read(&self, key: &IdempotencyKey) -> Result<(Option<Record>, Timestamp), StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .client
            .query_one(&conn.get, &[&key.as_str()])
            .await
            .map_err(|e| self.error(e))?;
        let now = Timestamp(row.get::<_, i64>(0) as u64);
        let record = match row.get::<_, Option<String>>(1) {
            None => None,
            Some(_) => Some(decode(key, &row, 1)?),
        };
        Ok((record.filter(|r| !r.is_expired(now)), now))
    }
}

/// The typed error for a PostgreSQL failure; `e` stays its source.
fn error(store: &str, e: tokio_postgres::Error) -> StoreError {
    let store = store.to_owned();
    let Some(db) = e.as_db_error() else {
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(": ");
            message.push_str(&s.to_string());
            source = s.source();
        }
        return StoreError::Unavailable {
            store,
            cause: Cause::with_source(message, e),
        };
    };
    let message = format!("{} ({})", db.message(), db.code().code());
    let code = db.code().clone();
    let cause = Cause::with_source(message, e);
    match code {
        SqlState::DISK_FULL | SqlState::OUT_OF_MEMORY | SqlState::INSUFFICIENT_RESOURCES => {
            StoreError::Full { store, cause }
        }
        SqlState::READ_ONLY_SQL_TRANSACTION => StoreError::ReadOnly { store, cause },
        _ => StoreError::Unavailable { store, cause },
    }
}

/// Create the schema, or migrate it to [`SCHEMA_VERSION`], in one
/// transaction under an advisory lock so concurrent starts do it once;
/// first the PostgreSQL schema `schema` (already the connection's
/// `search_path`), if one is named and missing. Then, after the commit,
/// build any of [`INDEXES`] missing ([`build_indexes`]). Returns the
/// version found (`None`: created).
async fn migrate(
    mut client: Client,
    name: &str,
    schema: Option<&str>,
) -> Result<Option<u32>, StoreError> {
    let fail = |e| error(name, e);
    let tx = client.transaction().await.map_err(fail)?;
    match schema {
        None => {
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await
                .map_err(fail)?;
        }
        Some(schema) => {
            tx.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2))",
                &[&SCHEMA_MIGRATION_LOCK, &schema],
            )
            .await
            .map_err(fail)?;
            // Looked up first: CREATE SCHEMA IF NOT EXISTS needs the right
            // to create schemas even when this one exists.
            let exists = tx
                .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&schema])
                .await
                .map_err(fail)?
                .is_some();
            if !exists {
                // A checked name: lower-case letters, digits and _.
                tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                    .await
                    .map_err(fail)?;
            }
        }
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS idem_meta (name text PRIMARY KEY, value bigint NOT NULL);",
    )
    .await
    .map_err(fail)?;
    let found: i64 = tx
        .query_opt(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            &[],
        )
        .await
        .map_err(fail)?
        .map_or(0, |row| row.get(0));
    if found > i64::from(SCHEMA_VERSION) {
        return Err(StoreError::SchemaTooNew {
            store: name.to_owned(),
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: SCHEMA_VERSION,
        });
    }
    for migration in &MIGRATIONS[found.max(0) as usize..] {
        tx.batch_execute(migration).await.map_err(fail)?;
    }
    tx.execute(
        "INSERT INTO idem_meta (name, value) VALUES ('schema_version', $1)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        &[&i64::from(SCHEMA_VERSION)],
    )
    .await
    .map_err(fail)?;
    tx.commit().await.map_err(fail)?;
    build_indexes(&client, schema).await.map_err(fail)?;
    Ok((found > 0).then_some(found as u32))
}

/// Build each of [`INDEXES`] that is missing, with `CREATE INDEX
/// CONCURRENTLY`, which blocks no claim or sweep meanwhile (it cannot run
/// in a transaction, so each statement is sent alone). One worker builds
/// at a time, the one that gets the index lock without waiting; the others
/// go on (a worker waiting for a lock inside a statement would hold a
/// snapshot the build waits for). An index left invalid by an interrupted
/// build is dropped and built again; a build that dies halfway is redone
/// by the next store that connects.
async fn build_indexes(client: &Client, schema: Option<&str>) -> Result<(), tokio_postgres::Error> {
    let locked: bool = match schema {
        None => {
            client
                .query_one("SELECT pg_try_advisory_lock($1)", &[&INDEX_LOCK])
                .await?
        }
        Some(schema) => {
            client
                .query_one(
                    "SELECT pg_try_advisory_lock($1, hashtext($2))",
                    &[&SCHEMA_INDEX_LOCK, &schema],
                )
                .await?
        }
    }
    .get(0);
    if !locked {
        return Ok(());
    }
    for (index, definition) in INDEXES {
        let valid: Option<bool> = client
            .query_opt(
                "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)",
                &[index],
            )
            .await?
            .map(|row| row.get(0));
        match valid {
            Some(true) => continue,
            Some(false) => {
                client
                    .batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {index}"))
                    .await?
            }
            None => {}
        }
        client
            .batch_execute(&format!(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {definition}"
            ))
            .await?;
    }
    // The session ends with the connection, and the lock with it; released
    // now all the same.
    client
        .batch_execute("SELECT pg_advisory_unlock_all()")
        .await
}

/// Check, for [`PostgresStore::connect_read_only`], that idem's schema is
/// where the connection's `search_path` points and that this build reads
/// its version, without writing anything; that version.
async fn check_read_only(
    client: &Client,
    name: &str,
    schema: Option<&str>,
) -> Result<u32, StoreError> {
    let fail = |e| error(name, e);
    let tables: i64 = client
        .query_one(
            "SELECT (to_regclass('idem_meta') IS NOT NULL)::int
                  + (to_regclass('idem_records') IS NOT NULL)::int",
            &[],
        )
        .await
        .map_err(fail)?
        .get::<_, i32>(0)
        .into();
    let not_idem = |what: String| StoreError::NotAnIdemStore {
        store: name.to_owned(),
        cause: match schema {
            Some(schema) => format!("{what} in schema {schema}"),
            None => format!("{what} in the search path"),
        }
        .into(),
    };
    if tables != 2 {
        return Err(not_idem("no idem_meta and idem_records tables".into()));
    }
    let found: Option<i64> = client
        .query_opt(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            &[],
        )
        .await
        .map_err(fail)?
        .map(|row| row.get(0));
    let Some(found) = found else {
        return Err(not_idem("idem_meta records no schema version".into()));
    };
    let found = u32::try_from(found).unwrap_or(if found < 0 { 0 } else { u32::MAX });
    if found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            store: name.to_owned(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found < OLDEST_READABLE {
        return Err(StoreError::SchemaTooOld {
            store: name.to_owned(),
            found,
            oldest_readable: OLDEST_READABLE,
        });
    }
    Ok(found)
}

/// Decode the record whose columns start at `at` (in the order of
/// [`RECORD`]). Malformed stored JSON is a [`CorruptRecord`]. Rows written
/// by schema version 1 have no call details, worker or audit.
fn decode(key: &IdempotencyKey, row: &Row, at: usize) -> Result<Record, CorruptRecord> {
    let corrupt = |detail: String| CorruptRecord {
        key: key.as_str().to_owned(),
        detail,
    };
    let time = |i: usize| Timestamp(row.get::<_, i64>(at + i) as u64);
    let when = |i: usize, what: &str| {
        row.get::<_, Option<i64>>(at + i)
            .map(|t| Timestamp(t as u64))
            .ok_or_else(|| corrupt(format!("{what} lacks its times")))
    };
    let fence = Fence(row.get::<_, i64>(at + 4) as u64);
    let state = match row.get::<_, i16>(at + 6) {
        IN_FLIGHT => RecordState::InFlight {
            fence,
            lease_until: row
                .get::<_, Option<i64>>(at + 7)
                .map(|t| Timestamp(t as u64))
                .ok_or_else(|| corrupt("an in-flight record has no lease".into()))?,
        },
        AWAITING_APPROVAL => RecordState::AwaitingApproval {
            fence,
            requested_at: when(12, "a record awaiting approval")?,
            expires_at: when(10, "a record awaiting approval")?,
            message: row.get::<_, Option<String>>(at + 13).unwrap_or_default(),
        },
        _ => {
            let outcome: Option<String> = row.get(at + 8);
            RecordState::Completed {
                fence,
                outcome: serde_json::from_str(
                    &outcome.ok_or_else(|| corrupt("a completed record has no outcome".into()))?,
                )
                .map_err(|e| corrupt(format!("outcome: {e}")))?,
                completed_at: when(9, "a completed record")?,
                expires_at: when(10, "a completed record")?,
            }
        }
    };
    let steps_text: String = row.get(at + 11);
    let raw: BTreeMap<String, Value> =
        serde_json::from_str(&steps_text).map_err(|e| corrupt(format!("steps: {e}")))?;
    let mut steps = BTreeMap::new();
    for (name, value) in raw {
        let Value::String(text) = value else {
            return Err(corrupt(format!("step {name} is not stored as JSON text")));
        };
        let value =
            serde_json::from_str(&text).map_err(|e| corrupt(format!("step {name}: {e}")))?;
        steps.insert(name, value);
    }
    let audit_text: String = row.get(at + 20);
    let audit: Vec<AuditEntry> =
        serde_json::from_str(&audit_text).map_err(|e| corrupt(format!("audit: {e}")))?;
    Ok(Record {
        key: key.clone(),
        tool: row.get(at + 1),
        fingerprint: Fingerprint::new(row.get::<_, String>(at + 2)),
        created_at: time(3),
        state,
        steps,
        info: CallInfo {
            namespace: row.get(at + 14),
            call_id: row.get(at + 15),
            run_id: row.get(at + 16),
            step: row.get::<_, Option<i64>>(at + 17).map(|s| s as u64),
            args: row.get(at + 18),
            ttl: row
                .get::<_, Option<i64>>(at + 21)
                .map(|ms| Duration::from_millis(ms.max(0) as u64)),
        },
        worker: row.get(at + 19),
        audit,
    })
}

/// Steps as stored: each step's value as JSON text, so that it comes back
/// byte for byte.
fn encode_steps(steps: &BTreeMap<String, Value>) -> String {
    let stored: serde_json::Map<String, Value> = steps
        .iter()
        .map(|(name, value)| {
            let text = serde_json::to_string(value).expect("a JSON value serializes");
            (name.clone(), Value::String(text))
        })
        .collect();
    Value::Object(stored).to_string()
}

/// An instant as stored: milliseconds, at most `i64::MAX` (a later instant
/// would read back as a negative, long past, one).
fn stored(t: Timestamp) -> i64 {
    t.0.min(i64::MAX as u64) as i64
}

/// A record's columns as a replace writes them (`$4` to `$22`).
struct RecordColumns<'a> {
    record: &'a Record,
    fingerprint: &'a str,
    created_at: i64,
    state: StateColumns<'a>,
    steps: String,
    audit: String,
    step: Option<i64>,
    ttl: Option<i64>,
}

impl<'a> RecordColumns<'a> {
    fn of(record: &'a Record) -> Self {
        RecordColumns {
            record,
            fingerprint: record.fingerprint.as_str(),
            created_at: stored(record.created_at),
            state: StateColumns::of(&record.state),
            steps: encode_steps(&record.steps),
            audit: serde_json::to_string(&record.audit).expect("an audit serializes"),
            step: record.info.step.map(|s| s as i64),
            ttl: record.info.ttl.map(millis),
        }
    }

    /// Append the parameters `$4` to `$22`, in the statement's order.
    fn push<'p>(&'p self, params: &mut Vec<&'p (dyn ToSql + Sync)>) {
        let (r, c, info) = (self.record, &self.state, &self.record.info);
        params.extend([
            &r.tool as &(dyn ToSql + Sync),
            &self.fingerprint,
            &self.created_at,
            &c.state,
            &c.lease_until,
            &c.outcome,
            &c.completed_at,
            &c.expires_at,
            &self.steps,
            &c.requested_at,
            &c.message,
            &info.namespace,
            &info.call_id,
            &info.run_id,
            &self.step,
            &info.args,
            &r.worker,
            &self.audit,
            &self.ttl,
        ]);
    }
}

/// The columns a record's state is stored in (the rest are `NULL`).
#[derive(Default)]
struct StateColumns<'a> {
    state: i16,
    lease_until: Option<i64>,
    outcome: Option<String>,
    completed_at: Option<i64>,
    expires_at: Option<i64>,
    requested_at: Option<i64>,
    message: Option<&'a str>,
}

impl<'a> StateColumns<'a> {
    fn of(state: &'a RecordState) -> Self {
        match state {
            RecordState::InFlight { lease_until, .. } => StateColumns {
                state: IN_FLIGHT,
                lease_until: Some(stored(*lease_until)),
                ..Default::default()
            },
            RecordState::AwaitingApproval {
                requested_at,
                expires_at,
                message,
                ..
            } => StateColumns {
                state: AWAITING_APPROVAL,
                expires_at: Some(stored(*expires_at)),
                requested_at: Some(stored(*requested_at)),
                message: Some(message),
                ..Default::default()
            },
            RecordState::Completed {
                outcome,
                completed_at,
                expires_at,
                ..
            } => StateColumns {
                state: COMPLETED,
                outcome: Some(serde_json::to_string(outcome).expect("an outcome serializes")),
                completed_at: Some(stored(*completed_at)),
                expires_at: Some(stored(*expires_at)),
                ..Default::default()
            },
        }
    }
}

/// How the replace statements code an [`ExpectedState`] (`$3`).
fn expected_state(state: ExpectedState) -> i16 {
    match state {
        ExpectedState::InFlight => 0,
        ExpectedState::LeaseExpired => 1,
        ExpectedState::AwaitingApproval => 2,
        ExpectedState::Completed => 3,
    }
}

/// Keep one connection LISTENing on `idem_done`, waking the waiters of
/// each notified key. After every (re)connection all waiters re-read, since
/// notifications sent while disconnected are lost.
async fn listen(
    config: Config,
    waiters: Arc<Waiters>,
    connect_timeout: Duration,
    listening: tokio::sync::oneshot::Sender<()>,
) {
    let mut listening = Some(listening);
    let mut pause = Duration::from_millis(100);
    loop {
        if let Ok(Ok((client, mut connection))) =
            tokio::time::timeout(connect_timeout, config.connect(NoTls)).await
        {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            let subscribe = client.batch_execute(LISTEN);
            tokio::pin!(subscribe);
            let mut subscribed = false;
            loop {
                tokio::select! {
                    done = &mut subscribe, if !subscribed => {
                        if done.is_err() {
                            break;
                        }
                        subscribed = true;
                        pause = Duration::from_millis(100);
                        if let Some(tx) = listening.take() {
                            let _ = tx.send(());
                        }
                        waiters.wake_all();
                    }
                    message = messages.next() => match message {
                        Some(Ok(AsyncMessage::Notification(n))) => waiters.wake(n.payload()),
                        Some(Ok(_)) => {}
                        Some(Err(_)) | None => break,
                    },
                }
            }
        }
        waiters.wake_all();
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// A lease or TTL in milliseconds, cut so that `{now} + span` cannot
/// overflow a `bigint`.
fn millis(d: Duration) -> i64 {
    super::span_millis(d) as i64
}

#[async_trait]
impl Store for PostgresStore {
    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let lease = millis(req.lease);
        let step = req.info.step.map(|s| s as i64);
        let ttl = req.info.ttl.map(millis);
        // Normally one pass. A second is needed only when a concurrent
        // claim inserted or changed the row after this statement's snapshot
        // was taken, so neither branch of the statement saw it.
        for _ in 0..8 {
            let conn = self.conn().await?;
            let rows = conn
                .client
                .query(
                    &conn.claim,
                    &[
                        &req.key.as_str(),
                        &req.tool,
                        &req.fingerprint.as_str(),
                        &req.check_fingerprint,
                        &lease,
                        &req.info.namespace,
                        &req.info.call_id,
                        &req.info.run_id,
                        &step,
                        &req.info.args,
                        &req.worker,
                        &ttl,
                    ],
                )
                .await
                .map_err(|e| self.error(e))?;
            let Some(row) = rows.first() else { continue };
            let record = decode(req.key, row, 1)?;
            let now = Timestamp(row.get::<_, i64>(1 + RECORD_COLUMNS) as u64);
            if row.get::<_, bool>(0) {
                let RecordState::InFlight { fence, lease_until } = record.state else {
                    return Err(self.protocol("a claim stored a completed record"));
                };
                return Ok(ClaimOutcome::Acquired {
                    fence,
                    lease_until,
                    steps: record.steps,
                    takeover: row.get::<_, Option<i64>>(6).map(|f| Takeover {
                        previous: Fence(f as u64),
                    }),
                });
            }
            let decision = transition::claim(Some(Arc::new(record)), req, now, || Fence(0));
            if decision.write.is_none() {
                return Ok(decision.claim);
            }
        }
        Err(self.protocol("the claim kept racing with concurrent claims"))
    }

    async fn checkpoint(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        step: &str,
        value: &Value,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let value = serde_json::to_string(value).expect("a JSON value serializes");
        self.fenced(
            key,
            fence,
            |c| &c.checkpoint,
            &[
                &key.as_str(),
                &(fence.0 as i64),
                &step,
                &value,
                &millis(lease),
            ],
        )
        .await
        .map(drop)
    }

    async fn renew(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        self.fenced(
            key,
            fence,
            |c| &c.renew,
            &[&key.as_str(), &(fence.0 as i64), &millis(lease)],
        )
        .await
        .map(drop)
    }

    async fn complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let outcome = serde_json::to_string(outcome).expect("an outcome serializes");
        self.fenced(
            key,
            fence,
            |c| &c.complete,
            &[&key.as_str(), &(fence.0 as i64), &outcome, &millis(ttl)],
        )
        .await
        .map(drop)
    }

    async fn release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        self.fenced(
            key,
            fence,
            |c| &c.release,
            &[&key.as_str(), &(fence.0 as i64)],
        )
        .await
        .map(drop)
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
        let (fence, state) = (expected.fence.0 as i64, expected_state(expected.state));
        let key_text = key.as_str();
        let columns = new.map(RecordColumns::of);
        let event = audit.map(|e| (stored(e.at), audit_text(e)));
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&key_text, &fence, &state];
        if let Some(columns) = &columns {
            columns.push(&mut params);
        }
        if let Some((at, text)) = &event {
            params.push(at);
            params.push(text);
        }
        let conn = self.conn().await?;
        let rows = match (new.is_some(), event.is_some()) {
            (true, false) => conn.client.query(&conn.replace, &params).await,
            (false, false) => conn.client.query(&conn.remove, &params).await,
            // Operator actions, rare: not prepared per connection.
            (true, true) => conn.client.query(&AUDITED_SQL.replace, &params).await,
            (false, true) => conn.client.query(&AUDITED_SQL.remove, &params).await,
        }
        .map_err(|e| self.error(e))?;
        match (self.fenced_answer(key, expected.fence, &rows)?, new) {
            (Some(fence), Some(_)) => Ok(Some(fence)),
            (None, Some(_)) => Err(self.protocol("a replace returned no fence")),
            (_, None) => Ok(None),
        }
    }

    /// Pages in key order; the cursor is the last key of a full page.
    async fn scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        let limit = limit.clamp(1, SCAN_MAX);
        let conn = self.conn().await?;
        let rows = conn
            .client
            .query(&conn.scan, &[&cursor.unwrap_or(""), &(limit as i64)])
            .await
            .map_err(|e| self.error(e))?;
        let mut records = Vec::with_capacity(rows.len());
        let mut corrupt = Vec::new();
        let mut last = None;
        for row in &rows {
            let now = Timestamp(row.get::<_, i64>(0) as u64);
            let text: String = row.get(1);
            match IdempotencyKey::parse(&text) {
                Ok(key) => match decode(&key, row, 1) {
                    Ok(record) if record.is_expired(now) => {}
                    Ok(record) => records.push(record),
                    Err(e) => corrupt.push(e),
                },
                Err(e) => corrupt.push(CorruptRecord {
                    key: text.clone(),
                    detail: format!("stored under a malformed key: {e}"),
                }),
            }
            last = Some(text);
        }
        Ok(ScanPage {
            records,
            corrupt,
            cursor: if rows.len() == limit { last } else { None },
        })
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        let conn = self.conn().await?;
        self.sweep_audit(&conn).await?;
        let mut total = 0;
        loop {
            let n = conn
                .client
                .execute(&conn.sweep, &[&SWEEP_BATCH])
                .await
                .map_err(|e| self.error(e))?;
            total += n;
            if n < SWEEP_BATCH as u64 {
                return Ok(total);
            }
        }
    }

    async fn append_audit(&self, event: &AuditEvent) -> Result<u64, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .client
            .query_one(
                AUDIT_APPEND,
                &[&stored(event.at), &event.key.as_str(), &audit_text(event)],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    /// Pages by position in the log; the cursor is the `at` and `seq` of
    /// the page's last event.
    async fn audit(
        &self,
        query: &AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        let (after_at, after_seq) = match cursor {
            None => (-1, 0),
            Some(c) => audit::parse_position_cursor(c)
                .map(|(at, seq)| (stored(at), seq as i64))
                .ok_or_else(|| {
                    StoreError::Config(format!("{c:?} is not an audit cursor of {}", self.name))
                })?,
        };
        let limit = limit.clamp(1, audit::MAX_AUDIT_PAGE);
        let conn = self.conn().await?;
        let rows = conn
            .client
            .query(
                AUDIT_PAGE,
                &[
                    &after_at,
                    &after_seq,
                    &query.key.as_ref().map(|k| k.as_str()),
                    &query.since.map_or(i64::MIN, stored),
                    &query.until.map_or(i64::MAX, stored),
                    &(limit as i64 + 1),
                ],
            )
            .await
            .map_err(|e| self.error(e))?;
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            let seq: i64 = row.get(0);
            let event: AuditEvent =
                serde_json::from_str(row.get(1)).map_err(|e| CorruptRecord {
                    key: format!("audit event {seq}"),
                    detail: e.to_string(),
                })?;
            events.push(AuditEvent {
                seq: Some(seq as u64),
                ..event
            });
        }
        Ok(audit::page_of(events, limit))
    }

    async fn now(&self) -> Result<Timestamp, StoreError> {
        let conn = self.conn().await?;
        let row = conn
            .client
            .query_one(&conn.now, &[])
            .await
            .map_err(|e| self.error(e))?;
        Ok(Timestamp(row.get::<_, i64>(0) as u64))
    }

    /// Stop the listener and drop the pool: idle connections close now,
    /// connections in use when their operation ends (every transition is
    /// one statement, so none is left half done). Later operations, and
    /// waiters, fail with [`StoreError::Closed`].
    async fn close(&self) {
        let pool = self.pool.lock().expect("not poisoned").take();
        drop(pool);
        self.listener.abort();
        self.waiters.wake_all();
    }
}

impl PostgresStore {
    fn protocol(&self, what: &str) -> StoreError {
        StoreError::Unavailable {
            store: self.name.clone(),
            cause: what.into(),
        }
    }
}

// The audit log (schema version 3). Its statements are sent unprepared:
// operators' actions are rare, and every pooled connection need not
// prepare them.

/// Append an event; returns its seq.
const AUDIT_APPEND: &str =
    "INSERT INTO idem_audit (at, key, event) VALUES ($1, $2, $3) RETURNING seq";

/// A page of events after the position (`$1` at, `$2` seq), of key `$3`
/// (all keys when `NULL`), at or after `$4` and before `$5`.
const AUDIT_PAGE: &str = "SELECT seq, event FROM idem_audit
     WHERE (at > $1 OR (at = $1 AND seq > $2))
       AND ($3::text IS NULL OR key = $3::text)
       AND at >= $4 AND at < $5
     ORDER BY at, seq
     LIMIT $6";

/// Delete at most `$2` events older than `$1` milliseconds by the
/// server's clock; returns how many went.
static AUDIT_SWEEP: LazyLock<String> = LazyLock::new(|| {
    "DELETE FROM idem_audit WHERE seq IN (
         SELECT seq FROM idem_audit WHERE at < {now} - $1 ORDER BY at LIMIT $2
     )"
    .replace(
        "{now}",
        "floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint",
    )
});

/// The replace and remove statements, each also appending an event (at
/// `$23`, text `$24` for a replace; `$4`, `$5` for a remove) from the same
/// statement, for exactly the row it changed: a refused swap changes no
/// row and appends nothing.
struct AuditedSql {
    replace: String,
    remove: String,
}

static AUDITED_SQL: LazyLock<AuditedSql> = LazyLock::new(|| {
    let audited = |statement: &str, at: &str, event: &str| {
        let anchor = "), notified AS (";
        assert_eq!(statement.matches(anchor).count(), 1, "one notify CTE");
        statement.replace(
            anchor,
            &format!(
                "), audited AS (
                   INSERT INTO idem_audit (at, key, event)
                   SELECT {at}::bigint, changed.key, {event}::text FROM changed
                 ), notified AS ("
            ),
        )
    };
    AuditedSql {
        replace: audited(&SQL.replace, "$23", "$24"),
        remove: audited(&SQL.remove, "$4", "$5"),
    }
});

/// An event as stored: JSON without its seq (the column holds it).
fn audit_text(event: &AuditEvent) -> String {
    let stored = AuditEvent {
        seq: None,
        ..event.clone()
    };
    serde_json::to_string(&stored).expect("an audit event serializes")
}

impl PostgresStore {
    /// Delete the audit events older than the retention, in batches.
    async fn sweep_audit(&self, conn: &Conn) -> Result<(), StoreError> {
        let retention = millis(self.audit_retention);
        loop {
            let n = conn
                .client
                .execute(AUDIT_SWEEP.as_str(), &[&retention, &SWEEP_BATCH])
                .await
                .map_err(|e| self.error(e))?;
            if n < SWEEP_BATCH as u64 {
                return Ok(());
            }
        }
    }
}
