//! How far a call is on its way to approval, for every event about it:
//! "1 of 2", who approved so far, and who may still decide.

use idem_runtime::approval::rules::Rules;
use idem_runtime::record::{Record, Status};
use serde_json::{json, Value};

/// Approvals a call has and needs, and who may still give one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Approvals given (towards this call, for its arguments).
    pub given: usize,
    /// Approvals it needs.
    pub required: usize,
    /// Who approved so far, oldest first.
    pub by: Vec<String>,
    /// Who may still approve: `None` any approver; empty once decided.
    pub may_decide: Option<Vec<String>>,
    /// The rule that asks for them, if one does.
    pub rule: Option<String>,
}

impl Progress {
    /// Where `record` stands under `rules` (none in force: one approval
    /// from any approver).
    pub(crate) fn of(record: &Record, rules: Option<&Rules>) -> Progress {
        let mut by: Vec<String> = record
            .approvals()
            .into_iter()
            .map(|g| g.approval.approver)
            .collect();
        if let Some(approval) = record.approval() {
            if !by.contains(&approval.approver) {
                by.push(approval.approver);
            }
        }
        let (rule, required, may) = match rules.map(|r| r.needs(record)) {
            Some(needs) => (needs.rule, needs.required, needs.may_approve),
            None => (None, 1, None),
        };
        let waiting = record.status() == Status::AwaitingApproval;
        Progress {
            given: by.len(),
            required: required.max(by.len()),
            by,
            may_decide: if waiting { may } else { Some(Vec::new()) },
            rule,
        }
    }

    /// In idem's JSON body.
    pub(crate) fn json(&self) -> Value {
        json!({
            "given": self.given,
            "required": self.required,
            "text": format!("{} of {}", self.given, self.required),
            "approved_by": self.by,
            "may_still_decide": match &self.may_decide {
                Some(names) => json!(names),
                None => json!("any approver"),
            },
            "rule": self.rule,
        })
    }

    /// In words: `1 of 2 approvals (dana); erin or frank may still
    /// approve`.
    pub(crate) fn words(&self) -> String {
        let so_far = match self.by.as_slice() {
            [] => String::new(),
            names => format!(" ({})", names.join(", ")),
        };
        let left = match &self.may_decide {
            None => "; any approver may approve".to_owned(),
            Some(names) if names.is_empty() => String::new(),
            Some(names) => format!("; {} may still approve", either(names)),
        };
        format!(
            "{} of {} approval{}{so_far}{left}",
            self.given,
            self.required,
            if self.required == 1 { "" } else { "s" }
        )
    }
}

/// `a`, `a or b`, `a, b or c`.
fn either(names: &[String]) -> String {
    match names {
        [] => "nobody".to_owned(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}
