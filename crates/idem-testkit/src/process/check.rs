//! The checks of a run of killed workers: the shared ones
//! ([`oracle`](crate::oracle)), and those only the kills' phases can make
//! (what a killed owner left, against what the final round answered).

use std::collections::{BTreeMap, BTreeSet};

use idem_runtime::executor::ATTEMPT_STEP;
use idem_runtime::record::{Outcome, Record, RecordState};
use idem_runtime::Store;

use super::{calls, is_delete, key_of, Counts};
use crate::ledger::{Entry, Provider};
use crate::oracle::{self, Acked};
use idem_runtime::store::StoreExt;

/// What the store held for a `delete_account` call after the kill rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Before {
    /// Nobody had claimed the key.
    NeverClaimed,
    /// A killed owner had claimed it but not marked the attempt started.
    ClaimedNotStarted,
    /// A killed owner had marked the attempt started, with no outcome.
    StartedNoOutcome,
    /// A takeover had already recorded the outcome as unknown.
    RecordedUnknown,
    /// It had succeeded.
    Succeeded,
}

pub(super) fn before_final(record: Option<&Record>) -> Before {
    let Some(record) = record else {
        return Before::NeverClaimed;
    };
    match &record.state {
        RecordState::InFlight { .. } if record.steps.contains_key(ATTEMPT_STEP) => {
            Before::StartedNoOutcome
        }
        RecordState::InFlight { .. } => Before::ClaimedNotStarted,
        RecordState::Completed {
            outcome: Outcome::Unknown { .. },
            ..
        } => Before::RecordedUnknown,
        RecordState::Completed {
            outcome: Outcome::Success { .. },
            ..
        } => Before::Succeeded,
        RecordState::Completed { outcome, .. } => {
            panic!("{}: a failure nobody caused: {outcome:?}", record.key)
        }
        RecordState::AwaitingApproval { .. } => {
            panic!("{}: the policy approves every call at once", record.key)
        }
    }
}

/// The account service's deletions per call (every request is one).
pub(super) fn deletions_per_call(ledger: &[Entry]) -> BTreeMap<String, usize> {
    let mut deletions = BTreeMap::new();
    for entry in ledger.iter().filter(|e| e.provider == Provider::Accounts) {
        *deletions.entry(entry.subject.clone()).or_default() += 1;
    }
    deletions
}

/// Everything the checks compare.
pub(super) struct Evidence<'a> {
    /// The final round's answer per call.
    pub(super) answers: &'a BTreeMap<String, String>,
    /// Every output acknowledged in any round.
    pub(super) acked: &'a [Acked],
    /// Each `delete_account` record after the kill rounds.
    pub(super) before: &'a BTreeMap<String, Before>,
    /// Deletions per call after the kill rounds.
    pub(super) deleted_before: &'a BTreeMap<String, usize>,
    /// The providers' ledger.
    pub(super) ledger: &'a [Entry],
    /// `delete_account` calls taken over from an owner that had started them.
    pub(super) started_takeovers: &'a BTreeSet<String>,
}

/// The promises of the classes, against the ledger:
///
/// * The shared checks: no key's effect applied twice, every output
///   acknowledged in any round is the recorded one with its effect in the
///   ledger, no key whose effect applied is recorded as failed.
/// * `charge` (idempotent write): every call ends `ok`, and the provider
///   applied it exactly once, under its own key — re-runs after takeovers
///   carried the same key, which the provider honoured.
/// * `delete_account` (irreversible): at most one deletion per call, ever;
///   a call whose owner had started the tool and vanished without an
///   outcome is answered `outcome_unknown` and never re-run; a call no
///   owner had started, and that no deletion shows, ends deleted exactly
///   once; a call taken over from an owner that had started it ends
///   `outcome_unknown` (had it run again, a deletion that the killed owner
///   never made could pass for its own); and no deletion happened without
///   the attempt being marked started first.
pub(super) async fn check(counts: &mut Counts, store: &dyn Store, ev: &Evidence<'_>) {
    let mut failures = oracle::duplicate_effects(ev.ledger);
    failures.extend(oracle::lost_results(store, ev.acked, ev.ledger).await);
    failures.extend(oracle::refused_but_applied(store, ev.ledger).await);
    let of = |provider: Provider, call: &str| {
        ev.ledger
            .iter()
            .filter(move |e| e.provider == provider && e.subject == call)
            .collect::<Vec<_>>()
    };
    for call in &calls() {
        let answer = ev.answers.get(call).map(String::as_str);
        if !is_delete(call) {
            let requests = of(Provider::Payments, call);
            counts.charge_requests += requests.len();
            let keys: BTreeSet<&str> = requests
                .iter()
                .filter(|e| e.applied)
                .map(|e| e.key.as_str())
                .collect();
            counts.charges += keys.len();
            if answer != Some("ok") {
                failures.push(format!("{call}: final answer {answer:?}, not ok"));
            }
            if keys.len() != 1 {
                failures.push(format!(
                    "{call}: applied under {} keys: {keys:?}",
                    keys.len()
                ));
            }
            if requests.iter().any(|e| e.key != key_of(call).as_str()) {
                failures.push(format!("{call}: sent under a key not its own: {keys:?}"));
            }
            continue;
        }
        let deleted = of(Provider::Accounts, call).len();
        let deleted_before = ev.deleted_before.get(call).copied().unwrap_or(0);
        counts.deletions += deleted;
        if deleted > 1 {
            failures.push(format!("{call}: deleted {deleted} times"));
        }
        let before = ev.before[call];
        if deleted_before > 0 && before < Before::StartedNoOutcome {
            failures.push(format!(
                "{call}: deleted, but its record ({before:?}) shows no started attempt"
            ));
        }
        match before {
            Before::NeverClaimed | Before::ClaimedNotStarted => {
                if before == Before::NeverClaimed {
                    counts.never_claimed += 1;
                } else {
                    counts.not_started_before_final += 1;
                }
                if answer != Some("ok") || deleted != 1 {
                    failures.push(format!(
                        "{call}: never started ({before:?}), then answered {answer:?} with {deleted} deletions; \
                         it should have run exactly once"
                    ));
                }
            }
            Before::StartedNoOutcome | Before::RecordedUnknown => {
                if answer != Some("outcome_unknown") {
                    failures.push(format!(
                        "{call}: started by a killed owner ({before:?}), answered {answer:?}, not outcome_unknown"
                    ));
                }
                if deleted != deleted_before {
                    failures.push(format!(
                        "{call}: re-run after its outcome became unknown ({deleted_before} → {deleted} deletions)"
                    ));
                }
            }
            Before::Succeeded => {
                if answer != Some("ok") || deleted != 1 {
                    failures.push(format!(
                        "{call}: succeeded, then answered {answer:?} with {deleted} deletions"
                    ));
                }
            }
        }
        if ev.started_takeovers.contains(call) && answer != Some("outcome_unknown") {
            failures.push(format!(
                "{call}: taken over from an owner that had started it, then answered {answer:?}"
            ));
        }
        if answer == Some("outcome_unknown") {
            counts.unknown_surfaced += 1;
            counts.unknown_with_effect += usize::from(deleted > 0);
            let record = store.get(&key_of(call)).await.expect("read a record");
            let marked = record.is_some_and(|r| r.steps.contains_key(ATTEMPT_STEP));
            if !marked {
                failures.push(format!(
                    "{call}: outcome_unknown, but its record never marked an attempt started"
                ));
            }
        }
    }
    failures.dedup();
    assert!(
        failures.is_empty(),
        "{} broken promise(s):\n{}\n{counts:?}",
        failures.len(),
        failures.join("\n")
    );
}
