//! The writer thread: every write of one store, decided and committed in
//! batches (group commit), and the fences it hands out.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::codec::{load, millis, store, store_bytes, DecodedRecords};
use crate::shared::Shared;
use crate::SqliteStore;
use idem_runtime::audit::{self, AuditEvent};
use idem_runtime::clock::Timestamp;
use idem_runtime::key::{Fingerprint, IdempotencyKey};
use idem_runtime::record::{CallInfo, Fence, Outcome, Record};
use idem_runtime::store::{transition, Answer, ClaimRequest, Expected, StoreError};

/// How many requests one write transaction takes at most.
const MAX_BATCH: usize = 512;

/// How many expired records one sweep transaction deletes at most. A sweep
/// is a series of such transactions, so the claims and completions queued
/// behind one batch commit with the next: a caller waits for about one
/// batch, never for the whole sweep. Small, because expired records lie in
/// expiry order with their keys all over the key index, so each deleted
/// row dirties about one page of it; `benches/stores/` measured 100
/// against 1,000 (BENCHMARKS.md): callers' median wait during a sweep about
/// 9 ms against 72 ms, the sweep itself about twice as long.
pub(super) const SWEEP_BATCH: u64 = 100;

/// A request for the writer thread, answered after its transaction commits.
pub(super) struct Job {
    op: Op,
    reply: oneshot::Sender<Result<Answer, StoreError>>,
}

/// What a [`Job`] asks. Made once per request and moved into the writer's
/// queue, never stored: boxing the large claim would cost every claim an
/// allocation for nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Op {
    Claim {
        key: IdempotencyKey,
        tool: String,
        fingerprint: Fingerprint,
        check_fingerprint: bool,
        lease: Duration,
        info: CallInfo,
        worker: Option<String>,
        /// Whether the claim must be on disk before it is answered
        /// ([`ClaimRequest::durable`]).
        durable: bool,
    },
    Replace {
        key: IdempotencyKey,
        expected: Expected,
        /// Boxed: an operator's rare replace should not size every job.
        new: Option<Box<Record>>,
        /// Appended to the audit log when the swap happens.
        audit: Option<Box<AuditEvent>>,
    },
    /// Append an event to the audit log.
    AppendAudit {
        event: Box<AuditEvent>,
    },
    /// Delete at most [`SWEEP_BATCH`] audit events older than `cutoff`.
    SweepAudit {
        cutoff: Timestamp,
    },
    /// A completed step (or, without one, a lease renewal).
    Checkpoint {
        key: IdempotencyKey,
        fence: Fence,
        step: Option<(String, Value)>,
        lease: Duration,
    },
    Complete {
        key: IdempotencyKey,
        fence: Fence,
        outcome: Outcome,
        ttl: Duration,
    },
    Release {
        key: IdempotencyKey,
        fence: Fence,
    },
    /// Delete at most [`SWEEP_BATCH`] records that expired by `cutoff`.
    Sweep {
        cutoff: Timestamp,
    },
}

impl Op {
    /// Whether the transaction holding this operation must be on disk
    /// before anyone is answered. Only a claim that says it need not
    /// (an `idempotent_write`'s) may be lost with a power cut; everything
    /// else — other claims, started marks, outcomes, an operator's or an
    /// approval's change, the audit log, sweeps — is durable.
    fn needs_durability(&self) -> bool {
        match self {
            Op::Claim { durable, .. } => *durable,
            _ => true,
        }
    }
}

impl SqliteStore {
    pub(super) async fn submit(&self, op: Op) -> Result<Answer, StoreError> {
        if self.shared.read_only {
            self.shared.check_open()?;
            return Err(StoreError::ReadOnly {
                store: self.shared.name.clone(),
                cause: "it was opened read-only, for reading; open it read-write to change it"
                    .into(),
            });
        }
        let (reply, answer) = oneshot::channel();
        // Sent under the lock, so `close` cannot take the sender between
        // the check and the send: a job is either refused or committed.
        match &*self.writer.lock().expect("not poisoned") {
            None => return Err(self.shared.closed_error()),
            Some(writer) => writer
                .send(Job { op, reply })
                .map_err(|_| self.shared.unavailable("the writer thread has stopped"))?,
        }
        answer
            .await
            .map_err(|_| self.shared.unavailable("the writer thread has stopped"))?
    }
}

