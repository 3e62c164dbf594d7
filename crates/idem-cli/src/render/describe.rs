//! `idem show` for people: every field of one record, a label per line, as
//! `kubectl describe` prints, ending with what an operator can do next.
//! Every value from the record is shown escaped ([`visible`]): one line per
//! label, and nothing in a value can move the cursor or reverse the text
//! around it.

use std::fmt::Write;

use idem_runtime::clock::Timestamp;
use idem_runtime::record::{Outcome, Record, RecordState, Status};

use super::json::json_or_string;
use super::short_key;
use super::style::{paint, status as status_style, COMMAND, DIM, HEADER};
use crate::time::{age, relative, rfc3339};
use idem_runtime::text::visible;

/// Width of the label column.
const LABEL: usize = 13;

/// Compact JSON longer than this is pretty-printed.
const INLINE_JSON: usize = 72;

/// The description of `record` at the store's time `now`, styled.
pub(crate) fn describe(record: &Record, now: Timestamp) -> String {
    let mut out = Out::default();
    let status = record.status();
    let info = &record.info;
    let when = |at: Timestamp| format!("{} ({})", rfc3339(at), relative(now, at));

    out.field("Key", record.key.as_str());
    out.styled("State", status.as_str(), status_style(status));
    out.field("Tool", &record.tool);
    out.field(
        "Namespace",
        info.namespace.as_deref().unwrap_or("(not recorded)"),
    );
    let call = match (&info.call_id, &info.run_id, info.step) {
        (Some(id), _, _) => format!("call id {id}"),
        (None, Some(run), Some(step)) => format!("run {run}, step {step}"),
        (None, Some(run), None) => format!("run {run}"),
        (None, None, _) => "(not recorded)".to_owned(),
    };
    out.field("Call", &call);
    if let (Some(_), Some(run)) = (&info.call_id, &info.run_id) {
        let step = info.step.map(|s| format!(", step {s}")).unwrap_or_default();
        out.field("Run", &format!("{run}{step}"));
    }
    if let Some(reason) = &info.reason {
        out.field("Reason", reason.as_str());
    }
    out.field(
        "Worker",
        record.worker.as_deref().unwrap_or("(not recorded)"),
    );
    out.field("Created", &when(record.created_at));
    match &record.state {
        RecordState::InFlight { lease_until, .. } => {
            let lease = if record.lease_expired(now) {
                format!(
                    "{} (ran out {}: the owner vanished)",
                    rfc3339(*lease_until),
                    relative(now, *lease_until)
                )
            } else {
                format!("until {}", when(*lease_until))
            };
            out.field("Lease", &lease);
            if let Some(wait) = record.outlast() {
                out.field(
                    "Waits",
                    &format!(
                        "owner {} vanished mid-call; its attempt must be over by {}, then the reconcile hook decides (idem resolve ends the wait)",
                        wait.previous,
                        when(wait.until)
                    ),
                );
            }
        }
        RecordState::AwaitingApproval { expires_at, .. } => {
            let then = if status == Status::Approved {
                "then the approval lapses unused, and a new call asks again"
            } else {
                "unanswered until then, the request lapses and a new call asks again"
            };
            out.field("Expires", &format!("{}; {then}", when(*expires_at)));
        }
        RecordState::Completed {
            completed_at,
            expires_at,
            ..
        } => {
            out.field("Completed", &when(*completed_at));
            if status == Status::Unknown {
                out.field(
                    "Kept",
                    &format!(
                        "until a person settles it (unknown for {}); it never expires, and every call with its key is refused meanwhile",
                        age(now, *completed_at)
                    ),
                );
            } else {
                out.field(
                    "Expires",
                    &format!(
                        "{}; then the record is deleted, and a new call with its key runs the tool again",
                        when(*expires_at)
                    ),
                );
            }
        }
    }
    match &info.args {
        Some(args) => {
            out.json("Arguments", args);
            out.dim("Fingerprint", record.fingerprint.as_str());
        }
        None => out.field(
            "Arguments",
            &format!("not stored; fingerprint {}", record.fingerprint),
        ),
    }
    if let RecordState::AwaitingApproval {
        requested_at,
        message,
        ..
    } = &record.state
    {
        out.field(
            "Requested",
            &format!("{}: {message}", relative(now, *requested_at)),
        );
    }
    let so_far = record.approvals();
    if !so_far.is_empty() && record.approval().is_none() {
        let by: Vec<&str> = so_far
            .iter()
            .map(|g| g.approval.approver.as_str())
            .collect();
        out.field(
            "Approvals",
            &format!("{} so far (by {})", so_far.len(), by.join(", ")),
        );
    }
    if let Some(approval) = record.approval() {
        let note = approval.note.map(|n| format!(" ({n})")).unwrap_or_default();
        out.field("Approved by", &format!("{}{note}", approval.approver));
    }
    if let Some(outcome) = record.outcome() {
        match outcome {
            Outcome::Success { output } => out.json("Output", output.as_str()),
            Outcome::Failure { failure } => {
                out.field("Failure", &format!("{}: {}", failure.code, failure.message));
                if let Some(details) = &failure.details {
                    out.json("Details", &details.to_string());
                }
            }
            Outcome::Unknown { reason } => out.field("Unknown", reason),
        }
    }
    if !record.steps.is_empty() {
        out.section("Steps");
        let width = record
            .steps
            .keys()
            .map(|k| visible(k).chars().count())
            .max()
            .unwrap_or(0);
        for (name, value) in &record.steps {
            let (name, value) = (visible(name), value.to_string());
            let _ = writeln!(out.text, "  {name:width$}  {}", visible(&value));
        }
    }
    if !record.audit.is_empty() {
        out.section("Audit");
        for entry in &record.audit {
            let reason = entry
                .reason
                .as_deref()
                .map(|r| format!(": {}", visible(r)))
                .unwrap_or_default();
            let _ = writeln!(
                out.text,
                "  {}  {} by {}{reason}",
                when(entry.at),
                entry.action,
                visible(&entry.by)
            );
        }
    }
    let next = next_steps(record, now);
    if !next.is_empty() {
        out.text.push('\n');
        out.text.push_str(&paint(DIM, "Next:"));
        out.text.push('\n');
        for command in next {
            out.text.push_str("  ");
            out.text.push_str(&paint(COMMAND, &command));
            out.text.push('\n');
        }
    }
    out.text
}

