//! Operator actions as recorded on the record they changed.

use std::fmt;

use crate::clock::Timestamp;

/// An operator action, as recorded on the record it changed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditEntry {
    /// When (the store's clock).
    pub at: Timestamp,
    /// Who (as given with `--by`).
    pub by: String,
    /// What.
    pub action: AuditAction,
    /// Why, or the note given with an approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What an operator did to a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditAction {
    /// Approved a call awaiting approval.
    Approved,
    /// Approved a call awaiting approval that needs more approvals than
    /// it then had (a two-person rule): the approval is recorded, the call
    /// still awaits approval and nothing runs until the approval that makes
    /// the count, recorded as [`AuditAction::Approved`].
    ApprovalAdded,
    /// Denied a call awaiting approval.
    Denied,
    /// Denied a call awaiting approval in favour of a new call with the
    /// arguments an approver edited; the event's reason names the new
    /// call's key, the original's record points to it
    /// ([`Record::edited`](super::Record::edited)).
    Edited,
    /// Settled an unknown outcome (or a dead owner's call) as succeeded.
    ResolvedSucceeded,
    /// Settled an unknown outcome (or a dead owner's call) as failed.
    ResolvedFailed,
    /// Released an unknown outcome or a dead owner's call to run again.
    Released,
    /// Deleted a record.
    Deleted,
    /// The executor's approval policy approved a call.
    ApprovedByPolicy,
    /// The executor's approval policy denied a call.
    DeniedByPolicy,
    /// A shadow approval rule matched a call: the event's `by` names the
    /// rule, its reason what the rule would have decided. The rule decided
    /// nothing.
    ShadowRule,
    /// An approval was given longer ago than its rule's `valid_for` when
    /// the call would have run: it did not run it, and the call asks
    /// again (a new request). The event's `by` names the rule.
    ApprovalLapsed,
    /// Nobody decided a call awaiting approval within its rule's
    /// `expires_after`: it is denied. The event's `by` names the rule,
    /// its reason what the model is told.
    Expired,
    /// A person was asked to decide a call awaiting approval (in a chat,
    /// through MCP elicitation) and gave no decision: the call stays
    /// pending, and they are not asked about it again.
    Asked,
    /// Someone signed in to the approval inbox (`idem serve`); the event's
    /// `by` is who, its reason the address it came from. Not about a
    /// record: its key stands for the name (see `idem serve`'s docs).
    SignedIn,
    /// A sign-in to the approval inbox failed (a wrong name or password,
    /// or one refused unchecked under a flood); `by` is the name tried.
    /// Repeats of one name from one address are counted into one event.
    SignInFailed,
    /// Someone signed out of the approval inbox: their session is over on
    /// every `idem serve` of the store.
    SignedOut,
    /// An operator ended every session of an approver
    /// (`idem approver revoke`); `reason` names the approver.
    SessionsRevoked,
    /// An action written by a later idem that this one does not know: the
    /// event still reads (with its time, who, key and reason), so that a
    /// log written by a newer build never fails an older one's reads.
    /// Never written by this build.
    #[serde(other)]
    Other,
}

impl AuditAction {
    /// The action as stored.
    pub const fn as_str(self) -> &'static str {
        match self {
            AuditAction::Approved => "approved",
            AuditAction::ApprovalAdded => "approval_added",
            AuditAction::Denied => "denied",
            AuditAction::Edited => "edited",
            AuditAction::ResolvedSucceeded => "resolved_succeeded",
            AuditAction::ResolvedFailed => "resolved_failed",
            AuditAction::Released => "released",
            AuditAction::Deleted => "deleted",
            AuditAction::ApprovedByPolicy => "approved_by_policy",
            AuditAction::DeniedByPolicy => "denied_by_policy",
            AuditAction::ShadowRule => "shadow_rule",
            AuditAction::ApprovalLapsed => "approval_lapsed",
            AuditAction::Expired => "expired",
            AuditAction::Asked => "asked",
            AuditAction::SignedIn => "signed_in",
            AuditAction::SignInFailed => "sign_in_failed",
            AuditAction::SignedOut => "signed_out",
            AuditAction::SessionsRevoked => "sessions_revoked",
            AuditAction::Other => "other",
        }
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::AuditAction;

    #[test]
    fn an_action_of_a_later_idem_reads_as_other() {
        let read: AuditAction = serde_json::from_str("\"approved_by_a_robot\"").unwrap();
        assert_eq!(read, AuditAction::Other);
        let known: AuditAction = serde_json::from_str("\"sessions_revoked\"").unwrap();
        assert_eq!(known, AuditAction::SessionsRevoked);
    }
}
