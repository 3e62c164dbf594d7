//! Approval rules: who may decide a call awaiting approval, per tool and
//! per namespace, how many distinct approvals it needs before it runs,
//! and whether whoever asked for it may approve it.
//!
//! They are written as the approvers file's `[[rule]]` tables (`idem
//! serve --approvers`), or built in code from the same tables
//! ([`RuleEntry`]):
//!
//! ```toml
//! [[rule]]
//! name = "payments"               # named in refusals and the audit log; default "rule N"
//! tools = ["charge_*", "refund"]  # globs; default every tool
//! namespaces = ["mcp/billing/*"]  # globs; default every namespace, and none
//! principals = ["ci-*"]           # globs of who asked; default anyone
//! when = "args.cents > 500000"    # a CEL condition over the call; default always
//! decision = "ask"                # "run" (no person), "deny" (with `reason`) or "ask"
//! reason = "…"                    # deny: what the model is told
//! approvers = ["dana", "erin"]    # ask: who may approve or deny; default every approver
//! required = 2                    # ask: distinct approvals before it runs; default 1
//! forbid_self_approval = true     # ask: whoever asked may not approve; default false
//! shadow = true                   # only audit what it would have decided
//! valid_for = "15m"               # ask: an approval runs the call within this long of being given
//! escalate_after = "30m"          # ask: undecided this long, tell escalate_to
//! escalate_to = ["frank"]         # ask: approvers and notify endpoints, by name
//! expires_after = "4h"            # ask: undecided this long, the call is denied
//! ```
//!
//! **Time.** An approval past its rule's `valid_for` never runs the
//! call: the executor that would have run it asks again, writing in the
//! audit log that it lapsed ([`Rules::lapsed`]). A request undecided
//! past `escalate_after` is told to `escalate_to`, once
//! ([`Rules::escalation`], acted on by `idem serve`'s notifications); one
//! undecided past `expires_after` is denied by its rule, the model told
//! why ([`Rules::expired`]). A decision given is never undone by time.
//!
//! **Decided per call.** When an `irreversible` call needs an approval,
//! the executor reads the rules in force and the *first* rule that
//! matches the call decides, as in a firewall: the rules read top-down, a
//! refusal names the one rule that decided, and a specific rule goes above
//! a general one ([`Rules::decide`]). `run` runs it with no person,
//! recorded in the audit log as the rule's approval; `deny` refuses it
//! with the rule's reason, which the model reads; `ask` parks it for
//! `required` people. A rule with `shadow = true` decides nothing: the
//! audit log records what it would have decided (`shadow_rule`) and the
//! rules after it go on as if it were not there, so a team can roll a
//! rule out. A call no rule matches goes to the executor's approval
//! policy as before. A rule that matches every call must be the last. A
//! rule's condition is CEL ([`condition`](self#conditions)).
//!
//! **Where they are enforced.** The rules in force are kept *in the store*
//! ([`Rules::publish`], done by `idem serve` at start and on every reload),
//! and every decision written through
//! [`Operator`](crate::operator::Operator) — `idem approve` and `idem
//! deny`, the inbox's page and API, the MCP chat approval, a program's
//! own — is checked against them ([`Rules::in_force`]) before it is
//! written. No surface has to be told where the rules are, so none can
//! decide past them by not being told.
//!
//! **Who asked.** `forbid_self_approval` compares the approver with the
//! principal the executor recorded when it parked the call
//! ([`Record::asker`]), as authenticated, never a part of the namespace.

mod condition;
mod decide;
mod kept;
mod rule;
mod timers;

use serde::{Deserialize, Serialize};

use crate::record::{Record, ASKER_STEP, RULE_STEP};

pub use condition::Call;
pub use decide::{Decided, Verdict};
pub use rule::Rule;
pub use timers::{Escalation, Expired, Lapsed, Timers, Window};

