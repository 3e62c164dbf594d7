//! The statements: each transition's SQL, prepared on every pooled
//! connection ([`Conn`]), the audit log's, and the fenced writes and reads
//! that run them.

use std::sync::LazyLock;

use tokio_postgres::{Client, Row, Statement};

use crate::codec::{decode, millis, AWAITING_APPROVAL, COMPLETED, IN_FLIGHT, RECORD};
use crate::PostgresStore;
use idem_runtime::clock::Timestamp;
use idem_runtime::key::IdempotencyKey;
use idem_runtime::record::{Fence, Record, APPROVAL_STEP};

use idem_runtime::store::{FenceHolder, StoreError};

/// How many expired records one sweep statement deletes at most.
pub(super) const SWEEP_BATCH: i64 = 1000;

/// The most records one scan page reads.
pub(super) const SCAN_MAX: usize = 10_000;

/// Which rows are open ([`Record::is_open`]): any but a completed record
/// (state 1) whose outcome is a success or a failure. The predicate of
/// the partial index `idem_records_open` (see `INDEXES`) and of the open
/// scan's statements, word for word, so the planner matches the two.
///
/// The outcome's status is read from the start of its text, which
/// `serde_json` writes first (`{"status":"success",…`: the enum is
/// tagged internally), rather than with `outcome::jsonb ->> 'status'`:
/// the index predicate is evaluated for every row version a claim or a
/// completion writes, and a cast would parse every outcome, however large
/// its output, and fail the write of any outcome that is not JSON. A
/// completed row whose outcome does not start so (a corrupt one, one
/// edited by hand) counts as open: the scan decodes it, reports it if it
/// is corrupt and leaves it out if it is settled after all.
pub(super) const OPEN: &str = "(state <> 1 OR outcome IS NULL \
     OR (outcome NOT LIKE '{\"status\":\"success\"%' \
         AND outcome NOT LIKE '{\"status\":\"failure\"%'))";

/// The statements, with `{now}` (the server's time in milliseconds),
/// `{record}` (a record's columns) and `{approval}` (the approval step's
/// name) filled in.
pub(super) struct Sql {
    pub(super) claim: String,
    /// [`Sql::claim`] for a claim that need not be durable.
    pub(super) claim_relaxed: String,
    pub(super) checkpoint: String,
    pub(super) renew: String,
    pub(super) complete: String,
    pub(super) release: String,
    pub(super) replace: String,
    pub(super) remove: String,
    pub(super) get: String,
    pub(super) scan: String,
    /// The first page of open records (`$1` how many rows).
    pub(super) scan_open_first: String,
    /// A page of open records after the cursor `($1, $2)` (`$3` how
    /// many rows).
    pub(super) scan_open_after: String,
    pub(super) sweep: String,
    pub(super) now: String,
}

