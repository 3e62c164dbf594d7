//! Time in the rules: how long a person's approval may wait before it
//! runs the call (`valid_for`), when a request nobody answered is told to
//! more people (`escalate_after`, `escalate_to`), and when it is denied
//! for want of a decision (`expires_after`).
//!
//! ```toml
//! [[rule]]
//! tools = ["refund"]
//! required = 2
//! valid_for = "15m"           # an approval runs the call within 15 minutes of being given
//! escalate_after = "30m"      # no decision after 30 minutes: tell escalate_to
//! escalate_to = ["frank", "pager"]   # approvers and/or [[notify]] endpoints, by name
//! expires_after = "4h"        # no decision after 4 hours: denied, the model told why
//! ```
//!
//! Each is counted by the store's clock, from what the record holds: an
//! approval from when it was recorded ([`APPROVED_AT_STEP`]), a request
//! from when it was parked. The rule that times a call is the one that
//! asked for people when it was parked ([`Rules::for_record`]), as in
//! force when the time is read.
//!
//! **Nothing decided lapses silently.** A denial is never undone by time,
//! nor is an approval: an approval past its `valid_for` does not run the
//! call and is not thrown away unseen — the executor that would have run
//! it parks the call again as a new request, writing in the audit log
//! that the approval lapsed ([`AuditAction::ApprovalLapsed`]). Only a
//! request nobody decided expires, denied by its rule with a reason the
//! model reads ([`AuditAction::Expired`]).
//!
//! [`AuditAction::ApprovalLapsed`]: crate::record::AuditAction::ApprovalLapsed
//! [`AuditAction::Expired`]: crate::record::AuditAction::Expired

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{RuleDecision, RuleEntry, Rules};
use crate::clock::Timestamp;
use crate::record::{Record, RecordState, Status, APPROVED_AT_STEP};

/// A length of time as a rule writes it (`"15m"`, `"1h30m"`, `"2d"`):
/// numbers each followed by a unit (`ms`, `s`, `m`, `h`, `d`, `w`), more
/// than zero. Written back as it was read.
///
/// ```
/// use idem_runtime::approval::rules::Window;
///
/// let window = Window::parse("1h30m").unwrap();
/// assert_eq!(window.duration().as_secs(), 5400);
/// assert!(Window::parse("15 minutes later").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    written: String,
    duration: Duration,
}

impl Window {
    /// `text` read as a length of time; the reason when it is not one.
    pub fn parse(text: &str) -> Result<Window, String> {
        match crate::text::parse_duration(text) {
            Some(d) if d.is_zero() => Err(format!(
                "{text:?} is no time at all: a window is more than zero"
            )),
            Some(duration) => Ok(Window {
                written: text.trim().to_owned(),
                duration,
            }),
            None => Err(format!(
                "{text:?} is not a length of time: write numbers each with a unit (ms, s, m, h, d, w), as \"15m\" or \"1h30m\""
            )),
        }
    }

    /// How long.
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// As written.
    pub fn as_str(&self) -> &str {
        &self.written
    }
}

impl From<Duration> for Window {
    /// `d`, written in milliseconds. Zero is the shortest window, a
    /// millisecond.
    fn from(d: Duration) -> Window {
        let ms = d.as_millis().clamp(1, u128::from(u64::MAX));
        Window {
            written: format!("{ms}ms"),
            duration: Duration::from_millis(ms as u64),
        }
    }
}

impl Serialize for Window {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.written)
    }
}

impl<'de> Deserialize<'de> for Window {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Window, D::Error> {
        let text = String::deserialize(d)?;
        Window::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// A rule's timers, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timers {
    /// How long an approval runs the call after it was given.
    pub valid_for: Option<Duration>,
    /// How long a request waits undecided before `escalate_to` are told.
    pub escalate_after: Option<Duration>,
    /// Who is told on escalation: approvers and notify endpoints, by name
    /// (none: every endpoint told of escalations).
    pub escalate_to: Vec<String>,
    /// How long a request waits undecided before it is denied.
    pub expires_after: Option<Duration>,
}

impl Timers {
    /// The timers of `entry` (the rule `name`), checked against each
    /// other and its decision.
    pub(super) fn check(entry: &RuleEntry, name: &str) -> Result<Timers, String> {
        let of = |w: &Option<Window>| w.as_ref().map(Window::duration);
        let timers = Timers {
            valid_for: of(&entry.valid_for),
            escalate_after: of(&entry.escalate_after),
            escalate_to: entry.escalate_to.clone(),
            expires_after: of(&entry.expires_after),
        };
        if timers == Timers::default() {
            return Ok(timers);
        }
        if entry.decision != RuleDecision::Ask {
            return Err(format!("rule “{name}”: valid_for, escalate_after, escalate_to and expires_after time a person's decision; decision = \"{}\" asks nobody", entry.decision.as_str()));
        }
        if entry.shadow {
            return Err(format!(
                "rule “{name}”: a shadow rule decides nothing, so it has nothing to time"
            ));
        }
        if !timers.escalate_to.is_empty() && timers.escalate_after.is_none() {
            return Err(format!(
                "rule “{name}”: escalate_to says who is told when a request waits too long; say how long with escalate_after"
            ));
        }
        if let Some(who) = timers
            .escalate_to
            .iter()
            .find(|n| n.trim().is_empty() || n.chars().any(crate::text::needs_escape))
        {
            return Err(format!(
                "rule “{name}”: escalate_to names {who:?}, which is not a printable name"
            ));
        }
        if let (Some(escalate), Some(expires)) = (timers.escalate_after, timers.expires_after) {
            if escalate >= expires {
                return Err(format!("rule “{name}”: escalate_after must be shorter than expires_after, or the request is denied before anyone more is told"));
            }
        }
        Ok(timers)
    }

