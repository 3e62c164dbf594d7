//! What approvers are told about: a call began to wait for approval
//! (*pending*), has waited longer than `--overdue` (*overdue*) or than
//! its rule's `escalate_after` (*escalated*, to its `escalate_to`), or
//! somebody decided on it (*decided*).
//!
//! Pending and overdue events are read from the records awaiting
//! approval; decided events from the store's audit log, where every
//! approval and denial is recorded. Each event has an id that depends
//! only on what happened (the record's key and when it began to wait, or
//! the audit event's place in the log), so every instance of `idem serve`
//! on a store, and the same one after a restart, names an event alike:
//! the outbox keys its deliveries by it and receivers dedup on it.

use std::time::Duration;

use idem_runtime::audit::{AuditEvent, AuditQuery};
use idem_runtime::clock::Timestamp;
use idem_runtime::operator::{Filter, Operator};
use idem_runtime::record::{AuditAction, Record, RecordState};
use idem_runtime::store::StoreExt;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::progress::Progress;
use idem_runtime::approval::rules::Rules;

/// The kinds of event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// A call began to wait for approval.
    Pending,
    /// A call has waited for approval longer than `--overdue`.
    Overdue,
    /// A call has waited for approval, undecided, longer than its rule's
    /// `escalate_after`: told to the rule's `escalate_to`.
    Escalated,
    /// Somebody approved or denied a call (or added one of the approvals a
    /// rule needs).
    Decided,
}

impl Kind {
    /// As sent (`Idem-Event`, the body's `event`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Pending => "pending",
            Kind::Overdue => "overdue",
            Kind::Escalated => "escalated",
            Kind::Decided => "decided",
        }
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    /// Its id (`evt_` and 32 hex digits), the same on every instance.
    pub id: String,
    /// What happened.
    pub kind: Kind,
    /// The record's key.
    pub key: String,
    /// Its tool, as recorded.
    pub tool: String,
    /// Its namespace, if its call recorded one.
    pub namespace: Option<String>,
    /// `awaiting_approval`, or the decision (`approved`, `denied`,
    /// `approval_added`).
    pub state: &'static str,
    /// Who decided (decided events).
    pub by: Option<String>,
    /// The note or reason given with the decision.
    pub reason: Option<String>,
    /// When the call began to wait (pending, overdue) or was decided.
    pub at: Timestamp,
    /// The call's arguments as recorded (JSON text), if the tool keeps
    /// them.
    pub args: Option<String>,
    /// Who asked (pending, overdue): the call id, or the run and step.
    pub asked: Asked,
    /// Why the call was made, in the caller's words, when it said
    /// (pending, overdue).
    pub why: Option<String>,
    /// Approvals it has and needs, and who may still decide (`None`: the
    /// record could not be read).
    pub progress: Option<Progress>,
    /// The fingerprint of the arguments, while the call still waits for a
    /// decision (what Slack's Approve and Deny buttons are bound to).
    pub fingerprint: Option<String>,
    /// Escalated: who the rule names to tell (approvers and endpoints).
    pub escalate_to: Vec<String>,
}

/// What a call recorded of where it came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Asked {
    /// The provider's call id.
    pub call_id: Option<String>,
    /// The agent run.
    pub run_id: Option<String>,
    /// The step within the run.
    pub step: Option<u64>,
}

/// The id of the event made of `parts`.
fn id(parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    hash.update(b"idem-event/v1");
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    format!("evt_{}", &hex::encode(hash.finalize())[..32])
}

/// The pending event of `record` and, once it waited longer than
/// `overdue` at `now`, its overdue event; nothing for a record that does
/// not await approval (an approved one included).
pub(crate) fn waiting(
    record: &Record,
    now: Timestamp,
    overdue: Duration,
    rules: Option<&Rules>,
) -> Vec<Event> {
    let RecordState::AwaitingApproval { requested_at, .. } = &record.state else {
        return Vec::new();
    };
    if record.status() != idem_runtime::record::Status::AwaitingApproval {
        return Vec::new();
    }
    let since = requested_at.as_millis().to_string();
    let event = |kind: Kind| Event {
        id: id(&[kind.as_str(), record.key.as_str(), &since]),
        kind,
        key: record.key.as_str().to_owned(),
        tool: record.tool.clone(),
        namespace: record.info.namespace.clone(),
        state: "awaiting_approval",
        by: None,
        reason: None,
        at: *requested_at,
        args: record.info.args.clone(),
        asked: Asked {
            call_id: record.info.call_id.clone(),
            run_id: record.info.run_id.clone(),
            step: record.info.step,
        },
        why: record.info.reason.as_ref().map(|r| r.as_str().to_owned()),
        progress: Some(Progress::of(record, rules)),
        fingerprint: Some(record.fingerprint.as_str().to_owned()),
        escalate_to: Vec::new(),
    };
    let mut events = vec![event(Kind::Pending)];
    if requested_at.until(now) > overdue {
        events.push(event(Kind::Overdue));
    }
    // Its id is the request's (the key, when it began to wait): every
    // instance names it alike, so the outbox delivers it once per
    // endpoint however many instances see it due.
    if let Some(due) = rules.and_then(|r| r.escalation(record, now)) {
        events.push(Event {
            reason: Some(idem_runtime::text::timers::escalated(
                &due.rule, due.after, &due.to,
            )),
            escalate_to: due.to,
            ..event(Kind::Escalated)
        });
    }
    events
}