impl SqliteStore {
    /// Delete the audit events older than the retention at `now`, a batch
    /// per transaction as the sweep of records does.
    pub(super) async fn sweep_audit(&self, now: Timestamp) -> Result<(), StoreError> {
        let Some(cutoff) = audit::retention_cutoff(now, self.shared.audit_retention) else {
            return Ok(());
        };
        loop {
            match self.submit(Op::SweepAudit { cutoff }).await? {
                Answer::Swept(n) if n < SWEEP_BATCH => return Ok(()),
                Answer::Swept(_) => {}
                _ => unreachable!("the writer answers a sweep with a count"),
            }
        }
    }
}

/// The writer thread: one connection, one transaction per batch of jobs.
pub(super) struct Writer {
    pub(super) conn: Connection,
    pub(super) shared: Arc<Shared>,
}

/// What the writer's commits wait for, batch by batch.
///
/// With `synchronous=FULL` every commit fsyncs the WAL. A batch that holds
/// nothing but claims that need not be durable (those of
/// `idempotent_write` calls) commits with `synchronous=NORMAL` instead: its
/// frames reach the WAL file without an fsync, and the next durable commit's
/// fsync — the completion of the same call, at the latest — covers them,
/// since an fsync flushes the whole file. SQLite refuses to change the
/// setting inside a transaction, so it is switched between transactions,
/// and only when a batch needs the other one.
struct Durability {
    /// The store was opened with `synchronous=FULL`.
    full: bool,
    /// The connection is switched to `NORMAL` for a batch of claims that
    /// need not be durable.
    relaxed: bool,
}

impl Durability {
    fn of(conn: &Connection) -> Durability {
        // 2 is FULL, 3 EXTRA; anything else already skips the commit fsync.
        let level: i64 = conn
            .pragma_query_value(None, "synchronous", |row| row.get(0))
            .unwrap_or(2);
        Durability {
            full: level >= 2,
            relaxed: false,
        }
    }

    /// Set the connection up for a batch that `durable` or not. Relaxing
    /// is an optimisation: when it fails, the batch is simply durable.
    /// Going back to `FULL` is not: when it fails, the batch fails.
    fn prepare(&mut self, conn: &Connection, durable: bool) -> rusqlite::Result<()> {
        if !self.full || durable != self.relaxed {
            return Ok(());
        }
        if durable {
            conn.pragma_update(None, "synchronous", "FULL")?;
            self.relaxed = false;
        } else if conn.pragma_update(None, "synchronous", "NORMAL").is_ok() {
            self.relaxed = true;
        }
        Ok(())
    }
}

