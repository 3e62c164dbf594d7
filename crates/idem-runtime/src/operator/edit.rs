//! Edit, then approve: an approver changes the arguments of a call awaiting
//! approval. The edited call is a new call, with a key of its own derived
//! from the original's and a record of its own parked awaiting approval
//! with the edited arguments, which the editor's approval counts towards;
//! the original is denied with a pointer to it ([`EDITED_STEP`]).

use std::time::Duration;

use serde_json::Value;

use super::{Approving, Operator, OperatorError};
use crate::approval::rules::Act;
use crate::approval::transition;
use crate::approval::Approval;
use crate::dispatch::{check_arguments, Arguments, DEFAULT_MAX_ARGUMENT_BYTES};
use crate::key::{CanonicalArgs, IdempotencyKey};
use crate::record::{
    AuditAction, AuditEntry, CallInfoRef, EditedTo, Record, RecordState, Status, ASKER_STEP,
    EDITED_STEP, RULE_STEP,
};
use crate::store::{ClaimOutcome, ClaimRequest, StoreExt};

/// How long the edit holds the new key while it parks it: the claim and
/// the park are two writes, a few milliseconds apart.
const PARK_LEASE: Duration = Duration::from_secs(30);

/// What [`Operator::edit_record`] did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Edited {
    /// The original call, denied, pointing to the edited one
    /// ([`Record::edited`]).
    pub original: Record,
    /// The edited call, with the editor's approval: granted, or recorded
    /// towards the several its rule needs.
    pub edited: Approving,
}

/// The key of the call that `original` becomes when its arguments are
/// edited to those whose fingerprint is `fingerprint`: a sub-key of the
/// original's ([`IdempotencyKey::sub`]), so that the same edit made twice
/// (a retried request, two approvers typing the same change) names the
/// same call, and another edit another one.
pub fn edited_key(original: &IdempotencyKey, fingerprint: &str) -> IdempotencyKey {
    original.sub(&format!("idem:edit:{fingerprint}"))
}

impl Operator {
    /// [`Operator::edit_record`] the record stored under `key` as it now is.
    pub async fn edit(
        &self,
        key: &IdempotencyKey,
        arguments: Arguments,
        approval: Approval,
    ) -> Result<Edited, OperatorError> {
        let record = self.show(key).await?;
        self.edit_record(&record, arguments, approval).await
    }

    /// Edit the arguments of the call awaiting approval `record` (the
    /// version a person was shown, as [`Operator::approve_record`]) to
    /// `arguments`, approved by `approval.approver`: the edited call is a
    /// new call under [`edited_key`], parked awaiting approval with the
    /// edited arguments, and this approval is given to it
    /// ([`Operator::add_approval`]); then the original is denied, with a
    /// reason naming the editor and the new key, and a pointer to it
    /// ([`Record::edited`]): every call with the original's key is denied
    /// with that reason, and the original never runs.
    ///
    /// The arguments pass the checks every call's pass
    /// ([`check_arguments`]: valid JSON, an object, no larger than
    /// [`DEFAULT_MAX_ARGUMENT_BYTES`]) and are canonicalised as every
    /// call's are; refused with [`OperatorError::EditedArguments`] and
    /// nothing changed otherwise, or when they are the original's.
    ///
    /// The approval rules in force decide the edited call on its edited
    /// arguments, and the stricter of its rule and the original's governs
    /// it: refused with [`OperatorError::Rule`] when a rule denies the
    /// edited arguments, or when the editor may not approve the original
    /// or the edited call (their own call under `forbid_self_approval`);
    /// under a two-person rule, the editor's approval is one of the two.
    /// Refused with [`OperatorError::NotEditable`] for a tool that keeps
    /// its arguments out of the store: there is nothing to edit, and the
    /// edited call could not be run from its record.
    pub async fn edit_record(
        &self,
        record: &Record,
        arguments: Arguments,
        approval: Approval,
    ) -> Result<Edited, OperatorError> {
        self.check_pending(record)?;
        let refused = |detail: String| OperatorError::EditedArguments {
            key: record.key.clone(),
            detail,
        };
        let Some(before) = record.info.args.as_deref() else {
            return Err(OperatorError::NotEditable {
                key: record.key.clone(),
                tool: record.tool.clone(),
            });
        };
        let args = check_arguments(&record.tool, arguments, DEFAULT_MAX_ARGUMENT_BYTES)
            .map_err(|e| refused(e.to_string()))?;
        let canonical = CanonicalArgs::from_value(&args).map_err(|e| refused(e.to_string()))?;
        if canonical.text == before {
            return Err(refused(
                "they are the arguments the call already has; approve it instead".into(),
            ));
        }
        let key = edited_key(&record.key, canonical.fingerprint.as_str());
        let candidate = edited_record(record, key.clone(), &canonical);
        // Decided before anything is written: the editor may decide the
        // original, and approve the edited call on its own arguments.
        let original = self
            .rules_allow(record, &approval.approver, Act::Approve)
            .await?;
        let edited = self
            .rules_allow(&candidate, &approval.approver, Act::Approve)
            .await?;
        let rule = match (original, edited) {
            (Some(o), Some(e)) if o.required > e.required => o.rule,
            (_, Some(e)) => e.rule,
            _ => None,
        };
        let parked = self.park_edited(record, candidate, rule).await?;
        let approving = match self.add_approval(&parked, approval.clone(), 1).await {
            Ok(approving) => approving,
            // The same edit made again after it stopped halfway: the new
            // call has this approval already.
            Err(OperatorError::ApprovedBefore {
                given, required, ..
            }) => Approving::Recorded {
                record: parked,
                given,
                required,
            },
            Err(OperatorError::AlreadyApproved { .. }) => Approving::Granted(parked),
            Err(e) => return Err(e),
        };
        let original = self
            .deny_edited(record, &approval, &key, &canonical)
            .await?;
        Ok(Edited {
            original,
            edited: approving,
        })
    }

