//! What the inbox shows of a record, in words: the pieces the templates
//! lay out. Every text that comes from a record goes through
//! [`visible`] (askama then HTML-escapes it), so a call's arguments or an
//! error message can neither inject markup nor reorder what is around it
//! with bidirectional controls.

use std::time::Duration;

use idem_runtime::approval::Approval;
use idem_runtime::audit::AuditEvent;
use idem_runtime::catalog::{Catalog, CatalogTool};
use idem_runtime::class::ClassKind;
use idem_runtime::clock::Timestamp;
use idem_runtime::record::{
    CallInfo, CallInfoRef, FailureCode, Outcome, Record, RecordState, Status,
};
use serde_json::Value;

use idem_runtime::operator::json::json_or_string;
use idem_runtime::text::duration::{relative, short};
use idem_runtime::text::visible;

/// `at` as RFC 3339 in UTC, as the JSON and `idem show` write it.
fn rfc3339(at: Timestamp) -> String {
    at.rfc3339()
}

/// How long from `since` to `now`, in its largest whole unit (`45s`,
/// `3m`, `5h`, `2d`).
pub(crate) fn age(now: Timestamp, since: Timestamp) -> String {
    short(since.until(now))
}

/// Record text as it may be shown.
pub(super) fn shown(text: &str) -> String {
    visible(text).into_owned()
}

/// JSON text pretty-printed, each line escaped (JSON writes bidirectional
/// and C1 controls raw).
pub(super) fn pretty_json(text: &str) -> String {
    let value = json_or_string(text);
    let pretty = serde_json::to_string_pretty(&value).unwrap_or_else(|_| text.to_owned());
    pretty.lines().map(shown).collect::<Vec<_>>().join("\n")
}

/// What a class means, in plain words.
pub(super) fn class_meaning(class: ClassKind) -> &'static str {
    match class {
        ClassKind::Read => "Reads only: nothing changes when it runs.",
        ClassKind::IdempotentWrite => {
            "A write that is safe to repeat: running it again with the same arguments changes nothing more."
        }
        ClassKind::NonIdempotentWrite => {
            "A write that would happen again if run twice (a charge, a message): idem runs it once per key, and never again when it is not sure whether it ran."
        }
        ClassKind::Irreversible => {
            "Cannot be undone (a refund, a deletion): it runs only once a person approves it, and at most once."
        }
    }
}

/// A status in words.
pub(super) fn status_words(status: Status) -> &'static str {
    match status {
        Status::InFlight => "running",
        Status::AwaitingApproval => "awaiting approval",
        Status::Approved => "approved, waiting for its call to run it",
        Status::Succeeded => "succeeded",
        Status::Failed => "failed",
        Status::Unknown => "unknown: nobody knows whether it happened",
    }
}

/// Where `record` stands, in words: [`status_words`], except that a
/// denied call reads as denied (it never ran), not as failed.
pub(super) fn state_words(record: &Record) -> &'static str {
    match denied(record) {
        true => "denied: it never ran",
        false => status_words(record.status()),
    }
}

fn denied(record: &Record) -> bool {
    matches!(
        &record.state,
        RecordState::Completed {
            outcome: Outcome::Failure { failure },
            ..
        } if failure.code == FailureCode::ApprovalDenied
    )
}

/// What kind of decision an item waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waits {
    /// An approval or a denial.
    Approval,
    /// A resolution of an unknown outcome.
    Unknown,
    /// A resolution of a call whose owner vanished mid-call.
    Vanished,
}

impl Waits {
    /// What `record` waits for at `now`, if anything.
    pub(super) fn of(record: &Record, now: Timestamp) -> Option<Waits> {
        match record.status() {
            Status::AwaitingApproval => Some(Waits::Approval),
            Status::Unknown => Some(Waits::Unknown),
            Status::InFlight if record.lease_expired(now) || record.outlast().is_some() => {
                Some(Waits::Vanished)
            }
            _ => None,
        }
    }