pub(super) static SQL: LazyLock<Sql> = LazyLock::new(|| {
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
    // A fenced write: `change` (an UPDATE or a DELETE of key $1's row,
    // returning its key and the column `answer` names), answered 'ok' with
    // `answer` (the new fence of a replace) when it matched, and with the
    // current holder when it matched nothing. With `notify` the key is
    // sent on channel `idem_done`, to wake its waiters.
    let fenced = |change: &str, answer: &str, notify: bool| {
        let (notified, after_notifying) = match notify {
            true => (
                ", notified AS (SELECT pg_notify('idem_done', key) FROM changed)",
                " WHERE (SELECT count(*) FROM notified) >= 0",
            ),
            false => ("", ""),
        };
        fill(&format!(
            "WITH changed AS (
               {change}
             ){notified}
             SELECT 'ok', NULL::smallint, {answer}, NULL::bigint, {{now}} FROM changed{after_notifying}
             UNION ALL {}",
            stale("changed")
        ))
    };
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
    let mut sql = Sql {
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
                    namespace, call_id, run_id, step, args, worker, ttl_ms, reason)
               SELECT $1::text, $2::text, $3::text, {now}, nextval('idem_fence'), 0,
                      {now} + $5::bigint,
                      $6::text, $7::text, $8::text, $9::bigint, $10::text, $11::text,
                      $12::bigint, $13::text
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
                   reason       = CASE WHEN {fresh} THEN excluded.reason ELSE r.reason END,
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
        checkpoint: fenced(
            "UPDATE idem_records
               SET steps = steps || jsonb_build_object($3::text, $4::text),
                   lease_until = {now} + $5
               WHERE key = $1 AND fence = $2 AND state = 0
               RETURNING key",
            "NULL::bigint",
            false,
        ),
        renew: fenced(
            "UPDATE idem_records
               SET lease_until = {now} + $3
               WHERE key = $1 AND fence = $2 AND state = 0
               RETURNING key",
            "NULL::bigint",
            false,
        ),
        complete: fenced(
            "UPDATE idem_records
               SET state = 1, outcome = $3, completed_at = {now}, expires_at = {now} + $4,
                   lease_until = NULL, prev_fence = NULL
               WHERE key = $1 AND fence = $2 AND state = 0
               RETURNING key",
            "NULL::bigint",
            true,
        ),
        release: fenced(
            "DELETE FROM idem_records
               WHERE key = $1 AND fence = $2 AND state = 0
               RETURNING key",
            "NULL::bigint",
            true,
        ),
        // Every column from the record, under a fresh fence (returned in
        // the third column); waiters are woken as by a completion.
        replace: fenced(
            &format!(
                "UPDATE idem_records
               SET tool = $4, fingerprint = $5, created_at = $6,
                   fence = nextval('idem_fence'), prev_fence = NULL,
                   state = $7, lease_until = $8, outcome = $9, completed_at = $10,
                   expires_at = $11, steps = $12::text::jsonb, requested_at = $13,
                   message = $14, namespace = $15, call_id = $16, run_id = $17,
                   step = $18, args = $19, worker = $20, audit = $21::text::jsonb,
                   ttl_ms = $22, reason = $23
               WHERE {expected}
               RETURNING key, fence"
            ),
            "fence",
            true,
        ),
        remove: fenced(
            &format!(
                "DELETE FROM idem_records
               WHERE {expected}
               RETURNING key"
            ),
            "NULL::bigint",
            true,
        ),
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
        // Both walk `idem_records_open` in its order: a page reads about
        // `limit` rows of the index, however many records are settled.
        // Approval requests that lapsed are left out here (they are open
        // until swept), so they take no room in a page.
        scan_open_first: fill(&format!(
            "SELECT {{now}}, {{record}} FROM idem_records
             WHERE {OPEN} AND (state <> 2 OR expires_at > {{now}})
             ORDER BY created_at DESC, key DESC
             LIMIT $1"
        )),
        scan_open_after: fill(&format!(
            "SELECT {{now}}, {{record}} FROM idem_records
             WHERE {OPEN} AND (created_at, key) < ($1, $2)
               AND (state <> 2 OR expires_at > {{now}})
             ORDER BY created_at DESC, key DESC
             LIMIT $3"
        )),
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
        claim_relaxed: String::new(),
    };
    // A claim that need not be durable (an `idempotent_write`'s): its
    // transaction commits with `synchronous_commit = off`, so the server
    // answers before the WAL is flushed. `set_config(…, true)` lasts until
    // the end of the statement's own transaction. It is evaluated for the
    // row about to be inserted: when the claim changes nothing it may not
    // run, but then the transaction wrote nothing and waits for no flush.
    sql.claim_relaxed = sql.claim.replacen(
        "WHERE NOT EXISTS (",
        "WHERE set_config('synchronous_commit', 'off', true) IS NOT NULL
                 AND NOT EXISTS (",
        1,
    );
    assert_ne!(
        sql.claim_relaxed, sql.claim,
        "the claim's insert has a WHERE"
    );
    sql
});

/// A pooled connection with every statement prepared.
pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) claim: Statement,
    pub(super) claim_relaxed: Statement,
    pub(super) checkpoint: Statement,
    pub(super) renew: Statement,
    pub(super) complete: Statement,
    pub(super) release: Statement,
    pub(super) replace: Statement,
    pub(super) remove: Statement,
    pub(super) get: Statement,
    pub(super) scan: Statement,
    pub(super) scan_open_first: Statement,
    pub(super) scan_open_after: Statement,
    pub(super) sweep: Statement,
    pub(super) now: Statement,
}

/// Whether an operation is sent again, on a fresh connection, when its
/// connection broke while it was on it (the server restarted, the network
/// dropped it).
///
/// A connection the pool can see is closed is never handed out (see
/// `Manager::is_valid`), so a request that finds its connection broken was
/// normally sent, and the server may have applied it before it went
/// away. Sending it again is right only where a second application changes
/// nothing the first did not:
///
/// * the reads (get, scan, the open scan, the audit log, the clock): they
///   change nothing;
/// * a renewal or a checkpoint: fenced, and setting the same lease end or
///   the same step's value twice is setting it once; if the fence moved on
///   in between, the second finds that out as the first would have;
/// * a sweep: it deletes what has expired, and deleting it again deletes
///   nothing more.
///
/// Never sent again: a claim (a claim applied once and then again finds
/// its own record in flight, and the call would wait out its own lease), a
/// completion, release or replacement (applied once, the second is refused
/// as a stale fence, and a caller told "superseded" would discard a
/// recorded outcome), and an audit append (it would append the event
/// twice). Those keep the store's error: the call's outcome is then in
/// doubt, which the executor tells as it does any store failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Resend {
    /// A read, or a write that is the same applied twice.
    Safe,
    /// A write whose second application would differ.
    Never,
}

