//! The rules deciding a call as it is made ([`Rules::decide`]): the first
//! rule that matches and is not a shadow decides; the shadow rules
//! matched before it say what they would have decided.

use super::condition::Call;
use super::rule::Rule;
use super::{either, RuleDecision, Rules};

/// What the rules decided of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// Run it with no person.
    Run,
    /// Refuse it: the model is told `reason`.
    Deny {
        /// The rule's reason.
        reason: String,
    },
    /// Park it until `required` of `approvers` approve it.
    Ask {
        /// Distinct approvals needed.
        required: usize,
        /// Who may approve, in words (`dana or erin`, `an approver`).
        approvers: String,
    },
}

impl Decided {
    /// In words, for the audit log: `run with no person`, `deny: …`,
    /// `ask 2 of dana or erin`.
    pub fn words(&self) -> String {
        match self {
            Decided::Run => "run with no person".to_owned(),
            Decided::Deny { reason } => format!("deny: {reason}"),
            Decided::Ask {
                required,
                approvers,
            } => format!("ask {required} of {approvers}"),
        }
    }
}

/// What the rules say of one call: the rule that decided it (`None`: no
/// rule matched; the executor's policy decides), and what each shadow rule
/// matched before it would have decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// The deciding rule's name and decision.
    pub decided: Option<(String, Decided)>,
    /// The shadow rules that matched, by name, and what each would have
    /// decided.
    pub shadows: Vec<(String, Decided)>,
}

impl Rules {
    /// Decide `call`: the first rule that matches it decides, shadow
    /// rules only saying what they would have. A condition that fails on
    /// the call (an argument missing, a type that does not compare) takes
    /// the stricter reading: a `run` rule does not match, a `deny` or
    /// `ask` rule does; nothing lapses into running.
    pub fn decide(&self, call: &Call<'_>) -> Verdict {
        let mut verdict = Verdict::default();
        let bindings = std::cell::OnceCell::new();
        for rule in &self.rules {
            let matched = match rule.matches_with(call, &bindings) {
                Ok(matched) => matched,
                Err(problem) => {
                    tracing::warn!(rule = %rule.name, %problem, "an approval rule's condition failed on a call; reading it strictly");
                    rule.decision != RuleDecision::Run
                }
            };
            if !matched {
                continue;
            }
            let decided = self.decision_of(rule);
            if rule.shadow {
                verdict.shadows.push((rule.name.clone(), decided));
                continue;
            }
            verdict.decided = Some((rule.name.clone(), decided));
            break;
        }
        verdict
    }

    /// What `rule` decides of a call it matches.
    fn decision_of(&self, rule: &Rule) -> Decided {
        match rule.decision {
            RuleDecision::Run => Decided::Run,
            RuleDecision::Deny => Decided::Deny {
                reason: rule.reason.clone().unwrap_or_default(),
            },
            RuleDecision::Ask => Decided::Ask {
                required: rule.required,
                approvers: match &rule.approvers {
                    Some(listed) => either(listed, "or"),
                    None => "an approver".to_owned(),
                },
            },
        }
    }
}