    /// The filter value naming it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Waits::Approval => "awaiting_approval",
            Waits::Unknown => "unknown",
            Waits::Vanished => "vanished",
        }
    }

    /// In words, for the inbox.
    pub(super) fn words(self) -> &'static str {
        match self {
            Waits::Approval => "awaiting approval",
            Waits::Unknown => "outcome unknown",
            Waits::Vanished => "owner vanished",
        }
    }

    /// Since when the item has waited.
    pub(super) fn since(self, record: &Record) -> Timestamp {
        match &record.state {
            RecordState::AwaitingApproval { requested_at, .. } => *requested_at,
            RecordState::Completed { completed_at, .. } => *completed_at,
            RecordState::InFlight { lease_until, .. } => *lease_until,
        }
    }
}

/// Which version of a record a person was shown: decisions carry it back,
/// and one made on a record that changed since is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seen {
    /// The record's fence: every decision, and every new request under
    /// the key, gives it a new one.
    pub fence: u64,
    /// Its status.
    pub status: Status,
    /// How many audit entries it had.
    pub audit: usize,
}

impl Seen {
    /// The version `record` is.
    pub(super) fn of(record: &Record) -> Seen {
        Seen {
            fence: record.fence().0,
            status: record.status(),
            audit: record.audit.len(),
        }
    }

    /// As a form field or JSON value: `fence-status-audit`.
    pub(super) fn token(&self) -> String {
        format!("{}-{}-{}", self.fence, self.status, self.audit)
    }

    /// A token written by [`Seen::token`].
    pub(super) fn parse(token: &str) -> Option<Seen> {
        let mut parts = token.trim().splitn(3, '-');
        let fence = parts.next()?.parse().ok()?;
        let status = parts.next()?.parse().ok()?;
        let audit = parts.next()?.parse().ok()?;
        Some(Seen {
            fence,
            status,
            audit,
        })
    }
}

/// What changed between the version a person saw and the record now
/// (`None`: it is gone; `log` then says why, newest last), in a sentence.
pub(super) fn what_changed(
    seen: &Seen,
    now: Option<&Record>,
    log: &[AuditEvent],
    at: Timestamp,
) -> String {
    let Some(record) = now else {
        let why = log
            .last()
            .map(|e| {
                format!(
                    " ({})",
                    acted(e.action, &e.by, e.at, e.reason.as_deref(), at)
                )
            })
            .unwrap_or_else(|| " (it expired, or was released or deleted)".to_owned());
        return format!("The record is gone since you opened it{why}.");
    };
    let after: Vec<String> = record
        .audit
        .iter()
        .skip(seen.audit)
        .map(|e| acted(e.action, &e.by, e.at, e.reason.as_deref(), at))
        .collect();
    let after = match after.is_empty() {
        true => String::new(),
        false => format!(" — {}", after.join("; ")),
    };
    if record.status() != seen.status {
        format!(
            "When you opened it, it was {}; it is now {}{after}.",
            status_words(seen.status),
            state_words(record)
        )
    } else if !after.is_empty() {
        // The same request, decided on meanwhile without a change of
        // state: one approval of several a rule needs.
        format!("It changed since you opened it{after}. Look at it again before you decide.")
    } else {
        format!(
            "It was asked again since you opened it: this is a newer version of the record under the same key{after}. Read its arguments again."
        )
    }
}

/// "approved by dana 2m ago (“note”)".
fn acted(
    action: idem_runtime::record::AuditAction,
    by: &str,
    when: Timestamp,
    reason: Option<&str>,
    now: Timestamp,
) -> String {
    let reason = reason
        .map(|r| format!(" (“{}”)", shown(r)))
        .unwrap_or_default();
    format!("{action} by {} {}{reason}", shown(by), relative(now, when))
}

/// One line of the inbox.
#[derive(Debug, Clone)]
pub(super) struct Item {
    /// The full key.
    pub key: String,
    /// The tool, escaped for a screen.
    pub tool: String,
    /// The tool's name as the record has it (the JSON API's: JSON escapes
    /// what a screen would misread, and its filter finds it).
    pub raw_tool: String,
    /// The class, when the catalog (or the state) says.
    pub class: Option<&'static str>,
    /// The namespace, escaped for a screen.
    pub namespace: String,
    /// The namespace as the record has it.
    pub raw_namespace: String,
    /// The call id, or the run and step, that made the call, escaped and
    /// cut for a row.
    pub asked_in: Option<String>,
    /// Why it was made, in the caller's words, escaped and cut for a row.
    pub why: Option<String>,
    /// Who asked and why as the record has it (its arguments left out),
    /// for the JSON API.
    pub call: CallInfo,
    /// What it waits for.
    pub waits: Waits,
    /// How long it has waited ("5m").
    pub age: String,
    /// Since when (RFC 3339).
    pub since: String,
    /// Waited longer than the overdue age.
    pub overdue: bool,
    /// Its arguments on one line, cut.
    pub summary: String,
    /// The version shown.
    pub version: String,
}

