//! Deciding calls awaiting approval: approve or deny them (through the
//! fenced transitions of `approval::transition`), add one approval of
//! several a call needs, wait for a decision, note that a person was
//! asked.

use std::time::Duration;

use super::{Actor, Operator, OperatorError};
use crate::approval::rules::{Act, Allowed, Rules};
use crate::approval::transition::{self, Undecidable};
use crate::approval::Approval;
use crate::audit::{AuditEvent, AuditQuery};
use crate::key::IdempotencyKey;
use crate::record::{AuditAction, AuditEntry, Record};
use crate::store::StoreExt;
use crate::store::WaitFor;

/// What [`Operator::add_approval`] did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Approving {
    /// This approval made the count: the call is approved, and the next
    /// call with its key and arguments runs it once.
    Granted(Record),
    /// The approval is recorded; the call still awaits approval.
    Recorded {
        /// The record as written.
        record: Record,
        /// How many approvals it has now (this one included).
        given: usize,
        /// How many it needs.
        required: usize,
    },
}

impl Approving {
    /// The record as written.
    pub fn record(&self) -> &Record {
        match self {
            Approving::Granted(record) | Approving::Recorded { record, .. } => record,
        }
    }
}

impl Operator {
    /// Write in the audit log that `actor` asked a person to decide the
    /// call awaiting approval `record` (in a chat, say) and got no
    /// decision. The record does not change; [`Operator::was_asked`] tells
    /// afterwards, so that the person is not asked about it twice.
    pub async fn note_asked(&self, record: &Record, actor: &Actor) -> Result<(), OperatorError> {
        let at = self.store.now().await?;
        let entry = actor.entry(at, AuditAction::Asked);
        let event = AuditEvent {
            seq: None,
            at,
            by: entry.by,
            action: entry.action,
            reason: entry.reason,
            key: record.key.clone(),
            tool: record.tool.clone(),
            namespace: record.info.namespace.clone(),
            fingerprint: record.fingerprint.clone(),
            before: Some(record.status()),
            after: Some(record.status()),
        };
        self.store.append_audit(&event).await?;
        Ok(())
    }

