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
//! * Fences come from a sequence, so they are unique per key forever —
//!   with one exception, below.
//! * A claim that need not be durable ([`ClaimRequest::durable`] `false`,
//!   an `idempotent_write`'s) commits with `synchronous_commit = off` for
//!   its own transaction: the server answers before flushing its WAL, and
//!   flushes it within `wal_writer_delay`. Every other write waits for the
//!   flush as the server is configured to. A server crash in between
//!   loses the claim; the call then runs again with the same key, which
//!   its class allows. The sequence's advance may be lost with it, so the
//!   lost claim's fence can be handed out again for the same key: its
//!   first owner, still running, and the new one may then both finish the
//!   call, and the first completion is recorded (the other is refused
//!   as superseded, and its caller is answered from the record when it
//!   calls again).
//! * Times come from the server's clock (`statement_timestamp()`), never
//!   the worker's.
//! * The schema (`idem_meta`, `idem_records`, `idem_audit`, sequence
//!   `idem_fence`) is
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
//! * Scanning pages through the primary key (`key > cursor ORDER BY key`);
//!   the open records ([`StoreExt::scan_open`](idem_runtime::store::StoreExt::scan_open)) through a partial index of
//!   them, newest first (`(created_at, key) < cursor ORDER BY created_at
//!   DESC, key DESC`), so a page reads about as many rows as it returns.
//! * Waiters ([`StoreExt::wait`](idem_runtime::store::StoreExt::wait), for a completion or a decision) are woken by
//!   LISTEN/NOTIFY: completing, releasing or replacing a record (an
//!   approval or a denial is a replace) notifies channel `idem_done` with
//!   the key, inside the same statement (delivered at commit), and one
//!   listening connection per store, in every process, wakes the local
//!   waiters of that key, typically within a millisecond. As a safety net
//!   waiters also re-read their record with a back-off from 5 ms to
//!   [`SAFETY_POLL`].
//! * Connections come from a [`bb8`] pool; each connection prepares every
//!   statement once when it opens. A connection the server closed while it
//!   sat in the pool (a restart of the server, an idle timeout, a
//!   failover) is seen closed when it is checked out, without a round
//!   trip, and replaced by a fresh one before any request is sent on it:
//!   a restart of the server costs no call made after it is back. A
//!   connection that breaks *with* a request on it is the call's failure:
//!   only reads, renewals, checkpoints and sweeps, which are the same
//!   applied twice, are sent once more; a claim, a completion, a release,
//!   a replacement or an audit append is never sent twice, so a
//!   transition is never applied twice.
//! * TLS follows libpq's parameters, so a provider's URL works as pasted:
//!   `sslmode` (`disable`; `prefer`, the default, which asks for TLS first
//!   and uses it whenever the server offers it; `require`; `verify-ca`;
//!   `verify-full`), `sslrootcert` (a CA file, or `system`), `sslcert`
//!   and `sslkey` (a client certificate), and `channel_binding`, through
//!   tokio-postgres with a rustls connector. `prefer` and `require`
//!   encrypt without verifying the certificate, as libpq's do, unless a
//!   CA file is named (`sslrootcert`, or the file `IDEM_TLS_CA_FILE`
//!   names); a connection that cannot be made for TLS's sake is a
//!   [`StoreError::Tls`] saying why and what to write.

mod backend;
mod codec;
mod connection;
mod connector;
mod error;
mod listener;
mod options;
mod schema;
mod statements;
mod tls;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use tokio_postgres::types::ToSql;

use self::codec::{
    audit_text, decode, expected_state, millis, stored, RecordColumns, RECORD_COLUMNS,
};
use self::connection::Manager;
use self::statements::{
    on_conn, Resend, AUDITED_SQL, AUDIT_APPEND, AUDIT_PAGE, SCAN_MAX, SQL, SWEEP_BATCH,
};
use idem_runtime::audit::{self, AuditEvent, AuditPage, AuditQuery};
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{CorruptRecord, Fence, Outcome, Record, RecordState};
use idem_runtime::store::backend::Waiters;
use idem_runtime::store::{
    transition, ClaimOutcome, ClaimRequest, Expected, OpenCursor, ScanPage, Store, StoreError,
    Takeover,
};
use idem_runtime::store::{Answer, Operation, WaitFor};

pub use self::listener::SAFETY_POLL;
pub use self::options::PostgresOptions;
pub use self::schema::{OLDEST_READABLE, SCHEMA_VERSION};
pub use backend::{Postgres, BACKEND};