impl Item {
    /// The inbox line for `record`, if it waits for a decision.
    pub(super) fn of(
        record: &Record,
        catalog: Option<&Catalog>,
        now: Timestamp,
        overdue: Duration,
    ) -> Option<Item> {
        let waits = Waits::of(record, now)?;
        let since = waits.since(record);
        Some(Item {
            key: record.key.as_str().to_owned(),
            tool: shown(&record.tool),
            raw_tool: record.tool.clone(),
            class: class_of(record, catalog).map(ClassKind::as_str),
            namespace: shown(record.info.namespace.as_deref().unwrap_or("")),
            raw_namespace: record.info.namespace.clone().unwrap_or_default(),
            asked_in: asked_in(&record.info).map(|text| cut(&text, ASKED_IN)),
            why: record
                .info
                .reason
                .as_ref()
                .map(|r| cut(r.as_str(), SUMMARY)),
            call: CallInfoRef {
                args: None,
                ..record.info.as_ref()
            }
            .to_owned(),
            waits,
            age: age(now, since),
            since: rfc3339(since),
            overdue: since.until(now) > overdue,
            summary: match &record.info.args {
                Some(args) => summary(args),
                None => "(withheld)".to_owned(),
            },
            version: Seen::of(record).token(),
        })
    }
}

/// How many characters of the arguments, or of the reason, a row shows.
pub(super) const SUMMARY: usize = 90;

/// How many characters of the call id, or the run and step, a row shows.
const ASKED_IN: usize = 60;

/// The arguments (JSON text) on one line for a row: all of them, or the
/// first [`SUMMARY`] characters ending in "…" and saying that they were
/// cut, so that a row never passes for the whole call.
pub(super) fn summary(args: &str) -> String {
    cut(args, SUMMARY)
}

/// `text` escaped on one line for a row: all of it, or its first `max`
/// characters ending in "…" and saying that they were cut.
fn cut(text: &str, max: usize) -> String {
    let cut = idem_runtime::text::clip(text, max);
    match cut == shown(text) {
        true => cut,
        false => format!("{cut} (cut: open the record for all of it)"),
    }
}

/// The call id, or the run and step, that made the call (not escaped).
fn asked_in(info: &CallInfo) -> Option<String> {
    match (&info.call_id, &info.run_id, info.step) {
        (Some(id), _, _) => Some(format!("call id {id}")),
        (None, Some(run), Some(step)) => Some(format!("run {run}, step {step}")),
        (None, Some(run), None) => Some(format!("run {run}")),
        (None, None, _) => None,
    }
}

/// The class of the record's tool: from the catalog, else from what only
/// one class does (only `irreversible` calls wait for approval).
pub(super) fn class_of(record: &Record, catalog: Option<&Catalog>) -> Option<ClassKind> {
    catalog
        .and_then(|c| c.tool(&record.tool))
        .map(|t| t.class)
        .or(match record.status() {
            Status::AwaitingApproval | Status::Approved => Some(ClassKind::Irreversible),
            _ => None,
        })
}

/// A labelled line of the decision page.
#[derive(Debug, Clone)]
pub(super) struct Field {
    /// The label.
    pub label: &'static str,
    /// The value (escaped for display; askama escapes HTML).
    pub value: String,
    /// The time (RFC 3339, UTC) the value gives, which the page shows in
    /// the reader's own time zone too.
    pub at: Option<String>,
}

/// One event of the record's audit trail.
#[derive(Debug, Clone)]
pub(super) struct Trail {
    /// When (RFC 3339).
    pub at: String,
    /// How long ago.
    pub ago: String,
    /// Who.
    pub by: String,
    /// What (`approved`, `denied`, …).
    pub action: String,
    /// State before → after.
    pub change: String,
    /// Why, or the note.
    pub reason: Option<String>,
}

