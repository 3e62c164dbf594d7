//! A record in its common shape, held compactly: no steps, no audit
//! entries, a fingerprint that is a SHA-256 digest, in flight or
//! completed. Nearly every record a program makes has this shape, and a
//! store of a million of them pays for each one's every byte.
//!
//! A [`Lean`] keeps the record's digests as bytes rather than hex text,
//! one instant for the lease's end or the expiry (a record has one or the
//! other), and the record's texts — tool, namespace, worker, call id, run
//! id, arguments, reason — packed into one heap string. A record built
//! from a [`Lean`] ([`Lean::to_record`]) is exactly the record the claim or
//! write that made it would have stored; a record of any other shape is
//! held whole (see `map.rs`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::record::{CallInfoRef, Fence, Outcome, OutputJson, Record, RecordState};
use crate::store::{ClaimOutcome, ClaimRequest, FenceHolder};

/// The optional texts of a record, in the order they are packed: the
/// namespace, the worker, the call id, the run id, the arguments, the
/// reason. The tool, always present, is packed after them.
type Texts<'a> = [Option<&'a str>; 6];

/// The length that marks an absent text in [`Lean::lens`]; a text of this
/// length or longer makes its record too large for a [`Lean`].
const ABSENT: u16 = u16::MAX;

/// In [`Lean::meta`]: the record's call info has a TTL.
const HAS_TTL: u32 = 1 << 31;
/// In [`Lean::meta`]: the record's call info has a step.
const HAS_STEP: u32 = 1 << 30;
/// In [`Lean::meta`]: the bits that hold the TTL's nanoseconds (fewer than
/// 10⁹, so they fit in 30).
const TTL_NANOS: u32 = HAS_STEP - 1;

/// A record of the common shape; see the module docs. Its key is held by
/// the map entry it sits in.
#[derive(Debug, Clone)]
pub(super) struct Lean {
    /// The fingerprint, a SHA-256 digest.
    fingerprint: [u8; 32],
    created_at: Timestamp,
    /// The owner's fence while in flight; the completing owner's after.
    fence: Fence,
    /// The lease's end while in flight; the expiry once completed.
    until: Timestamp,
    /// When the call completed (unused while in flight).
    completed_at: Timestamp,
    outcome: LeanOutcome,
    /// The call info's step (when [`HAS_STEP`]).
    step: u64,
    /// The call info's TTL, whole seconds (when [`HAS_TTL`]).
    ttl_secs: u64,
    /// [`HAS_TTL`], [`HAS_STEP`], and the TTL's nanoseconds: one word
    /// rather than an `Option<Duration>` and an `Option<u64>` of 16 bytes
    /// each.
    meta: u32,
    /// The length of each optional text in `texts`, [`ABSENT`] when the
    /// record has none.
    lens: [u16; 6],
    /// The optional texts ([`Texts`]) then the tool, end to end.
    texts: Box<str>,
}

/// The outcome of a [`Lean`]: none yet, an output (nearly always), or a
/// failure or an unknown outcome, boxed because they are rare.
#[derive(Debug, Clone)]
enum LeanOutcome {
    InFlight,
    Success(OutputJson),
    Other(Box<Outcome>),
}

/// What a claim finds in a [`Lean`] without writing
/// ([`transition::answer`](crate::store::transition::answer)'s cases).
#[derive(Debug)]
pub(super) enum LeanAnswer {
    /// [`ClaimOutcome::KeyReused`] or [`ClaimOutcome::InFlight`].
    Claim(ClaimOutcome),
    /// The call completed with this outcome: [`ClaimOutcome::Completed`].
    Completed(Outcome),
}

impl Lean {
    /// The record a claim creates at `now` under `fence`, as a [`Lean`];
    /// `None` when it does not fit one (a fingerprint that is not a
    /// digest, a text of 64 KiB or more).
    pub(super) fn claimed(req: &ClaimRequest<'_>, now: Timestamp, fence: Fence) -> Option<Lean> {
        let info = &req.info;
        Lean::pack(
            req.tool,
            [
                info.namespace,
                req.worker,
                info.call_id,
                info.run_id,
                info.args,
                info.reason,
            ],
            req.fingerprint.digest()?,
            info.step,
            info.ttl,
        )
        .map(|lean| Lean {
            created_at: now,
            fence,
            until: now.plus(req.lease),
            ..lean
        })
    }