    /// Whether the rule has none.
    pub fn is_empty(&self) -> bool {
        *self == Timers::default()
    }
}

/// An approval past its rule's `valid_for` ([`Rules::lapsed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Lapsed {
    /// The rule.
    pub rule: String,
    /// Its `valid_for`.
    pub valid_for: Duration,
    /// When the approval was given (`None`: it was recorded before idem
    /// kept the time, so it is read as lapsed).
    pub approved_at: Option<Timestamp>,
    /// Who gave it.
    pub by: Option<String>,
}

/// A request past its rule's `expires_after` ([`Rules::expired`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Expired {
    /// The rule.
    pub rule: String,
    /// Its `expires_after`.
    pub after: Duration,
}

impl Expired {
    /// Why the call is denied, as the model and the audit log read it.
    pub fn reason(&self) -> String {
        crate::text::timers::expired(&self.rule, self.after)
    }
}

/// A request past its rule's `escalate_after` ([`Rules::escalation`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Escalation {
    /// The rule.
    pub rule: String,
    /// Its `escalate_after`.
    pub after: Duration,
    /// Who is told, by name (approvers and endpoints).
    pub to: Vec<String>,
    /// When the request began to wait.
    pub since: Timestamp,
}

impl Rules {
    /// Whether any rule has a `valid_for`: else no approval lapses, and
    /// the executor reads nothing more to know it.
    pub fn times_approvals(&self) -> bool {
        self.rules.iter().any(|r| r.timers.valid_for.is_some())
    }

    /// The timers of the rule that asked people about `record`, if any.
    fn timers_of(&self, record: &Record) -> Option<(&str, &Timers)> {
        self.for_record(record)
            .filter(|r| r.decision == RuleDecision::Ask && !r.timers.is_empty())
            .map(|r| (r.name.as_str(), &r.timers))
    }

    /// Whether the approval `record` holds is past its rule's `valid_for`
    /// at `now`: then it must not run the call, which asks again.
    /// `None` for a record with no approval or no such rule.
    pub fn lapsed(&self, record: &Record, now: Timestamp) -> Option<Lapsed> {
        let approval = record.approval()?;
        let (rule, timers) = self.timers_of(record)?;
        let valid_for = timers.valid_for?;
        let approved_at = record
            .steps
            .get(APPROVED_AT_STEP)
            .and_then(|v| v.as_u64())
            .map(Timestamp)
            .or_else(|| record.approvals().last().map(|g| g.at));
        if approved_at.is_some_and(|at| now < at.plus(valid_for)) {
            return None;
        }
        Some(Lapsed {
            rule: rule.to_owned(),
            valid_for,
            approved_at,
            by: Some(approval.approver),
        })
    }

    /// Whether `record`, awaiting a decision nobody made (approvals of
    /// several needed count as none), is past its rule's `expires_after`
    /// at `now`: then it is denied.
    pub fn expired(&self, record: &Record, now: Timestamp) -> Option<Expired> {
        let (rule, after, _, _) = self.waited(record, now, |t| t.expires_after)?;
        Some(Expired { rule, after })
    }

    /// Whether `record`, awaiting a decision nobody made, is past its
    /// rule's `escalate_after` at `now`: then `escalate_to` are told, once
    /// per request.
    pub fn escalation(&self, record: &Record, now: Timestamp) -> Option<Escalation> {
        let (rule, after, since, to) = self.waited(record, now, |t| t.escalate_after)?;
        Some(Escalation {
            rule,
            after,
            to,
            since,
        })
    }

    /// When `record` awaits a decision nobody made for at least its
    /// rule's timer `which` at `now`: the rule, the timer, when it began
    /// to wait and the rule's `escalate_to`.
    fn waited(
        &self,
        record: &Record,
        now: Timestamp,
        which: fn(&Timers) -> Option<Duration>,
    ) -> Option<(String, Duration, Timestamp, Vec<String>)> {
        let since = undecided_since(record)?;
        let (rule, timers) = self.timers_of(record)?;
        let after = which(timers)?;
        (now >= since.plus(after))
            .then(|| (rule.to_owned(), after, since, timers.escalate_to.clone()))
    }
}

/// When `record` began to wait, if it awaits a decision nobody made.
fn undecided_since(record: &Record) -> Option<Timestamp> {
    match &record.state {
        RecordState::AwaitingApproval { requested_at, .. }
            if record.status() == Status::AwaitingApproval =>
        {
            Some(*requested_at)
        }
        _ => None,
    }
}