    /// Write the edited call's record, parked awaiting approval: claimed
    /// under its new key, then parked, as the executor parks a call. An
    /// edited call already parked (the same edit, stopped halfway) is
    /// taken as it is.
    async fn park_edited(
        &self,
        original: &Record,
        candidate: Record,
        rule: Option<String>,
    ) -> Result<Record, OperatorError> {
        let key = candidate.key.clone();
        if let Some(found) = self.store.get(&key).await? {
            return match found.status() {
                Status::AwaitingApproval | Status::Approved => Ok(found),
                status => Err(OperatorError::NotPending { key, status }),
            };
        }
        let info = &candidate.info;
        let request = ClaimRequest {
            key: &key,
            tool: &candidate.tool,
            fingerprint: &candidate.fingerprint,
            check_fingerprint: true,
            lease: PARK_LEASE,
            info: CallInfoRef {
                namespace: info.namespace.as_deref(),
                call_id: None,
                run_id: info.run_id.as_deref(),
                step: info.step,
                args: info.args.as_deref(),
                ttl: info.ttl,
                reason: info.reason.as_ref().map(|r| r.as_str()),
            },
            worker: None,
            durable: true,
        };
        let fence = match self.store.claim(&request).await? {
            ClaimOutcome::Acquired { fence, .. } => fence,
            // Another edit got there first, between the read and the claim.
            _ => return Err(OperatorError::Changed { key }),
        };
        let Some(claimed) = self.store.get(&key).await? else {
            return Err(OperatorError::Changed { key });
        };
        let now = self.store.now().await?;
        let (ttl, message) = match &original.state {
            RecordState::AwaitingApproval {
                expires_at,
                message,
                ..
            } => (now.until(*expires_at), message.clone()),
            _ => return Err(OperatorError::Changed { key }),
        };
        let mut parked = transition::park(claimed, fence, now, ttl, &message);
        let steps = &mut parked.record.steps;
        if let Some(asker) = original.steps.get(ASKER_STEP) {
            steps.insert(ASKER_STEP.to_owned(), asker.clone());
        }
        if let Some(rule) = rule {
            steps.insert(RULE_STEP.to_owned(), Value::String(rule));
        }
        let fence = self
            .store
            .replace(&key, parked.expected, Some(&parked.record), None)
            .await
            .map_err(|e| match e {
                crate::store::StoreError::StaleFence { key, .. } => OperatorError::Changed { key },
                e => OperatorError::Store(e),
            })?;
        Ok(match fence {
            Some(fence) => crate::store::transition::replacement(&key, &parked.record, fence),
            None => parked.record,
        })
    }

    /// Deny the original `record` in favour of the edited call `key`,
    /// pointing to it, fenced like any denial.
    async fn deny_edited(
        &self,
        record: &Record,
        approval: &Approval,
        key: &IdempotencyKey,
        canonical: &CanonicalArgs,
    ) -> Result<Record, OperatorError> {
        let by = &approval.approver;
        let reason = format!(
            "{by} edited the arguments of this call: the call with the edited arguments is key {key}, and this one never runs"
        );
        let at = self.store.now().await?;
        let mut denied = transition::deny(record, &reason, at, self.kept_for(record, None));
        let pointer = EditedTo {
            key: key.clone(),
            by: by.clone(),
            fingerprint: canonical.fingerprint.clone(),
        };
        denied.record.steps.insert(
            EDITED_STEP.to_owned(),
            serde_json::to_value(pointer).expect("a key, a name and a fingerprint serialize"),
        );
        let entry = AuditEntry {
            at,
            by: by.clone(),
            action: AuditAction::Edited,
            reason: Some(reason),
        };
        self.swap(record, denied, entry).await
    }
}

/// The record the edited call would have, before it is written: the
/// original's, under `key`, with the edited arguments and none of the
/// original's decisions.
fn edited_record(original: &Record, key: IdempotencyKey, canonical: &CanonicalArgs) -> Record {
    let mut record = original.clone();
    record.key = key;
    record.fingerprint = canonical.fingerprint.clone();
    record.info.args = Some(canonical.text.clone());
    record.info.call_id = None;
    record.audit.clear();
    record.steps.retain(|name, _| name == ASKER_STEP);
    record
}