/// Run `$request` (an `async` expression of `$conn`, a pooled
/// [`Conn`]) on a pooled connection; when the connection broke under it
/// and `$resend` is [`Resend::Safe`], once more on a fresh one. A macro
/// rather than a method taking an `async` closure, whose future could not
/// be shown `Send`.
macro_rules! on_conn {
    ($store:expr, $resend:expr, |$conn:ident| $request:expr) => {{
        let store: &$crate::PostgresStore = $store;
        let conn = store.conn().await?;
        let $conn: &$crate::statements::Conn = &conn;
        match $request.await {
            Ok(answer) => Ok(answer),
            Err(e) if e.is_closed() && $resend == $crate::statements::Resend::Safe => {
                // Back to the pool, which drops it (`has_broken`).
                drop(conn);
                let conn = store.conn().await?;
                let $conn: &$crate::statements::Conn = &conn;
                $request.await.map_err(|e| store.error(e))
            }
            Err(e) => Err(store.error(e)),
        }
    }};
}
pub(super) use on_conn;

impl PostgresStore {
    /// Run a fenced write and turn "matched nothing" into the rejection.
    /// Returns the new fence a replace wrote (`None` for other writes).
    pub(super) async fn fenced(
        &self,
        resend: Resend,
        key: &IdempotencyKey,
        fence: Fence,
        statement: impl Fn(&Conn) -> &Statement,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Option<Fence>, StoreError> {
        let rows = on_conn!(self, resend, |conn| conn
            .client
            .query(statement(conn), params))?;
        self.fenced_answer(key, fence, &rows)
    }

    /// What a fenced write's rows say: the new fence of a replace, or the
    /// rejection when it matched nothing.
    pub(super) fn fenced_answer(
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

    pub(super) async fn read(
        &self,
        key: &IdempotencyKey,
    ) -> Result<(Option<Record>, Timestamp), StoreError> {
        let row = on_conn!(self, Resend::Safe, |conn| conn
            .client
            .query_one(&conn.get, &[&key.as_str()]))?;
        let now = Timestamp(row.get::<_, i64>(0) as u64);
        let record = match row.get::<_, Option<String>>(1) {
            None => None,
            Some(_) => Some(decode(key, &row, 1)?),
        };
        Ok((record.filter(|r| !r.is_expired(now)), now))
    }
}

// The audit log (schema version 3). Its statements are sent unprepared:
// operators' actions are rare, and every pooled connection need not
// prepare them.

/// Append an event; returns its seq.
pub(super) const AUDIT_APPEND: &str =
    "INSERT INTO idem_audit (at, key, event) VALUES ($1, $2, $3) RETURNING seq";

/// A page of events after the position (`$1` at, `$2` seq), of key `$3`
/// (all keys when `NULL`), at or after `$4` and before `$5`.
pub(super) const AUDIT_PAGE: &str = "SELECT seq, event FROM idem_audit
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
/// `$24`, text `$25` for a replace; `$4`, `$5` for a remove) from the same
/// statement, for exactly the row it changed: a refused swap changes no
/// row and appends nothing.
pub(super) struct AuditedSql {
    pub(super) replace: String,
    pub(super) remove: String,
}

pub(super) static AUDITED_SQL: LazyLock<AuditedSql> = LazyLock::new(|| {
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
        replace: audited(&SQL.replace, "$24", "$25"),
        remove: audited(&SQL.remove, "$4", "$5"),
    }
});

impl PostgresStore {
    /// Delete the audit events older than the retention, in batches.
    pub(super) async fn sweep_audit(&self, conn: &Conn) -> Result<(), tokio_postgres::Error> {
        let retention = millis(self.audit_retention);
        loop {
            let n = conn
                .client
                .execute(AUDIT_SWEEP.as_str(), &[&retention, &SWEEP_BATCH])
                .await?;
            if n < SWEEP_BATCH as u64 {
                return Ok(());
            }
        }
    }
}