/// One `[[rule]]` table, as written (in the approvers file, or in code).
///
/// ```
/// use idem_runtime::approval::rules::{RuleEntry, Rules};
///
/// let mut two = RuleEntry::default();
/// two.tools = vec!["refund".into()];
/// two.required = 2;
/// two.forbid_self_approval = true;
/// let rules = Rules::check(vec![two], &["dana".into(), "erin".into()]).unwrap();
/// assert_eq!(rules.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RuleEntry {
    /// Its name, shown in refusals; `rule N` (its place, from 1) if none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Globs of the tools it applies to; none: every tool.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Globs of the namespaces it applies to; none: every namespace (and
    /// records with none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Globs of who asked for the call (the principal as authenticated);
    /// none: anyone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub principals: Vec<String>,
    /// A CEL condition over the call (`args`, `tool`, `namespace`,
    /// `principal`, `time`); none: always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// What the rule decides of a call it matches.
    #[serde(default)]
    pub decision: RuleDecision,
    /// `deny`: why, as the model is told it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Only audit what the rule would have decided; decide nothing.
    #[serde(default)]
    pub shadow: bool,
    /// `ask`: who may approve or deny; `None`: every approver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvers: Option<Vec<String>>,
    /// `ask`: distinct approvals needed before the call runs (at least 1).
    #[serde(default = "one")]
    pub required: usize,
    /// `ask`: whether whoever asked for the call may not approve it.
    #[serde(default)]
    pub forbid_self_approval: bool,
    /// `ask`: how long an approval runs the call after it was given;
    /// after it, the call asks again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_for: Option<Window>,
    /// `ask`: how long a request waits undecided before `escalate_to`
    /// are told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate_after: Option<Window>,
    /// `ask`: who is told on escalation, by name: approvers and notify
    /// endpoints.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalate_to: Vec<String>,
    /// `ask`: how long a request waits undecided before it is denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_after: Option<Window>,
}

/// What a rule decides of a call it matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleDecision {
    /// Run it with no person, as the rule's approval.
    Run,
    /// Refuse it, with the rule's `reason`.
    Deny,
    /// Park it for `required` people of the `approvers`.
    #[default]
    Ask,
}

impl RuleDecision {
    /// The decision as written.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleDecision::Run => "run",
            RuleDecision::Deny => "deny",
            RuleDecision::Ask => "ask",
        }
    }
}

impl Default for RuleEntry {
    fn default() -> Self {
        RuleEntry {
            name: None,
            tools: Vec::new(),
            namespaces: Vec::new(),
            principals: Vec::new(),
            when: None,
            decision: RuleDecision::Ask,
            reason: None,
            shadow: false,
            approvers: None,
            required: 1,
            forbid_self_approval: false,
            valid_for: None,
            escalate_after: None,
            escalate_to: Vec::new(),
            expires_after: None,
        }
    }
}

fn one() -> usize {
    1
}

/// The rules, in order, and who may decide at all.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    rules: Vec<Rule>,
    /// As written, to keep them in the store.
    written: Vec<RuleEntry>,
    /// Everyone with the role approver, sorted: who may decide where a
    /// rule names nobody.
    deciders: Vec<String>,
}

/// The most names a message lists as who else may approve; beyond that
/// it says "another approver".
const MAX_NAMED: usize = 5;

/// A decision the rules are asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// An approval (one of `required`).
    Approve,
    /// A denial, which ends the call.
    Deny,
}