/// The decided event an audit event is, if it is a person's decision.
pub(crate) fn decided(audit: &AuditEvent) -> Option<Event> {
    let state = match audit.action {
        AuditAction::Approved => "approved",
        AuditAction::ApprovalAdded => "approval_added",
        AuditAction::Denied => "denied",
        _ => return None,
    };
    let at = audit.at.as_millis().to_string();
    let seq = audit.seq.unwrap_or_default().to_string();
    Some(Event {
        id: id(&[Kind::Decided.as_str(), audit.key.as_str(), &at, &seq]),
        kind: Kind::Decided,
        key: audit.key.as_str().to_owned(),
        tool: audit.tool.clone(),
        namespace: audit.namespace.clone(),
        state,
        by: Some(audit.by.clone()),
        reason: audit.reason.clone(),
        at: audit.at,
        args: None,
        asked: Asked::default(),
        why: None,
        progress: None,
        fingerprint: None,
        escalate_to: Vec::new(),
    })
}

/// The message a decision made in Slack leaves in place of the one
/// clicked: `record` as the decision `state` by `by` left it (`None`:
/// gone), with its arguments, and, while it still waits for more
/// approvals, the buttons' binding.
pub(crate) fn decided_now(
    record: &Record,
    state: &'static str,
    by: &str,
    reason: Option<String>,
    at: Timestamp,
    rules: Option<&Rules>,
) -> Event {
    let waiting = record.status() == idem_runtime::record::Status::AwaitingApproval;
    Event {
        id: String::new(),
        kind: Kind::Decided,
        key: record.key.as_str().to_owned(),
        tool: record.tool.clone(),
        namespace: record.info.namespace.clone(),
        state,
        by: Some(by.to_owned()),
        reason,
        at,
        args: record.info.args.clone(),
        asked: Asked::default(),
        why: record.info.reason.as_ref().map(|r| r.as_str().to_owned()),
        progress: Some(Progress::of(record, rules)),
        fingerprint: waiting.then(|| record.fingerprint.as_str().to_owned()),
        escalate_to: Vec::new(),
    }
}

/// How many records or audit events one read asks for.
const PAGE: usize = 500;

/// What waits for approval now: the pending and overdue events.
pub(crate) async fn read_waiting(
    operator: &Operator,
    overdue: Duration,
) -> Result<Vec<Event>, String> {
    let now = operator.store().now().await.map_err(|e| e.to_string())?;
    let rules = Rules::in_force(operator.store().as_ref())
        .await
        .map_err(|e| e.to_string())?;
    let pending = operator
        .pending(&Filter::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(pending
        .iter()
        .flat_map(|r| waiting(r, now, overdue, rules.as_ref()))
        .collect())
}

/// The decided events of the audit log at or after `since`, oldest
/// first.
pub(crate) async fn read_decided(
    operator: &Operator,
    since: Timestamp,
) -> Result<Vec<Event>, String> {
    let query = AuditQuery {
        since: Some(since),
        ..AuditQuery::default()
    };
    let store = operator.store();
    let mut events = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .audit(&query, cursor.as_deref(), PAGE)
            .await
            .map_err(|e| e.to_string())?;
        events.extend(page.events.iter().filter_map(decided));
        match page.cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    // Where each call decided on stands now: "1 of 2", who may still.
    let rules = Rules::in_force(store.as_ref())
        .await
        .map_err(|e| e.to_string())?;
    for event in &mut events {
        let Ok(key) = idem_runtime::key::IdempotencyKey::parse(&event.key) else {
            continue;
        };
        if let Ok(Some(record)) = store.get(&key).await {
            let mut progress = Progress::of(&record, rules.as_ref());
            // As of this decision: its approver's place among them.
            let place = event
                .by
                .as_ref()
                .and_then(|by| progress.by.iter().position(|n| n == by));
            if let Some(place) = place {
                progress.by.truncate(place + 1);
                progress.given = place + 1;
            }
            event.progress = Some(progress);
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use idem_runtime::key::{Fingerprint, IdempotencyKey};
    use idem_runtime::record::Status;

    fn audit(action: AuditAction, seq: u64) -> AuditEvent {
        AuditEvent {
            seq: Some(seq),
            at: Timestamp(1_700_000_000_000),
            by: "dana".into(),
            action,
            reason: None,
            key: IdempotencyKey::parse(&"ab".repeat(32)).unwrap(),
            tool: "delete_account".into(),
            namespace: Some("tenant".into()),
            fingerprint: Fingerprint::new("f00d"),
            before: Some(Status::AwaitingApproval),
            after: Some(Status::Approved),
        }
    }

    #[test]
    fn a_decision_s_id_depends_on_its_place_in_the_log_only() {
        let a = decided(&audit(AuditAction::Approved, 7)).unwrap();
        assert_eq!(a, decided(&audit(AuditAction::Approved, 7)).unwrap());
        assert_ne!(a.id, decided(&audit(AuditAction::Approved, 8)).unwrap().id);
        assert!(a.id.starts_with("evt_") && a.id.len() == 36, "{}", a.id);
        assert_eq!(a.state, "approved");
        assert!(decided(&audit(AuditAction::Deleted, 9)).is_none());
        assert!(decided(&audit(AuditAction::ApprovedByPolicy, 9)).is_none());
    }
}