    /// `record` as a [`Lean`], when it has the shape of one.
    pub(super) fn of(record: &Record) -> Option<Lean> {
        if !record.steps.is_empty() || !record.audit.is_empty() {
            return None;
        }
        let info = &record.info;
        let lean = Lean::pack(
            &record.tool,
            [
                info.namespace.as_deref(),
                record.worker.as_deref(),
                info.call_id.as_deref(),
                info.run_id.as_deref(),
                info.args.as_deref(),
                info.reason.as_ref().map(|r| r.as_str()),
            ],
            record.fingerprint.digest()?,
            info.step,
            info.ttl,
        )?;
        let lean = Lean {
            created_at: record.created_at,
            ..lean
        };
        match &record.state {
            RecordState::InFlight { fence, lease_until } => Some(Lean {
                fence: *fence,
                until: *lease_until,
                ..lean
            }),
            RecordState::Completed {
                fence,
                outcome,
                completed_at,
                expires_at,
            } => Some(Lean {
                fence: *fence,
                until: *expires_at,
                completed_at: *completed_at,
                outcome: LeanOutcome::of(outcome.clone()),
                ..lean
            }),
            RecordState::AwaitingApproval { .. } => None,
        }
    }

    /// An in-flight [`Lean`] of these parts, times and fence zero; `None`
    /// when a text is too long.
    fn pack(
        tool: &str,
        texts: Texts<'_>,
        fingerprint: [u8; 32],
        step: Option<u64>,
        ttl: Option<Duration>,
    ) -> Option<Lean> {
        let mut lens = [ABSENT; 6];
        let mut total = tool.len();
        for (len, text) in lens.iter_mut().zip(texts) {
            if let Some(text) = text {
                *len = u16::try_from(text.len()).ok().filter(|&n| n != ABSENT)?;
                total += text.len();
            }
        }
        let mut packed = String::with_capacity(total);
        for text in texts.into_iter().flatten() {
            packed.push_str(text);
        }
        packed.push_str(tool);
        let mut meta = 0;
        if let Some(ttl) = ttl {
            meta |= HAS_TTL | ttl.subsec_nanos();
        }
        if step.is_some() {
            meta |= HAS_STEP;
        }
        Some(Lean {
            fingerprint,
            created_at: Timestamp(0),
            fence: Fence(0),
            until: Timestamp(0),
            completed_at: Timestamp(0),
            outcome: LeanOutcome::InFlight,
            step: step.unwrap_or(0),
            ttl_secs: ttl.map_or(0, |ttl| ttl.as_secs()),
            meta,
            lens,
            texts: packed.into_boxed_str(),
        })
    }

    /// The optional texts and the tool.
    fn texts(&self) -> (Texts<'_>, &str) {
        let mut texts = [None; 6];
        let mut at = 0;
        for (text, &len) in texts.iter_mut().zip(&self.lens) {
            if len != ABSENT {
                let end = at + usize::from(len);
                *text = Some(&self.texts[at..end]);
                at = end;
            }
        }
        (texts, &self.texts[at..])
    }

    /// The tool that claimed the key.
    fn tool(&self) -> &str {
        self.texts().1
    }

    /// The call info's TTL.
    fn ttl(&self) -> Option<Duration> {
        (self.meta & HAS_TTL != 0).then(|| Duration::new(self.ttl_secs, self.meta & TTL_NANOS))
    }

    /// The call info's step.
    fn step(&self) -> Option<u64> {
        (self.meta & HAS_STEP != 0).then_some(self.step)
    }

    /// The record this is, under `key` (its own key: the map's entry holds
    /// it): exactly the record the write that made it stored.
    pub(super) fn to_record(&self, key: IdempotencyKey) -> Record {
        let ([namespace, worker, call_id, run_id, args, reason], tool) = self.texts();
        let state = match &self.outcome {
            LeanOutcome::InFlight => RecordState::InFlight {
                fence: self.fence,
                lease_until: self.until,
            },
            LeanOutcome::Success(_) | LeanOutcome::Other(_) => RecordState::Completed {
                fence: self.fence,
                outcome: self.outcome().expect("completed"),
                completed_at: self.completed_at,
                expires_at: self.until,
            },
        };
        let info = CallInfoRef {
            namespace,
            call_id,
            run_id,
            step: self.step(),
            args,
            ttl: self.ttl(),
            reason,
        };
        Record {
            key,
            tool: tool.to_owned(),
            fingerprint: Fingerprint::from_digest(&self.fingerprint),
            created_at: self.created_at,
            state,
            steps: BTreeMap::new(),
            // As a claim records it, so the reason is bounded alike.
            info: info.to_owned(),
            worker: worker.map(str::to_owned),
            audit: Vec::new(),
        }
    }