/// Why the rules refuse a person's decision. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleRefusal {
    /// The person is not one of the approvers the rules know.
    #[error("{who} is not an approver in the approval rules in force (approvers: {approvers}), so may not decide calls of {tool}.")]
    NotAnApprover {
        /// Who tried.
        who: String,
        /// Who may, in words.
        approvers: String,
        /// The record's tool.
        tool: String,
    },
    /// The rule names who may decide, and not this person.
    #[error("Rule “{rule}” lets only {allowed} decide calls of {tool}{namespace}; {who} is not one of them.")]
    NotListed {
        /// The rule.
        rule: String,
        /// Who tried.
        who: String,
        /// Who may, in words.
        allowed: String,
        /// The record's tool.
        tool: String,
        /// `in namespace …`, or nothing.
        namespace: String,
    },
    /// The rule that applies denies the call: nobody approves it.
    #[error("Rule “{rule}” denies this call of {tool}, so nobody may approve it: {reason}")]
    Denied {
        /// The rule.
        rule: String,
        /// The record's tool.
        tool: String,
        /// The rule's reason.
        reason: String,
    },
    /// Nobody decided the call within its rule's `expires_after`: it is
    /// denied, and nobody may decide it now.
    #[error("This call of {tool} can no longer be decided: {reason}")]
    Expired {
        /// The record's tool.
        tool: String,
        /// Why, as the model is told.
        reason: String,
    },
    /// The rule forbids approving one's own call, and this person asked
    /// for it.
    #[error("Rule “{rule}” forbids approving your own call: {who} asked for it (namespace {namespace}). Another approver must approve it; you may still deny it.")]
    OwnCall {
        /// The rule.
        rule: String,
        /// Who tried (and asked).
        who: String,
        /// The record's namespace.
        namespace: String,
    },
}

/// How many approvals a call awaiting approval needs under the rules, and
/// from whom ([`Rules::needs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    /// The rule that asks for people (`None`: no rule does).
    pub rule: Option<String>,
    /// Distinct approvals needed.
    pub required: usize,
    /// Who may approve it, besides those who did (`None`: any approver).
    pub may_approve: Option<Vec<String>>,
}

/// A rule that cannot be used as written: which (its place, from 0) and
/// why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct RulesError {
    /// The rule's place in the list, from 0.
    pub index: usize,
    /// What is wrong, naming the rule.
    pub problem: String,
}

/// What the rules say about one decision that they allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowed {
    /// The rule that applies (`None`: no rule matches the record).
    pub rule: Option<String>,
    /// Distinct approvals the call needs before it runs.
    pub required: usize,
    /// Who else may approve, in words (`another approver`, `erin or
    /// frank`), for the person told the call still waits.
    pub others: String,
}

impl Rules {
    /// Check `entries`; `approvers` are the names with the role approver
    /// (who may decide at all). Refused, with the rule and the reason,
    /// when a rule could never let anything run, names someone who is not
    /// an approver, has a broken glob, or hides every rule after it.
    pub fn check(entries: Vec<RuleEntry>, approvers: &[String]) -> Result<Rules, RulesError> {
        let mut rules = Vec::new();
        let count = entries.len();
        for (i, entry) in entries.iter().enumerate() {
            let refused = |problem: String| RulesError { index: i, problem };
            let rule = Rule::check(entry, i, approvers).map_err(refused)?;
            if rule.matches_everything() && !rule.shadow && i + 1 < count {
                return Err(refused(format!("rule “{}” matches every call, so the rules after it would never apply: move it last", rule.name)));
            }
            rules.push(rule);
        }
        let mut deciders = approvers.to_vec();
        deciders.sort();
        deciders.dedup();
        Ok(Rules {
            rules,
            written: entries,
            deciders,
        })
    }

