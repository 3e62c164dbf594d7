//! Approval rules: the approvers file's `[[rule]]` tables, saying per tool
//! and per namespace who may decide a call awaiting approval, how many
//! distinct approvals it needs before it runs, and whether whoever asked
//! for it may approve it. The inbox's pages, its JSON API and
//! `idem approve --approvers` all check decisions against them.
//!
//! ```toml
//! [[rule]]
//! name = "payments"               # named in refusals; default "rule N"
//! tools = ["charge_*", "refund"]  # globs; default every tool
//! namespaces = ["mcp/billing/*"]  # globs; default every namespace, and none
//! approvers = ["dana", "erin"]    # who may approve or deny; default every approver
//! required = 2                    # distinct approvals before it runs; default 1
//! forbid_self_approval = true     # whoever asked may not approve; default false
//! ```
//!
//! The *first* rule in the file that matches a record applies, as in a
//! firewall: the file reads top-down, a refusal names the one rule that
//! refused, and a specific rule goes above a general one. ("The strictest
//! rule" is not defined when two rules differ in who may decide.) A rule
//! that matches every call must therefore be the last. A record that no
//! rule matches needs one approval, from any approver, as without rules.

use idem_net::glob::Glob;
use serde::Deserialize;

use idem_runtime::record::Record;

/// One `[[rule]]` table, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleEntry {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    approvers: Option<Vec<String>>,
    #[serde(default = "one")]
    required: usize,
    #[serde(default)]
    forbid_self_approval: bool,
}

fn one() -> usize {
    1
}

/// One rule, checked.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    /// Its name, or `rule N` (its place in the file, from 1).
    pub name: String,
    tools: Vec<Glob>,
    namespaces: Vec<Glob>,
    /// Who may decide; `None`: every approver.
    approvers: Option<Vec<String>>,
    /// Distinct approvals needed before the call runs.
    pub required: usize,
    forbid_self_approval: bool,
}