    /// The outcome, if completed (cheap: an output's text is shared).
    pub(super) fn outcome(&self) -> Option<Outcome> {
        match &self.outcome {
            LeanOutcome::InFlight => None,
            LeanOutcome::Success(output) => Some(Outcome::Success {
                output: output.clone(),
            }),
            LeanOutcome::Other(outcome) => Some(Outcome::clone(outcome)),
        }
    }

    /// When the record was created.
    pub(super) fn created_at(&self) -> Timestamp {
        self.created_at
    }

    /// Whether the call is in flight.
    fn in_flight(&self) -> bool {
        matches!(self.outcome, LeanOutcome::InFlight)
    }

    /// [`Record::expires_at`].
    pub(super) fn expires_at(&self) -> Option<Timestamp> {
        match &self.outcome {
            LeanOutcome::InFlight => None,
            LeanOutcome::Other(outcome) if matches!(**outcome, Outcome::Unknown { .. }) => None,
            LeanOutcome::Success(_) | LeanOutcome::Other(_) => Some(self.until),
        }
    }

    /// [`Record::is_expired`].
    pub(super) fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at().is_some_and(|at| at <= now)
    }

    /// [`Record::is_open`]: in flight, or an unknown outcome (what never
    /// expires).
    pub(super) fn is_open(&self) -> bool {
        self.expires_at().is_none()
    }

    /// [`FenceHolder::of`] this record.
    pub(super) fn holder(&self) -> FenceHolder {
        match self.outcome {
            LeanOutcome::InFlight => FenceHolder::InFlight(self.fence),
            LeanOutcome::Success(_) | LeanOutcome::Other(_) => FenceHolder::Completed(self.fence),
        }
    }

    /// Whether `fence` owns this record in flight
    /// ([`transition::check_owner`](crate::store::transition::check_owner)).
    pub(super) fn owned_by(&self, fence: Fence) -> bool {
        self.in_flight() && self.fence == fence
    }

    /// What a claim `req` (of a record not expired at `now`) is answered
    /// without a write, as
    /// [`transition::answer`](crate::store::transition::answer) answers
    /// it; `None`: the claim writes (it takes over a lapsed lease).
    pub(super) fn answer(&self, req: &ClaimRequest<'_>, now: Timestamp) -> Option<LeanAnswer> {
        let tool = self.tool();
        if tool != req.tool
            || (req.check_fingerprint && req.fingerprint.digest() != Some(self.fingerprint))
        {
            return Some(LeanAnswer::Claim(ClaimOutcome::KeyReused {
                tool: tool.to_owned(),
                fingerprint: Fingerprint::from_digest(&self.fingerprint),
            }));
        }
        match self.outcome {
            LeanOutcome::InFlight if self.until > now => {
                Some(LeanAnswer::Claim(ClaimOutcome::InFlight {
                    fence: self.fence,
                    lease_until: self.until,
                }))
            }
            LeanOutcome::InFlight => None,
            LeanOutcome::Success(_) | LeanOutcome::Other(_) => {
                self.outcome().map(LeanAnswer::Completed)
            }
        }
    }

    /// Complete the call, owned (checked by the caller), with `outcome`
    /// at `now`, kept for `ttl`
    /// ([`transition::complete_in_place_owned`](crate::store::transition::complete_in_place_owned)).
    pub(super) fn complete(&mut self, outcome: Outcome, ttl: Duration, now: Timestamp) {
        self.outcome = LeanOutcome::of(outcome);
        self.completed_at = now;
        self.until = now.plus(ttl);
    }

    /// Extend the owner's lease (checked by the caller) to `lease` from
    /// `now`.
    pub(super) fn renew(&mut self, lease: Duration, now: Timestamp) {
        self.until = now.plus(lease);
    }
}

impl LeanOutcome {
    fn of(outcome: Outcome) -> LeanOutcome {
        match outcome {
            Outcome::Success { output } => LeanOutcome::Success(output),
            other => LeanOutcome::Other(Box::new(other)),
        }
    }
}