/// The commands that settle `record`, if it waits for a person, one per
/// way to settle it. Each runs as written once its upper-case words are
/// filled in: NAME (who decides), TEXT (why), MESSAGE (the failure),
/// JSON (the output).
fn next_steps(record: &Record, now: Timestamp) -> Vec<String> {
    let key = short_key(record.key.as_str());
    let settle = || {
        vec![
            format!("idem resolve {key} --succeeded JSON --by NAME --reason TEXT"),
            format!("idem resolve {key} --failed MESSAGE --by NAME --reason TEXT"),
            format!("idem resolve {key} --release --by NAME --reason TEXT"),
        ]
    };
    match record.status() {
        Status::AwaitingApproval => vec![
            format!("idem approve {key} --by NAME"),
            format!("idem deny {key} --by NAME --reason TEXT"),
        ],
        Status::Unknown => settle(),
        Status::InFlight if record.lease_expired(now) || record.outlast().is_some() => settle(),
        _ => Vec::new(),
    }
}

/// The description being written.
#[derive(Default)]
struct Out {
    text: String,
}

impl Out {
    fn label(&mut self, label: &str) {
        let label = format!("{label}:");
        self.text.push_str(&paint(HEADER, &label));
        let pad = LABEL.saturating_sub(label.len()) + 1;
        self.text.extend(std::iter::repeat_n(' ', pad));
    }

    /// A label alone on its line, with what follows indented below it.
    fn section(&mut self, label: &str) {
        self.text.push_str(&paint(HEADER, &format!("{label}:")));
        self.text.push('\n');
    }

    /// `value` (escaped) on the label's line.
    fn field(&mut self, label: &str, value: &str) {
        self.label(label);
        self.text.push_str(&visible(value));
        self.text.push('\n');
    }

    /// `value` (escaped) on the label's line, in `style`.
    fn styled(&mut self, label: &str, value: &str, style: anstyle::Style) {
        self.label(label);
        self.text.push_str(&paint(style, &visible(value)));
        self.text.push('\n');
    }

    fn dim(&mut self, label: &str, value: &str) {
        self.styled(label, value, DIM);
    }

    /// JSON text on the label's line, or pretty-printed below it when long.
    /// JSON escapes C0 controls itself; what it writes raw (DEL, C1
    /// controls, bidirectional overrides) is escaped line by line.
    fn json(&mut self, label: &str, text: &str) {
        let value = json_or_string(text);
        let compact = value.to_string();
        if compact.len() <= INLINE_JSON {
            return self.field(label, &compact);
        }
        self.section(label);
        let pretty = serde_json::to_string_pretty(&value).unwrap_or(compact);
        for line in pretty.lines() {
            let _ = writeln!(self.text, "  {}", visible(line));
        }
    }
}