/// The rules, in the file's order.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    rules: Vec<Rule>,
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
pub enum RuleRefusal {
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
    /// Check the file's rules; `approvers` are the names with the role
    /// approver.
    pub(super) fn check(entries: Vec<RuleEntry>, approvers: &[String]) -> Result<Rules, String> {
        let mut rules = Vec::new();
        let count = entries.len();
        for (i, entry) in entries.into_iter().enumerate() {
            let name = match entry.name.as_deref().map(str::trim) {
                Some(name)
                    if name.is_empty() || name.chars().any(idem_runtime::text::needs_escape) =>
                {
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
            if entry.required > eligible {
                return Err(format!("rule “{name}”: required = {} but only {eligible} may approve, so nothing it matches could ever run", entry.required));
            }
            for glob in entry.tools.iter().chain(&entry.namespaces) {
                if glob.trim().is_empty() {
                    return Err(format!("rule “{name}”: an empty tool or namespace pattern"));
                }
            }
            let globs = |written: &[String]| {
                written
                    .iter()
                    .map(|g| Glob::new(g).map_err(|e| format!("rule “{name}”: {e}")))
                    .collect::<Result<Vec<_>, _>>()
            };
            let (tools, namespaces) = (globs(&entry.tools)?, globs(&entry.namespaces)?);
            let rule = Rule {
                name,
                tools,
                namespaces,
                approvers: entry.approvers,
                required: entry.required,
                forbid_self_approval: entry.forbid_self_approval,
            };
            if rule.matches_everything() && i + 1 < count {
                return Err(format!("rule “{}” matches every call, so the rules after it would never apply: move it last", rule.name));
            }
            rules.push(rule);
        }
        Ok(Rules {
            rules,
            deciders: approvers.to_vec(),
        })
    }

    /// The rule that applies to `record`: the first that matches it.
    pub(crate) fn for_record(&self, record: &Record) -> Option<&Rule> {
        self.rules
            .iter()
            .find(|r| r.matches(&record.tool, record.info.namespace.as_deref()))
    }

    /// Whether `who` (an approver) may make `act` on `record`, and if so,
    /// how many approvals it needs.
    pub fn allows(&self, record: &Record, who: &str, act: Act) -> Result<Allowed, RuleRefusal> {
        let Some(rule) = self.for_record(record) else {
            return Ok(Allowed {
                rule: None,
                required: 1,
                others: "another approver".to_owned(),
            });
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
        if act == Act::Approve && rule.forbid_self_approval && asker(namespace) == Some(who) {
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
        let left: Vec<String> = rule
            .approvers
            .as_ref()
            .unwrap_or(&self.deciders)
            .iter()
            .filter(|n| *n != who && !approved.contains(n))
            .filter(|n| !(rule.forbid_self_approval && asker(namespace) == Some(n)))
            .cloned()
            .collect();
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

impl Rule {
    fn matches(&self, tool: &str, namespace: Option<&str>) -> bool {
        let tool_ok = self.tools.is_empty() || self.tools.iter().any(|g| g.matches(tool));
        let namespace_ok = self.namespaces.is_empty()
            || namespace.is_some_and(|ns| self.namespaces.iter().any(|g| g.matches(ns)));
        tool_ok && namespace_ok
    }

    fn matches_everything(&self) -> bool {
        let all = |globs: &[Glob]| globs.is_empty() || globs.iter().any(|g| g.as_str() == "*");
        all(&self.tools) && self.namespaces.is_empty()
    }
}

/// Who asked for a call in `namespace`, as `forbid_self_approval` compares
/// with an approver's name: the namespace's last `/`-separated part —
/// `alice` for `mcp/SERVER/alice`, where the proxy keeps the calls of its
/// authenticated principal `alice`; `dana` for a program's namespace
/// `dana` or `team/dana`. Nobody for the proxy's own `mcp/SERVER` (a proxy
/// without principals, whose caller has no name) nor for a record without
/// a namespace.
pub(crate) fn asker(namespace: Option<&str>) -> Option<&str> {
    let namespace = namespace?;
    let parts: Vec<&str> = namespace.split('/').collect();
    match parts.as_slice() {
        ["mcp", _] => None,
        [.., last] if !last.is_empty() => Some(last),
        _ => None,
    }
}

/// `a`, `a and b`, `a, b and c` (with `word` for the last joint); `nobody
/// else` for none.
fn either(names: &[String], word: &str) -> String {
    match names {
        [] => "nobody else".to_owned(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} {word} {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_asker_is_the_namespace_s_last_part() {
        assert_eq!(asker(Some("mcp/payments/alice")), Some("alice"));
        assert_eq!(asker(Some("mcp/payments")), None);
        assert_eq!(asker(Some("dana")), Some("dana"));
        assert_eq!(asker(Some("team/dana")), Some("dana"));
        assert_eq!(asker(None), None);
    }

    fn entry(toml_text: &str) -> Vec<RuleEntry> {
        #[derive(Deserialize)]
        struct F {
            rule: Vec<RuleEntry>,
        }
        toml::from_str::<F>(toml_text).unwrap().rule
    }

    #[test]
    fn rules_that_could_never_work_are_refused() {
        let approvers = ["dana".to_owned(), "erin".to_owned()];
        let refused = |text: &str| Rules::check(entry(text), &approvers).unwrap_err();
        assert!(refused("[[rule]]\nrequired = 3\n").contains("only 2 may approve"));
        assert!(refused("[[rule]]\nrequired = 0\n").contains("at least 1"));
        assert!(refused("[[rule]]\napprovers = [\"vic\"]\n").contains("\"vic\" is not an"));
        assert!(refused("[[rule]]\napprovers = []\n").contains("lets nobody decide"));
        assert!(refused("[[rule]]\n[[rule]]\ntools = [\"x\"]\n").contains("move it last"));
        let ok = Rules::check(
            entry("[[rule]]\ntools = [\"charge_*\"]\nrequired = 2\n[[rule]]\n"),
            &approvers,
        )
        .unwrap();
        assert_eq!(ok.rules[0].name, "rule 1");
        assert!(ok.rules[0].matches("charge_card", None));
        assert!(!ok.rules[0].matches("refund", None));
        assert!(ok.rules[1].matches("refund", Some("x")));
    }
}
