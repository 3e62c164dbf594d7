//! The checks, shared by both drivers (schedules in one process, worker
//! processes killed with SIGKILL): what the providers' ledger and the
//! store must show after a run, whatever faults struck.
//!
//! * **Duplicate effects**: a key whose effect the ledger holds twice.
//! * **Lost results**: an output acknowledged to a caller that is not the
//!   recorded one, or whose effect the ledger does not hold.
//! * **Refused but applied**: a key whose effect the ledger holds while its
//!   record says the call failed — every later caller would be told that
//!   nothing happened.
//!
//! And [`is_definite`]: whether an answer will not change by asking again,
//! which is when both drivers stop calling.

use std::collections::BTreeMap;

use idem_runtime::{IdemError, IdempotencyKey, Outcome, Store};
use serde_json::Value;

use crate::ledger::Entry;
use idem_runtime::store::StoreExt;

/// An output acknowledged to a caller: which call (a label for the
/// report), under which key, and the output.
#[derive(Debug, Clone)]
pub(crate) struct Acked {
    pub(crate) label: String,
    pub(crate) key: IdempotencyKey,
    pub(crate) output: Value,
}

/// The effects the ledger holds per key (requests that applied nothing
/// left out).
pub(crate) fn effects(ledger: &[Entry]) -> BTreeMap<&str, Vec<&Entry>> {
    let mut per_key: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for entry in ledger.iter().filter(|e| e.applied) {
        per_key.entry(entry.key.as_str()).or_default().push(entry);
    }
    per_key
}

/// Keys whose effect the ledger holds more than once, with the effects.
pub(crate) fn duplicate_effects(ledger: &[Entry]) -> Vec<String> {
    effects(ledger)
        .into_iter()
        .filter(|(_, effects)| effects.len() > 1)
        .map(|(key, effects)| {
            let effects: Vec<&str> = effects.iter().map(|e| e.effect.as_str()).collect();
            format!("key {key}: {}", effects.join(", "))
        })
        .collect()
}

/// Acknowledged outputs that `store` does not hold as their key's
/// recorded output, or whose effect `ledger` does not hold.
pub(crate) async fn lost_results(
    store: &dyn Store,
    acked: &[Acked],
    ledger: &[Entry],
) -> Vec<String> {
    let effects = effects(ledger);
    let mut lost = Vec::new();
    for Acked { label, key, output } in acked {
        let recorded = match store.get(key).await {
            Ok(Some(record)) => match record.outcome() {
                Some(Outcome::Success { output }) => output.parse::<Value>().ok(),
                _ => None,
            },
            Ok(None) | Err(_) => None,
        };
        if recorded.as_ref() != Some(output) {
            lost.push(format!(
                "{label}: acknowledged {output}, recorded {}",
                recorded.map_or("nothing".into(), |v| v.to_string())
            ));
        }
        if !effects.contains_key(key.as_str()) {
            lost.push(format!(
                "{label}: acknowledged {output}, but no effect in the ledger"
            ));
        }
    }
    lost
}

/// Keys whose effect `ledger` holds while `store` records the call as
/// failed.
pub(crate) async fn refused_but_applied(store: &dyn Store, ledger: &[Entry]) -> Vec<String> {
    let mut refused = Vec::new();
    for (key, effects) in effects(ledger) {
        let Ok(key) = IdempotencyKey::parse(key) else {
            continue;
        };
        if let Ok(Some(record)) = store.get(&key).await {
            if let Some(Outcome::Failure { failure }) = record.outcome() {
                refused.push(format!(
                    "key {key}: {} applied, but the call is recorded as failed: {failure:?}",
                    effects[0].effect
                ));
            }
        }
    }
    refused
}

/// Whether an answer will not change by asking again: a result, an
/// unknown outcome, a recorded failure or refusal. Another owner in
/// flight, a lost lease, a store out of reach, a failure not recorded: a
/// later call may get another answer.
pub fn is_definite<T>(answer: &Result<T, IdemError>) -> bool {
    match answer {
        Ok(_) => true,
        Err(e) => matches!(
            e,
            IdemError::OutcomeUnknown { .. }
                | IdemError::KeyReused { .. }
                | IdemError::ApprovalDenied { .. }
                | IdemError::Tool {
                    deduplicated: true,
                    ..
                }
        ),
    }
}