    /// Whether a person was asked about `key` before
    /// ([`Operator::note_asked`]).
    pub async fn was_asked(&self, key: &IdempotencyKey) -> Result<bool, OperatorError> {
        let query = AuditQuery::for_key(key.clone());
        let mut cursor: Option<String> = None;
        loop {
            let page = self.store.audit(&query, cursor.as_deref(), 100).await?;
            if page.events.iter().any(|e| e.action == AuditAction::Asked) {
                return Ok(true);
            }
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(false),
            }
        }
    }

    /// Approve a call awaiting approval: the next call with its key *and
    /// its arguments* runs it once, under `approval`. The approval is bound
    /// to the arguments recorded with the request (those `idem show`
    /// displays), and is kept for the tool's TTL, like an outcome: a
    /// granted approval does not lapse with the request's approval TTL.
    /// Refused for a record that is not awaiting approval, or already
    /// approved, and (fenced) for one that changed since it was read.
    pub async fn approve(
        &self,
        key: &IdempotencyKey,
        approval: Approval,
    ) -> Result<Record, OperatorError> {
        let record = self.show(key).await?;
        self.approve_record(&record, approval).await
    }

    /// [`Operator::approve`] the record as `record` shows it — the version
    /// a person was shown, the arguments they read — and only that: if the
    /// record changed since it was read (another decision, a request that
    /// lapsed and was asked again with other arguments), the approval is
    /// refused with [`OperatorError::Changed`] and nothing changes.
    ///
    /// Checked against the approval rules in force on the store
    /// ([`Rules::in_force`]): refused with [`OperatorError::Rule`] when
    /// they do not let `approval.approver` approve it; when the rule that
    /// applies needs several approvals, this is one of them, and the
    /// record returned still awaits the others ([`Operator::add_approval`]
    /// says how many it has).
    pub async fn approve_record(
        &self,
        record: &Record,
        approval: Approval,
    ) -> Result<Record, OperatorError> {
        self.add_approval(record, approval, 1)
            .await
            .map(|approving| approving.record().clone())
    }

    /// What the approval rules in force say of `who` making `act` on
    /// `record`: refused when they do not let them; `None` when no rules
    /// are in force.
    pub async fn rules_allow(
        &self,
        record: &Record,
        who: &str,
        act: Act,
    ) -> Result<Option<Allowed>, OperatorError> {
        match Rules::in_force(self.store.as_ref()).await? {
            Some(rules) => Ok(Some(rules.allows(record, who, act)?)),
            None => Ok(None),
        }
    }

    /// Add `approval` to those the call awaiting approval `record` has (the
    /// version a person was shown, as [`Operator::approve_record`]), when
    /// it needs `required` approvals from distinct people before it runs
    /// (a two-person rule: 2). Until the count is made, each approval is
    /// recorded on the record ([`Record::approvals`], bound to the
    /// arguments) and in the audit log as [`AuditAction::ApprovalAdded`],
    /// and nothing runs; the approval that makes it approves the call
    /// ([`AuditAction::Approved`]), as [`Operator::approve_record`] does.
    /// An approval given towards a request lapses with the request, never
    /// before it. Refused with [`OperatorError::ApprovedBefore`] when
    /// `approval.approver` approved it already, and as
    /// [`Operator::approve_record`] is.
    ///
    /// Checked against the approval rules in force on the store
    /// ([`Rules::in_force`]): refused with [`OperatorError::Rule`] when
    /// they do not let `approval.approver` approve it, and the call needs
    /// as many approvals as the rule that applies says when that is more
    /// than `required`.
    pub async fn add_approval(
        &self,
        record: &Record,
        approval: Approval,
        required: usize,
    ) -> Result<Approving, OperatorError> {
        let record = record.clone();
        self.check_pending(&record)?;
        let rules = Rules::in_force(self.store.as_ref()).await?;
        self.refuse_if_expired(&record, rules.as_ref()).await?;
        let allowed = match &rules {
            Some(rules) => Some(rules.allows(&record, &approval.approver, Act::Approve)?),
            None => None,
        };
        let required = required.max(allowed.map_or(1, |a| a.required));
        let before = record.approvals();
        if before
            .iter()
            .any(|g| g.approval.approver == approval.approver)
        {
            return Err(OperatorError::ApprovedBefore {
                key: record.key.clone(),
                by: approval.approver,
                given: before.len(),
                required,
            });
        }
        let given = before.len() + 1;
        let at = self.store.now().await?;
        let entry = |action| AuditEntry {
            at,
            by: approval.approver.clone(),
            action,
            reason: approval.note.clone(),
        };
        let added = transition::add(&record, approval.clone(), at);
        if given < required {
            let entry = entry(AuditAction::ApprovalAdded);
            let record = self.swap(&record, added, entry).await?;
            return Ok(Approving::Recorded {
                record,
                given,
                required,
            });
        }
        let entry = entry(AuditAction::Approved);
        let kept_for = self.kept_for(&record, None);
        // A call needing one approval gets it as `approve_record` gives it,
        // with no list of approvals beside it.
        let to = match required {
            0 | 1 if before.is_empty() => transition::approve(&record, approval, at, kept_for),
            _ => transition::Replace {
                expected: added.expected,
                record: transition::approve(&added.record, approval, at, kept_for).record,
            },
        };
        Ok(Approving::Granted(self.swap(&record, to, entry).await?))
    }

    /// Deny a call awaiting approval: it never runs, and every call with its
    /// key gets `reason`.
    pub async fn deny(
        &self,
        key: &IdempotencyKey,
        by: &str,
        reason: &str,
    ) -> Result<Record, OperatorError> {
        let record = self.show(key).await?;
        self.deny_record(&record, by, reason).await
    }

    /// [`Operator::deny`] the record as `record` shows it, and only that
    /// version of it (see [`Operator::approve_record`]). Refused with
    /// [`OperatorError::Rule`] when the approval rules in force do not let
    /// `by` decide it.
    pub async fn deny_record(
        &self,
        record: &Record,
        by: &str,
        reason: &str,
    ) -> Result<Record, OperatorError> {
        let record = record.clone();
        self.check_pending(&record)?;
        let rules = Rules::in_force(self.store.as_ref()).await?;
        self.refuse_if_expired(&record, rules.as_ref()).await?;
        if let Some(rules) = &rules {
            rules.allows(&record, by, Act::Deny)?;
        }
        let at = self.store.now().await?;
        let denied = transition::deny(&record, reason, at, self.kept_for(&record, None));
        let entry = AuditEntry {
            at,
            by: by.to_owned(),
            action: AuditAction::Denied,
            reason: Some(reason.to_owned()),
        };
        self.swap(&record, denied, entry).await
    }

    /// Wait up to `timeout` for a decision on a call awaiting approval: the
    /// record as it then is (approved, denied, or still awaiting), `None`
    /// when it is gone (expired, deleted). Woken by the decision where the
    /// store can be notified of it; see
    /// [`StoreExt::wait`].
    pub async fn wait_for_decision(
        &self,
        key: &IdempotencyKey,
        timeout: Duration,
    ) -> Result<Option<Record>, OperatorError> {
        Ok(self.store.wait(key, WaitFor::Decision, timeout).await?)
    }

    pub(super) fn check_pending(&self, record: &Record) -> Result<(), OperatorError> {
        transition::decidable(record).map_err(|refused| match refused {
            Undecidable::AlreadyApproved { by } => OperatorError::AlreadyApproved {
                key: record.key.clone(),
                by,
            },
            Undecidable::NotPending(status) => OperatorError::NotPending {
                key: record.key.clone(),
                status,
            },
        })
    }
}