    /// How many rules there are.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are none (every call needs one approval, from any
    /// approver).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Rule> {
        self.rules.iter()
    }

    /// Who may decide at all (the approvers), sorted.
    pub fn approvers(&self) -> &[String] {
        &self.deciders
    }

    /// The rule that applies to `record` when a person decides it: the
    /// one that asked for people when the call was parked (recorded on it,
    /// [`RULE_STEP`]), if it is still in force and still asks; else the
    /// first rule that decides (not a shadow) that matches the call, its
    /// condition read with the arguments and the time recorded with it.
    pub fn for_record(&self, record: &Record) -> Option<&Rule> {
        let named = record.steps.get(RULE_STEP).and_then(|v| v.as_str());
        if let Some(rule) = named.and_then(|name| {
            self.rules
                .iter()
                .find(|r| r.name == name && !r.shadow && r.decision == RuleDecision::Ask)
        }) {
            return Some(rule);
        }
        let args = record
            .info
            .args
            .as_deref()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok());
        let asker = record.asker();
        let call = Call {
            tool: &record.tool,
            namespace: record.info.namespace.as_deref(),
            principal: asker.as_deref(),
            args: args.as_ref(),
            now: match &record.state {
                crate::record::RecordState::AwaitingApproval { requested_at, .. } => *requested_at,
                _ => record.created_at,
            },
        };
        self.rules
            .iter()
            .filter(|r| !r.shadow)
            .find(|r| r.matches(&call).unwrap_or(r.decision != RuleDecision::Run))
    }

    /// How many approvals `record` needs and who may still give one: the
    /// rule that applies to it when it asks people, else one approval
    /// from any approver.
    pub fn needs(&self, record: &Record) -> Needs {
        match self.for_record(record) {
            Some(rule) if rule.decision == RuleDecision::Ask => {
                let approved: Vec<String> = record
                    .approvals()
                    .into_iter()
                    .map(|g| g.approval.approver)
                    .collect();
                let asker = record.asker();
                Needs {
                    rule: Some(rule.name.clone()),
                    required: rule.required,
                    may_approve: Some(rule.may_still_approve(
                        &self.deciders,
                        asker.as_deref(),
                        &approved,
                        "",
                    )),
                }
            }
            _ => Needs {
                rule: None,
                required: 1,
                may_approve: None,
            },
        }
    }

    /// Whether `who` may make `act` on `record`, and if so, how many
    /// approvals it needs.
    pub fn allows(&self, record: &Record, who: &str, act: Act) -> Result<Allowed, RuleRefusal> {
        if !self.deciders.iter().any(|n| n == who) {
            return Err(RuleRefusal::NotAnApprover {
                who: who.to_owned(),
                approvers: either(&self.deciders, "and"),
                tool: record.tool.clone(),
            });
        }
        let rule = match self.for_record(record) {
            Some(rule) if rule.decision == RuleDecision::Deny && act == Act::Approve => {
                return Err(RuleRefusal::Denied {
                    rule: rule.name.clone(),
                    tool: record.tool.clone(),
                    reason: rule.reason.clone().unwrap_or_default(),
                })
            }
            Some(rule) if rule.decision == RuleDecision::Ask => rule,
            // No rule, or one that would have run it: one approval from
            // any approver.
            _ => {
                return Ok(Allowed {
                    rule: None,
                    required: 1,
                    others: "another approver".to_owned(),
                })
            }
        };
        let namespace = record.info.namespace.as_deref();
        if let Some(listed) = &rule.approvers {
            if !listed.iter().any(|n| n == who) {
                return Err(RuleRefusal::NotListed {
                    rule: rule.name.clone(),
                    who: who.to_owned(),
                    allowed: either(listed, "and"),
                    tool: record.tool.clone(),
                    namespace: namespace.map_or(String::new(), |n| format!(" in namespace {n}")),
                });
            }
        }
        let asker = record.asker();
        if act == Act::Approve && rule.forbid_self_approval && asker.as_deref() == Some(who) {
            return Err(RuleRefusal::OwnCall {
                rule: rule.name.clone(),
                who: who.to_owned(),
                namespace: namespace.unwrap_or_default().to_owned(),
            });
        }
        let approved: Vec<String> = record
            .approvals()
            .into_iter()
            .map(|g| g.approval.approver)
            .collect();
        let left = rule.may_still_approve(&self.deciders, asker.as_deref(), &approved, who);
        let others = match left.len() {
            0..=MAX_NAMED => either(&left, "or"),
            _ => "another approver".to_owned(),
        };
        Ok(Allowed {
            rule: Some(rule.name.clone()),
            required: rule.required,
            others,
        })
    }
}

impl Record {
    /// Who asked for this call, as the executor recorded it when it parked
    /// the call awaiting approval ([`ASKER_STEP`]): the principal as
    /// authenticated, else the namespace whole. `None` for a call parked
    /// before idem recorded it.
    pub fn asker(&self) -> Option<String> {
        self.steps
            .get(ASKER_STEP)
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    }
}

/// `a`, `a and b`, `a, b and c` (with `word` for the last joint); `nobody
/// else` for none.
pub(crate) fn either(names: &[String], word: &str) -> String {
    match names {
        [] => "nobody else".to_owned(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} {word} {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests;
