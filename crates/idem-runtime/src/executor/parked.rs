//! A call parked for a person's decision: recorded as awaiting approval,
//! its lease given up (nothing runs until someone decides), its asker
//! and the rule that asked kept on the record. The executor parks a call
//! when its policy or rules say a person must decide, and again when an
//! approval lapsed before the call ran (`valid_for`).

use serde_json::Value;

use crate::approval::transition;
use crate::error::IdemError;
use crate::record::{Record, ASKER_STEP, RULE_STEP};
use crate::store::StoreExt;

use super::env::CallEnv;
use super::errors;
use super::owner::Owner;
use super::rules::asker;

/// Park `record`, which `owner` holds in flight, as awaiting a person's
/// decision asked for now. Who asked is
/// this caller, unless the record says it already (a call asking again
/// is still its first asker's, whoever's process resumed it).
pub(super) async fn park_record(
    env: &CallEnv<'_>,
    owner: &Owner<'_>,
    record: Record,
    message: &str,
    rule: Option<&str>,
) -> Result<(), IdemError> {
    let store = env.store();
    let err = |e| errors::owner(env, owner, e);
    let now = store.now().await.map_err(err)?;
    let ttl = env.core.config.approval_ttl;
    let mut parked = transition::park(record, owner.fence, now, ttl, message);
    let steps = &mut parked.record.steps;
    steps
        .entry(ASKER_STEP.to_owned())
        .or_insert_with(|| Value::String(asker(env, owner)));
    if let Some(rule) = rule {
        steps.insert(RULE_STEP.to_owned(), Value::String(rule.to_owned()));
    }
    store
        .replace(&owner.key, parked.expected, Some(&parked.record), None)
        .await
        .map_err(err)?;
    tracing::info!(
        key = owner.key.as_str(),
        "approval pending; recorded for a person to decide"
    );
    Ok(())
}