impl Trail {
    /// An event of the store's log.
    pub(super) fn of(event: &AuditEvent, now: Timestamp) -> Trail {
        let state = |s: Option<Status>| s.map_or("gone".to_owned(), |s| s.as_str().to_owned());
        Trail {
            at: rfc3339(event.at),
            ago: relative(now, event.at),
            by: shown(&event.by),
            action: event.action.to_string(),
            change: format!("{} → {}", state(event.before), state(event.after)),
            reason: event.reason.as_deref().map(shown),
        }
    }
}

/// Everything the decision page shows of a record.
#[derive(Debug, Clone)]
pub(super) struct Detail {
    /// The full key.
    pub key: String,
    /// The tool.
    pub tool: String,
    /// Its description, from the catalog.
    pub description: Option<String>,
    /// Its class.
    pub class: Option<&'static str>,
    /// What the class means.
    pub class_meaning: Option<&'static str>,
    /// The status in words.
    pub status: &'static str,
    /// The status as written in filters.
    pub status_code: &'static str,
    /// What it waits for, if anything.
    pub waits: Option<Waits>,
    /// The canonical arguments, pretty-printed; `None` when withheld.
    pub arguments: Option<String>,
    /// The arguments' fingerprint.
    pub fingerprint: String,
    /// The other fields, in order.
    pub fields: Vec<Field>,
    /// The version shown.
    pub version: String,
    /// How long the tool keeps its outcomes, in words: what a resolution
    /// is kept for unless the person chooses.
    pub kept_for: String,
    /// The arguments as JSON an approver may edit (pretty-printed, every
    /// character [`visible`] would escape written as a JSON escape), for a
    /// call awaiting approval whose arguments are kept.
    pub editable: Option<String>,
    /// Who edited this call's arguments, and the key of the edited call
    /// that took its place.
    pub edited_to: Option<(String, String)>,
}

