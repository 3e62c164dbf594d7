//! One rule, checked from its table ([`RuleEntry`]): its globs and its
//! condition compiled, its decision's fields checked against each other
//! and against the approvers.

use super::condition::{Bindings, Call, Condition};
use super::timers::Timers;
use super::{RuleDecision, RuleEntry};
use crate::glob::Glob;

/// One rule, checked.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Its name, or `rule N` (its place, from 1).
    pub name: String,
    tools: Vec<Glob>,
    namespaces: Vec<Glob>,
    principals: Vec<Glob>,
    when: Option<Condition>,
    /// What it decides.
    pub decision: RuleDecision,
    /// `deny`: why.
    pub reason: Option<String>,
    /// Whether it only audits.
    pub shadow: bool,
    /// Who may decide; `None`: every approver.
    pub(super) approvers: Option<Vec<String>>,
    /// Distinct approvals needed before the call runs.
    pub required: usize,
    pub(super) forbid_self_approval: bool,
    /// Its timers (`ask` only).
    pub timers: Timers,
}

impl Rule {
    /// The `i`th entry (from 0), checked against the `approvers`.
    pub(super) fn check(entry: &RuleEntry, i: usize, approvers: &[String]) -> Result<Rule, String> {
        let name = match entry.name.as_deref().map(str::trim) {
            Some(name) if name.is_empty() || name.chars().any(crate::text::needs_escape) => {
                return Err(format!("rule {}: its name must be printable text", i + 1))
            }
            Some(name) => name.to_owned(),
            None => format!("rule {}", i + 1),
        };
        let eligible = match &entry.approvers {
            Some(listed) => {
                if listed.is_empty() {
                    return Err(format!("rule “{name}”: approvers = [] lets nobody decide; leave it out to let every approver decide"));
                }
                for who in listed {
                    if !approvers.contains(who) {
                        return Err(format!("rule “{name}”: {who:?} is not an [[approver]] with role = \"approver\" in this file"));
                    }
                }
                listed.len()
            }
            None => approvers.len(),
        };
        if entry.required == 0 {
            return Err(format!(
                "rule “{name}”: required = 0 would let a call run unapproved; it is at least 1"
            ));
        }
        if entry.decision != RuleDecision::Ask {
            let what = entry.decision.as_str();
            if entry.approvers.is_some() || entry.required != 1 || entry.forbid_self_approval {
                return Err(format!("rule “{name}”: approvers, required and forbid_self_approval say who decides when a person is asked; decision = \"{what}\" asks nobody"));
            }
        } else if entry.required > eligible {
            return Err(format!("rule “{name}”: required = {} but only {eligible} may approve, so nothing it matches could ever run", entry.required));
        }
        let reason = entry
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty());
        match (entry.decision, reason) {
            (RuleDecision::Deny, None) => {
                return Err(format!(
                    "rule “{name}”: decision = \"deny\" needs a reason, which the model is told"
                ))
            }
            (RuleDecision::Deny, Some(_)) | (_, None) => {}
            (_, Some(_)) => {
                return Err(format!(
                    "rule “{name}”: reason is what a denial tells the model; only decision = \"deny\" has one"
                ))
            }
        }
        for glob in entry
            .tools
            .iter()
            .chain(&entry.namespaces)
            .chain(&entry.principals)
        {
            if glob.trim().is_empty() {
                return Err(format!(
                    "rule “{name}”: an empty tool, namespace or principal pattern"
                ));
            }
        }
        let globs = |written: &[String]| {
            written
                .iter()
                .map(|g| Glob::new(g).map_err(|e| format!("rule “{name}”: {e}")))
                .collect::<Result<Vec<_>, _>>()
        };
        let when = match entry.when.as_deref() {
            Some(source) => {
                Some(Condition::parse(source).map_err(|e| format!("rule “{name}”: {e}"))?)
            }
            None => None,
        };
        let timers = Timers::check(entry, &name)?;
        Ok(Rule {
            timers,
            tools: globs(&entry.tools)?,
            namespaces: globs(&entry.namespaces)?,
            principals: globs(&entry.principals)?,
            when,
            decision: entry.decision,
            reason: reason.map(str::to_owned),
            shadow: entry.shadow,
            approvers: entry.approvers.clone(),
            required: entry.required,
            forbid_self_approval: entry.forbid_self_approval,
            name,
        })
    }

    /// Whether the rule matches `call`: its globs, then its condition (an
    /// error when the condition fails on the call).
    pub fn matches(&self, call: &Call<'_>) -> Result<bool, String> {
        self.matches_with(call, &std::cell::OnceCell::new())
    }

    /// [`Rule::matches`], the call's values made at most once into
    /// `bindings` for every rule that reads them.
    pub(super) fn matches_with(
        &self,
        call: &Call<'_>,
        bindings: &std::cell::OnceCell<Result<Bindings, String>>,
    ) -> Result<bool, String> {
        let any = |globs: &[Glob], name: Option<&str>| {
            globs.is_empty() || name.is_some_and(|n| globs.iter().any(|g| g.matches(n)))
        };
        if !(any(&self.tools, Some(call.tool))
            && any(&self.namespaces, call.namespace)
            && any(&self.principals, call.principal))
        {
            return Ok(false);
        }
        match &self.when {
            Some(condition) => match bindings.get_or_init(|| Bindings::of(call)) {
                Ok(bindings) => condition.holds(bindings),
                Err(problem) => Err(problem.clone()),
            },
            None => Ok(true),
        }
    }

    /// The condition as written, if any.
    pub fn condition(&self) -> Option<&str> {
        self.when.as_ref().map(Condition::source)
    }

    /// Whether it matches every call, so that no rule after it could.
    pub(super) fn matches_everything(&self) -> bool {
        let all = |globs: &[Glob]| globs.is_empty() || globs.iter().any(|g| g.as_str() == "*");
        all(&self.tools)
            && self.namespaces.is_empty()
            && self.principals.is_empty()
            && self.when.is_none()
    }

    /// Who may still approve a call this rule asks people about, besides
    /// `who`: its approvers (or all `deciders`) but those who approved
    /// already and, under `forbid_self_approval`, the `asker`.
    pub(super) fn may_still_approve(
        &self,
        deciders: &[String],
        asker: Option<&str>,
        approved: &[String],
        who: &str,
    ) -> Vec<String> {
        self.approvers
            .as_deref()
            .unwrap_or(deciders)
            .iter()
            .filter(|n| *n != who && !approved.contains(n))
            .filter(|n| !(self.forbid_self_approval && asker == Some(n.as_str())))
            .cloned()
            .collect()
    }
}