impl Writer {
    pub(super) fn run(mut self, jobs: mpsc::Receiver<Job>) {
        let mut durability = Durability::of(&self.conn);
        // Ends when the store (the only sender) is dropped.
        while let Ok(first) = jobs.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match jobs.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.commit(batch, &mut durability);
        }
    }

    /// Apply `batch` in one `BEGIN IMMEDIATE` transaction; answer each job
    /// only after the commit (or the failure of the whole transaction).
    ///
    /// When SQLite fails on one job (the file is full, a value is too big),
    /// that job alone is answered with the error: the transaction is rolled
    /// back — SQLite often abandons it by itself on such errors — and the
    /// other jobs are decided again in a new one. Nobody has been answered
    /// yet, so nothing anybody was told is undone, and fences handed out in
    /// the abandoned transaction were never seen by anyone. Every round
    /// drops one job, so this ends. A failure of the transaction itself
    /// (the lock, the fence counter, COMMIT) fails every job left.
    fn commit(&mut self, mut batch: Vec<Job>, durability: &mut Durability) {
        let shared = self.shared.clone();
        loop {
            match self.try_commit(&batch, durability) {
                Ok(answers) => {
                    for (job, answer) in batch.into_iter().zip(answers) {
                        if answer.is_ok() {
                            if let Op::Complete { key, .. }
                            | Op::Release { key, .. }
                            | Op::Replace { key, .. } = &job.op
                            {
                                shared.waiters.wake(key.as_str());
                            }
                        }
                        let _ = job.reply.send(answer);
                    }
                    return;
                }
                Err(Failed::Job(i, e)) => {
                    let job = batch.remove(i);
                    let _ = job.reply.send(Err(shared.sql(e)));
                    if batch.is_empty() {
                        return;
                    }
                }
                Err(Failed::Transaction(e)) => {
                    let error = shared.sql(e);
                    for job in batch {
                        let _ = job.reply.send(Err(error.clone()));
                    }
                    return;
                }
            }
        }
    }

    /// One attempt at committing `batch`: every job's answer, in order, once
    /// the transaction is committed. Dropping the transaction on an error
    /// rolls it back.
    fn try_commit(
        &mut self,
        batch: &[Job],
        durability: &mut Durability,
    ) -> Result<Vec<Result<Answer, StoreError>>, Failed> {
        durability
            .prepare(&self.conn, batch.iter().any(|j| j.op.needs_durability()))
            .map_err(Failed::Transaction)?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(Failed::Transaction)?;
        // Read the clock once the write lock is held: time spent waiting for
        // another process's transaction must not shorten the leases and
        // retention granted here.
        let now = self.shared.clock.now();
        let mut fences = match batch
            .iter()
            .any(|j| matches!(j.op, Op::Claim { .. } | Op::Replace { .. }))
        {
            true => Some(FenceCounter::load(&tx).map_err(Failed::Transaction)?),
            false => None,
        };
        let mut answers = Vec::with_capacity(batch.len());
        for (i, job) in batch.iter().enumerate() {
            let answer = apply(&tx, &job.op, now, fences.as_mut(), &self.shared.decoded);
            answers.push(answer.map_err(|e| Failed::Job(i, e))?);
        }
        if let Some(fences) = &fences {
            fences.save(&tx).map_err(Failed::Transaction)?;
        }
        tx.commit().map_err(Failed::Transaction)?;
        Ok(answers)
    }
}

/// Why an attempt at committing a batch failed.
enum Failed {
    /// SQLite failed on the job at this index of the batch.
    Job(usize, rusqlite::Error),
    /// The transaction itself failed.
    Transaction(rusqlite::Error),
}

/// Fences handed out in one transaction, from the counter in `idem_meta`.
struct FenceCounter {
    next: u64,
    taken: bool,
}

impl FenceCounter {
    fn load(tx: &Connection) -> rusqlite::Result<FenceCounter> {
        let next: i64 = tx.query_row(
            "SELECT value FROM idem_meta WHERE name = 'next_fence'",
            [],
            |row| row.get(0),
        )?;
        Ok(FenceCounter {
            next: next as u64,
            taken: false,
        })
    }

    fn take(&mut self) -> Fence {
        self.taken = true;
        self.next += 1;
        Fence(self.next - 1)
    }

    fn save(&self, tx: &Connection) -> rusqlite::Result<()> {
        if self.taken {
            tx.execute(
                "UPDATE idem_meta SET value = ?1 WHERE name = 'next_fence'",
                [self.next as i64],
            )?;
        }
        Ok(())
    }
}