/// The statements [`StoreExt::scan_open`](idem_runtime::store::StoreExt::scan_open) runs — the first page (`$1` how
/// many rows), a page after a cursor (`$1` its creation time, `$2` its key,
/// `$3` how many rows) — for tests that `EXPLAIN` them. Not a stable
/// interface.
#[doc(hidden)]
pub fn scan_open_statements() -> [&'static str; 2] {
    [&SQL.scan_open_first, &SQL.scan_open_after]
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

#[async_trait]
impl Store for PostgresStore {
    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn call(&self, op: Operation<'_>) -> Result<Answer, StoreError> {
        idem_runtime::answer_operation!(self, op)
    }
}

/// The operations [`Store::call`] answers, one method each
/// ([`answer_operation!`](idem_runtime::answer_operation)).
impl PostgresStore {
    async fn on_claim(&self, req: &ClaimRequest<'_>) -> Result<ClaimOutcome, StoreError> {
        let lease = millis(req.lease);
        let step = req.info.step.map(|s| s as i64);
        let ttl = req.info.ttl.map(millis);
        // Normally one pass. A second is needed only when a concurrent
        // claim inserted or changed the row after this statement's snapshot
        // was taken, so neither branch of the statement saw it.
        for _ in 0..8 {
            let params: [&(dyn ToSql + Sync); 13] = [
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
                &req.info.reason,
            ];
            let rows = on_conn!(self, Resend::Never, |conn| async {
                let claim = match req.durable {
                    true => &conn.claim,
                    false => &conn.claim_relaxed,
                };
                conn.client.query(claim, &params).await
            })?;
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

    async fn on_checkpoint(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        step: &str,
        value: &Value,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let value = serde_json::to_string(value).expect("a JSON value serializes");
        self.fenced(
            Resend::Safe,
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

    async fn on_renew(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        lease: Duration,
    ) -> Result<(), StoreError> {
        self.fenced(
            Resend::Safe,
            key,
            fence,
            |c| &c.renew,
            &[&key.as_str(), &(fence.0 as i64), &millis(lease)],
        )
        .await
        .map(drop)
    }

    async fn on_complete(
        &self,
        key: &IdempotencyKey,
        fence: Fence,
        outcome: &Outcome,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let outcome = serde_json::to_string(outcome).expect("an outcome serializes");
        self.fenced(
            Resend::Never,
            key,
            fence,
            |c| &c.complete,
            &[&key.as_str(), &(fence.0 as i64), &outcome, &millis(ttl)],
        )
        .await
        .map(drop)
    }

    async fn on_release(&self, key: &IdempotencyKey, fence: Fence) -> Result<(), StoreError> {
        self.fenced(
            Resend::Never,
            key,
            fence,
            |c| &c.release,
            &[&key.as_str(), &(fence.0 as i64)],
        )
        .await
        .map(drop)
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
        let rows = on_conn!(self, Resend::Never, |conn| async {
            match (new.is_some(), event.is_some()) {
                (true, false) => conn.client.query(&conn.replace, &params).await,
                (false, false) => conn.client.query(&conn.remove, &params).await,
                // Operator actions, rare: not prepared per connection.
                (true, true) => conn.client.query(&AUDITED_SQL.replace, &params).await,
                (false, true) => conn.client.query(&AUDITED_SQL.remove, &params).await,
            }
        })?;
        match (self.fenced_answer(key, expected.fence, &rows)?, new) {
            (Some(fence), Some(_)) => Ok(Some(fence)),
            (None, Some(_)) => Err(self.protocol("a replace returned no fence")),
            (_, None) => Ok(None),
        }
    }

    /// Pages in key order; the cursor is the last key of a full page.
    async fn on_scan(&self, cursor: Option<&str>, limit: usize) -> Result<ScanPage, StoreError> {
        let limit = limit.clamp(1, SCAN_MAX);
        let rows = on_conn!(self, Resend::Safe, |conn| async {
            let params: [&(dyn ToSql + Sync); 2] = [&cursor.unwrap_or(""), &(limit as i64)];
            conn.client.query(&conn.scan, &params).await
        })?;
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

    /// Pages through the partial index `idem_records_open`, newest first:
    /// a page reads about `limit` rows, however many records are settled.
    /// One row more than the page is read, to know whether another page
    /// follows; the cursor is the page's last row.
    async fn on_scan_open(
        &self,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ScanPage, StoreError> {
        let after = cursor
            .map(|c| OpenCursor::parse_for(&self.name, c))
            .transpose()?;
        let limit = limit.clamp(1, SCAN_MAX);
        let rows_wanted = limit as i64 + 1;
        let rows = on_conn!(self, Resend::Safe, |conn| async {
            match &after {
                None => {
                    conn.client
                        .query(&conn.scan_open_first, &[&rows_wanted])
                        .await
                }
                Some(after) => {
                    conn.client
                        .query(
                            &conn.scan_open_after,
                            &[&stored(after.created_at), &after.key.as_str(), &rows_wanted],
                        )
                        .await
                }
            }
        })?;
        let mut records = Vec::with_capacity(rows.len().min(limit));
        let mut corrupt = Vec::new();
        for row in rows.iter().take(limit) {
            let now = Timestamp(row.get::<_, i64>(0) as u64);
            let text: String = row.get(1);
            match IdempotencyKey::parse(&text) {
                // Checked again on the record itself: a completed row the
                // index counts as open may be settled after all.
                Ok(key) => match decode(&key, row, 1) {
                    Ok(record) if record.is_expired(now) || !record.is_open() => {}
                    Ok(record) => records.push(record),
                    Err(e) => corrupt.push(e),
                },
                Err(e) => corrupt.push(CorruptRecord {
                    key: text.clone(),
                    detail: format!("stored under a malformed key: {e}"),
                }),
            }
        }
        let cursor = match rows.len() > limit {
            true => rows.get(limit - 1).map(|row| {
                // `created_at` is the record's fourth column.
                format!("{}:{}", row.get::<_, i64>(4), row.get::<_, &str>(1))
            }),
            false => None,
        };
        Ok(ScanPage {
            records,
            corrupt,
            cursor,
        })
    }

    async fn on_sweep(&self) -> Result<u64, StoreError> {
        on_conn!(self, Resend::Safe, |conn| async {
            self.sweep_audit(conn).await?;
            let mut total = 0;
            loop {
                let n = conn.client.execute(&conn.sweep, &[&SWEEP_BATCH]).await?;
                total += n;
                if n < SWEEP_BATCH as u64 {
                    return Ok::<_, tokio_postgres::Error>(total);
                }
            }
        })
    }

    async fn on_append_audit(&self, event: &AuditEvent) -> Result<u64, StoreError> {
        let params: [&(dyn ToSql + Sync); 3] =
            [&stored(event.at), &event.key.as_str(), &audit_text(event)];
        let row = on_conn!(self, Resend::Never, |conn| async {
            conn.client.query_one(AUDIT_APPEND, &params).await
        })?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    /// Pages by position in the log; the cursor is the `at` and `seq` of
    /// the page's last event.
    async fn on_audit(
        &self,
        query: &AuditQuery,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<AuditPage, StoreError> {
        let (after_at, after_seq) = match cursor {
            None => (-1, 0),
            Some(c) => audit::parse_position_cursor(c)
                .map(|(at, seq)| (stored(at), seq as i64))
                .ok_or_else(|| StoreError::BadCursor {
                    store: self.name.clone(),
                    cursor: c.to_owned(),
                    kind: "audit",
                })?,
        };
        let limit = limit.clamp(1, audit::MAX_AUDIT_PAGE);
        let params: [&(dyn ToSql + Sync); 6] = [
            &after_at,
            &after_seq,
            &query.key.as_ref().map(|k| k.as_str()),
            &query.since.map_or(i64::MIN, stored),
            &query.until.map_or(i64::MAX, stored),
            &(limit as i64 + 1),
        ];
        let rows = on_conn!(self, Resend::Safe, |conn| async {
            conn.client.query(AUDIT_PAGE, &params).await
        })?;
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

    async fn on_now(&self) -> Result<Timestamp, StoreError> {
        let row = on_conn!(self, Resend::Safe, |conn| async {
            conn.client.query_one(&conn.now, &[]).await
        })?;
        Ok(Timestamp(row.get::<_, i64>(0) as u64))
    }

    /// Stop the listener and drop the pool: idle connections close now,
    /// connections in use when their operation ends (every transition is
    /// one statement, so none is left half done). Later operations, and
    /// waiters, fail with [`StoreError::Closed`].
    async fn on_close(&self) {
        let pool = self.pool.lock().expect("not poisoned").take();
        drop(pool);
        self.listener.abort();
        self.waiters.wake_all();
    }
}
