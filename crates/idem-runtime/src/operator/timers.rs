//! The approval rules' `expires_after`, acted on by an operator: a call
//! nobody decided within it is denied by its rule, whoever looks first —
//! a sweeper ([`Operator::expire_due`], run by `idem serve`), a person
//! deciding too late (refused, [`RuleRefusal::Expired`]), or the executor
//! when a call with its key comes back.

use crate::approval::rules::{Expired, RuleRefusal, Rules};
use crate::approval::transition;
use crate::operator::{Filter, Operator, OperatorError};
use crate::record::{AuditAction, AuditEntry, Record};
use crate::store::StoreExt;

impl Operator {
    /// Deny every call awaiting a decision nobody made within its rule's
    /// `expires_after`, by the rules in force on the store: the records
    /// this sweep denied. One another instance decided or denied first is
    /// left to it (the write is fenced).
    pub async fn expire_due(&self) -> Result<Vec<Record>, OperatorError> {
        let Some(rules) = Rules::in_force(self.store.as_ref()).await? else {
            return Ok(Vec::new());
        };
        let now = self.store.now().await?;
        let mut denied = Vec::new();
        for record in self.pending(&Filter::default()).await? {
            let Some(expired) = rules.expired(&record, now) else {
                continue;
            };
            match self.expire(&record, &expired).await {
                Ok(record) => denied.push(record),
                Err(OperatorError::Changed { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(denied)
    }

    /// Deny `record`, which nobody decided in time (`expired`), as its
    /// rule: the audit log says which rule and that it expired, and every
    /// call with its key gets the reason. Fenced: refused with
    /// [`OperatorError::Changed`] when the record changed since it was
    /// read.
    pub async fn expire(
        &self,
        record: &Record,
        expired: &Expired,
    ) -> Result<Record, OperatorError> {
        let at = self.store.now().await?;
        let reason = expired.reason();
        let denied = transition::deny(record, &reason, at, self.kept_for(record, None));
        let entry = AuditEntry {
            at,
            by: format!("rule “{}”", expired.rule),
            action: AuditAction::Expired,
            reason: Some(reason),
        };
        self.swap(record, denied, entry).await
    }

    /// Refuse a person's decision on `record` when nobody decided it
    /// within its rule's `expires_after`: the call is denied as expired
    /// first (if no one did), so that a late decision never runs it.
    pub(super) async fn refuse_if_expired(
        &self,
        record: &Record,
        rules: Option<&Rules>,
    ) -> Result<(), OperatorError> {
        let Some(rules) = rules else {
            return Ok(());
        };
        let now = self.store.now().await?;
        let Some(expired) = rules.expired(record, now) else {
            return Ok(());
        };
        self.expire(record, &expired).await?;
        Err(RuleRefusal::Expired {
            tool: record.tool.clone(),
            reason: expired.reason(),
        }
        .into())
    }
}