/// Apply one operation inside the writer's transaction. The outer error is
/// SQLite failing on it (see [`Writer::commit`]); the inner one is this
/// operation's own answer (stale fence, corrupt record).
fn apply(
    tx: &Connection,
    op: &Op,
    now: Timestamp,
    fences: Option<&mut FenceCounter>,
    decoded: &DecodedRecords,
) -> rusqlite::Result<Result<Answer, StoreError>> {
    Ok(match op {
        Op::Claim {
            key,
            tool,
            fingerprint,
            check_fingerprint,
            lease,
            info,
            worker,
            durable,
        } => {
            // Borrowed from the job: the claim copies nothing.
            let req = ClaimRequest {
                key,
                tool,
                fingerprint,
                check_fingerprint: *check_fingerprint,
                lease: *lease,
                info: info.as_ref(),
                worker: worker.as_deref(),
                durable: *durable,
            };
            claim(tx, &req, now, fences)?
        }
        Op::Checkpoint {
            key,
            fence,
            step,
            lease,
        } => checkpoint(tx, key, *fence, step.as_ref(), *lease, now)?,
        Op::Complete {
            key,
            fence,
            outcome,
            ttl,
        } => complete(tx, key, *fence, outcome, *ttl, now, decoded)?,
        Op::Release { key, fence } => release(tx, key, *fence, now)?,
        Op::Replace {
            key,
            expected,
            new,
            audit,
        } => replace(
            tx,
            key,
            *expected,
            new.as_deref(),
            audit.as_deref(),
            now,
            fences,
        )?,
        Op::Sweep { cutoff } => Ok(Answer::Swept(sweep_records(tx, *cutoff, now)?)),
        Op::AppendAudit { event } => Ok(Answer::Appended(append_audit(tx, event)?)),
        Op::SweepAudit { cutoff } => Ok(Answer::Swept(sweep_audit_events(tx, *cutoff)?)),
    })
}