impl Detail {
    /// The page for `record` at `now`; `required`: how many approvals the
    /// rule that applies to it asks for, if one does.
    pub(super) fn of(
        record: &Record,
        catalog: Option<&Catalog>,
        now: Timestamp,
        required: Option<usize>,
    ) -> Detail {
        let tool: Option<&CatalogTool> = catalog.and_then(|c| c.tool(&record.tool));
        let class = class_of(record, catalog);
        let info = &record.info;
        let when = |at: Timestamp| format!("{} ({})", rfc3339(at), relative(now, at));
        let fields = std::cell::RefCell::new(Vec::new());
        let field = |label: &'static str, value: String| {
            fields.borrow_mut().push(Field {
                label,
                value,
                at: None,
            })
        };
        let timed = |label: &'static str, value: String, at: Timestamp| {
            fields.borrow_mut().push(Field {
                label,
                value,
                at: Some(rfc3339(at)),
            })
        };
        field("Key", record.key.as_str().to_owned());
        if let Some(ns) = &info.namespace {
            field("Namespace", shown(ns));
        }
        match (&info.call_id, &info.run_id, info.step) {
            (Some(id), _, _) => field("Call id", shown(id)),
            (None, Some(run), Some(step)) => {
                field("Run and step", format!("{}, step {step}", shown(run)))
            }
            (None, Some(run), None) => field("Run", shown(run)),
            (None, None, _) => {}
        }
        if let (Some(_), Some(run)) = (&info.call_id, &info.run_id) {
            field("Run", shown(run));
        }
        if let Some(reason) = &info.reason {
            field("Why, in the caller's words", shown(reason.as_str()));
        }
        if let Some(worker) = &record.worker {
            field("Worker", shown(worker));
        }
        timed("Created", when(record.created_at), record.created_at);
        match &record.state {
            RecordState::AwaitingApproval {
                requested_at,
                expires_at,
                message,
                ..
            } => {
                timed("Approval asked", when(*requested_at), *requested_at);
                field("Waits for", shown(message));
                timed(
                    "Expires",
                    match record.status() {
                        Status::Approved => format!("{}: then the approval lapses unused", when(*expires_at)),
                        _ => format!("{}: unanswered until then, the request lapses and a new call asks again", when(*expires_at)),
                    },
                    *expires_at,
                );
            }
            RecordState::InFlight { lease_until, .. } => timed(
                "Lease",
                if let Some(wait) = record.outlast() {
                    format!("the worker that ran it vanished mid-call; another waits out its attempt until {}, then asks the tool's reconcile hook whether the effect happened; a resolution now ends the wait", when(wait.until))
                } else if record.lease_expired(now) {
                    format!("ran out {}: the worker that ran it vanished mid-call, so nobody knows whether the effect happened", when(*lease_until))
                } else {
                    format!("until {}", when(*lease_until))
                },
                *lease_until,
            ),
            RecordState::Completed {
                completed_at,
                outcome,
                expires_at,
                ..
            } => {
                timed("Completed", when(*completed_at), *completed_at);
                match outcome {
                    Outcome::Unknown { reason } => field("What went wrong", shown(reason)),
                    Outcome::Failure { failure } => field(
                        "Failure",
                        format!("{}: {}", failure.code, shown(&failure.message)),
                    ),
                    Outcome::Success { output } => field("Output", shown(output.as_str())),
                }
                // An outcome is kept for a time, a resolution too: say so,
                // since a repeat after it runs the tool again.
                if !matches!(outcome, Outcome::Unknown { .. }) {
                    timed(
                        "Kept until",
                        format!(
                            "{}: after that, a call with this key runs the tool again",
                            when(*expires_at)
                        ),
                        *expires_at,
                    );
                }
            }
        }
        if let Some(Value::Number(attempts)) =
            record.steps.get(idem_runtime::executor::ATTEMPT_STEP)
        {
            field(
                "Attempts",
                format!("{attempts} (attempts made before this state)"),
            );
        }
        let so_far = record.approvals();
        if !so_far.is_empty() && record.approval().is_none() {
            let by: Vec<String> = so_far.iter().map(|g| shown(&g.approval.approver)).collect();
            field(
                "Approvals",
                match required {
                    Some(required) => format!(
                        "{} of {required} approvals so far (by {})",
                        so_far.len(),
                        by.join(", ")
                    ),
                    None => format!("{} so far (by {})", so_far.len(), by.join(", ")),
                },
            );
        }
        if let Some(Approval { approver, note, .. }) = record.approval() {
            field(
                "Approved by",
                match note {
                    Some(n) => format!("{} (“{}”)", shown(&approver), shown(&n)),
                    None => shown(&approver),
                },
            );
        }
        Detail {
            key: record.key.as_str().to_owned(),
            tool: shown(&record.tool),
            description: tool.map(|t| shown(&t.description)),
            class: class.map(ClassKind::as_str),
            class_meaning: class.map(class_meaning),
            status: state_words(record),
            status_code: match denied(record) {
                true => "denied",
                false => record.status().as_str(),
            },
            waits: Waits::of(record, now),
            arguments: info.args.as_deref().map(pretty_json),
            fingerprint: record.fingerprint.as_str().to_owned(),
            fields: fields.into_inner(),
            version: Seen::of(record).token(),
            kept_for: match info.ttl {
                Some(ttl) => idem_runtime::text::duration::exact(ttl),
                None => "not recorded".to_owned(),
            },
            editable: match record.status() {
                Status::AwaitingApproval => info.args.as_deref().map(editable_json),
                _ => None,
            },
            edited_to: record
                .edited()
                .map(|to| (shown(&to.by), to.key.as_str().to_owned())),
        }
    }
}

/// JSON text pretty-printed for a person to edit: still JSON, with every
/// character [`visible`] would escape written as a JSON escape, so that
/// nothing invisible is sent back unseen.
fn editable_json(text: &str) -> String {
    let value = json_or_string(text);
    let pretty = serde_json::to_string_pretty(&value).unwrap_or_else(|_| text.to_owned());
    idem_runtime::text::json_safe(&pretty).into_owned()
}

/// The arguments on one line for restating an effect: the JSON the tool
/// gets, keys quoted (`{"cents":4900,"charge":"ch_42"}`), so that no key
/// or value can pass for another argument.
pub(super) fn arguments_in_words(record: &Record) -> String {
    let Some(args) = &record.info.args else {
        // The first 12 digits, as the program's tables show keys.
        let fingerprint = record.fingerprint.as_str();
        return format!(
            "the arguments whose fingerprint is {} (the tool keeps them out of the store)",
            fingerprint.get(..12).unwrap_or(fingerprint)
        );
    };
    shown(&json_or_string(args).to_string())
}

#[cfg(test)]
mod tests;