/// [`Op::Claim`]: the runtime's transition decides on the record there,
/// taking the next fence when the claim acquires the key, and the record it
/// decided on is written (none when the claim changes nothing).
fn claim(
    tx: &Connection,
    req: &ClaimRequest<'_>,
    now: Timestamp,
    fences: Option<&mut FenceCounter>,
) -> rusqlite::Result<Result<Answer, StoreError>> {
    let existing = match load(tx, req.key)? {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let fences = fences.expect("loaded for a batch with claims");
    let decision = transition::claim(existing.map(Arc::new), req, now, || fences.take());
    if let Some(record) = &decision.write {
        store(tx, record)?;
    }
    Ok(Ok(Answer::Claim(decision.claim)))
}

/// [`Op::Checkpoint`]: the owner's (`fence`'s) step recorded, or its lease
/// renewed.
fn checkpoint(
    tx: &Connection,
    key: &IdempotencyKey,
    fence: Fence,
    step: Option<&(String, Value)>,
    lease: Duration,
    now: Timestamp,
) -> rusqlite::Result<Result<Answer, StoreError>> {
    match load(tx, key)?.and_then(|r| {
        let step = step.map(|(name, value)| (name.as_str(), value));
        transition::checkpoint(r, key, fence, step, lease, now)
    }) {
        Ok(record) => store(tx, &record).map(|()| Ok(Answer::Done)),
        Err(e) => Ok(Err(e)),
    }
}

/// [`Op::Complete`]: the owner's outcome recorded, kept for `ttl`; a
/// record that expired counts as none. The record written is kept decoded
/// ([`DecodedRecords::written`]), so its first duplicate decodes nothing.
fn complete(
    tx: &Connection,
    key: &IdempotencyKey,
    fence: Fence,
    outcome: &Outcome,
    ttl: Duration,
    now: Timestamp,
    decoded: &DecodedRecords,
) -> rusqlite::Result<Result<Answer, StoreError>> {
    match load(tx, key)?.and_then(|r| {
        transition::complete(
            r.filter(|r| !r.is_expired(now)),
            key,
            fence,
            outcome,
            ttl,
            now,
        )
    }) {
        Ok(record) => {
            let bytes = record.to_bytes();
            store_bytes(tx, &record, &bytes)?;
            decoded.written(key, bytes, record);
            Ok(Ok(Answer::Done))
        }
        Err(e) => Ok(Err(e)),
    }
}

/// [`Op::Release`]: the owner gives the key up, deleting its record (an
/// expired record counts as none), so a later call may run.
fn release(
    tx: &Connection,
    key: &IdempotencyKey,
    fence: Fence,
    now: Timestamp,
) -> rusqlite::Result<Result<Answer, StoreError>> {
    match load(tx, key)?
        .and_then(|r| transition::owned(r.filter(|r| !r.is_expired(now)), key, fence))
    {
        Ok(_) => {
            tx.prepare_cached("DELETE FROM idem_records WHERE key = ?1")?
                .execute([key.as_str()])?;
            Ok(Ok(Answer::Done))
        }
        Err(e) => Ok(Err(e)),
    }
}

/// [`Op::Replace`]: an operator's (or an approval's) swap, only if the
/// record is still as `expected`: the audit event appended with it, then
/// the record deleted (`new` is `None`) or replaced under a new fence.
fn replace(
    tx: &Connection,
    key: &IdempotencyKey,
    expected: Expected,
    new: Option<&Record>,
    audit: Option<&AuditEvent>,
    now: Timestamp,
    fences: Option<&mut FenceCounter>,
) -> rusqlite::Result<Result<Answer, StoreError>> {
    let existing = match load(tx, key)? {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    if let Err(e) = transition::check_expected(existing.as_ref(), key, expected, now) {
        return Ok(Err(e));
    }
    if let Some(event) = audit {
        append_audit(tx, event)?;
    }
    match new {
        None => {
            tx.prepare_cached("DELETE FROM idem_records WHERE key = ?1")?
                .execute([key.as_str()])?;
            Ok(Ok(Answer::Replaced(None)))
        }
        Some(new) => {
            let fence = fences.expect("loaded for a batch with replaces").take();
            store(tx, &transition::replacement(key, new, fence))?;
            Ok(Ok(Answer::Replaced(Some(fence))))
        }
    }
}

/// [`Op::Sweep`]: delete at most [`SWEEP_BATCH`] records that expired by
/// `cutoff` (never later than `now`); returns how many.
fn sweep_records(tx: &Connection, cutoff: Timestamp, now: Timestamp) -> rusqlite::Result<u64> {
    // The expiry index yields the oldest rowids first; deleting by
    // rowid spares a lookup of each key.
    let n = tx
        .prepare_cached(
            "DELETE FROM idem_records WHERE rowid IN (
                 SELECT rowid FROM idem_records
                 WHERE expires_at <= ?1
                 ORDER BY expires_at
                 LIMIT ?2
             )",
        )?
        .execute(rusqlite::params![
            millis(cutoff.min(now)),
            SWEEP_BATCH as i64
        ])?;
    Ok(n as u64)
}

/// [`Op::SweepAudit`]: delete at most [`SWEEP_BATCH`] audit events older
/// than `cutoff`, oldest first; returns how many.
fn sweep_audit_events(tx: &Connection, cutoff: Timestamp) -> rusqlite::Result<u64> {
    let n = tx
        .prepare_cached(
            "DELETE FROM idem_audit WHERE seq IN (
                 SELECT seq FROM idem_audit WHERE at < ?1 ORDER BY at LIMIT ?2
             )",
        )?
        .execute(rusqlite::params![millis(cutoff), SWEEP_BATCH as i64])?;
    Ok(n as u64)
}

// The audit log (schema version 3): one row per event, `seq` from
// AUTOINCREMENT so a number is never handed out twice, even after the
// newest events were swept.

/// Append `event` inside the writer's transaction; returns its seq.
fn append_audit(tx: &Connection, event: &AuditEvent) -> rusqlite::Result<u64> {
    let stored = AuditEvent {
        seq: None,
        ..event.clone()
    };
    let text = serde_json::to_string(&stored).expect("an audit event serializes");
    tx.prepare_cached("INSERT INTO idem_audit (at, key, event) VALUES (?1, ?2, ?3)")?
        .execute(rusqlite::params![
            millis(event.at),
            event.key.as_str(),
            text
        ])?;
    Ok(tx.last_insert_rowid() as u64)
}
