//! Edit, then approve, as the model's retry meets it: a call whose record
//! says an approver edited its arguments
//! ([`Operator::edit_record`](crate::operator::Operator::edit_record))
//! goes on as the edited call — its key, its arguments read back from its
//! record — through the same claim, approval and run as any call, so it
//! runs once, and never the original. Its answer tells the model of the
//! edit ([`CallMeta::edited`](super::CallMeta::edited)).

use serde_json::Value;

use crate::error::IdemError;
use crate::key::CanonicalArgs;
use crate::record::{EditedTo, FailureCode, Outcome, Record};
use crate::store::StoreExt;

use super::answer::Recorded;
use super::env::CallEnv;
use super::errors;
use super::key::CallKey;
use super::output::{CallOutput, Edit};

/// How many edits a call follows, an edit of an edited call included,
/// before it stops: a chain longer than this was not made by people.
pub(super) const MAX_EDITS: usize = 8;

/// Whether a completed call's answer may have to follow an edit: a
/// denial whose record points to the edited call, or a denial known by
/// its outcome alone (a store that answered on the caller's thread),
/// which the usual claim reads whole.
pub(super) fn may_follow(recorded: &Recorded) -> bool {
    match recorded {
        Recorded::Record(record) => record.edited().is_some(),
        Recorded::Outcome(Outcome::Failure { failure }) => {
            failure.code == FailureCode::ApprovalDenied
        }
        Recorded::Outcome(_) => false,
    }
}

/// Where the call whose claim found `recorded` went, when an approver
/// edited it.
pub(super) fn pointer(recorded: &Recorded) -> Option<EditedTo> {
    match recorded {
        Recorded::Record(record) => record.edited(),
        Recorded::Outcome(_) => None,
    }
}

/// The edited call that `to` names, for the call whose key is `from`:
/// its key, its arguments (as the tool takes them) and what the model is
/// told. Refused when the edited call's record is gone, is another
/// tool's, or holds arguments the tool does not take: nothing runs.
pub(super) async fn follow<A: serde::de::DeserializeOwned>(
    env: &CallEnv<'_>,
    from: &CallKey,
    to: &EditedTo,
) -> Result<(CallKey, A, Edit), IdemError> {
    let refused = |detail: String| {
        errors::refuse(
            env,
            IdemError::InvalidArguments {
                tool: env.name().to_owned(),
                detail: format!(
                    "{} edited the arguments of this call into the call with key {}, which cannot run: {detail}; nothing ran",
                    to.by, to.key
                ),
            },
        )
    };
    let record = env
        .store()
        .get(&to.key)
        .await
        .map_err(|e| errors::store(env, e))?
        .ok_or_else(|| refused("its record is gone".into()))?;
    let arguments = arguments_of(env, &record, to).map_err(refused)?;
    let args = serde_json::from_value::<A>(arguments.clone())
        .map_err(|e| refused(format!("the tool does not take them ({e})")))?;
    let canonical = CanonicalArgs::from_value(&arguments).map_err(|e| refused(e.to_string()))?;
    let key = CallKey {
        key: to.key.clone(),
        args: canonical,
        check_fingerprint: true,
        namespace: from.namespace.clone(),
        window: None,
        edited: true,
    };
    let edit = Edit {
        original: from.key.clone(),
        by: to.by.clone(),
        arguments,
    };
    Ok((key, args, edit))
}

/// The edited arguments on the edited call's `record`, checked against
/// the pointer that led to it.
fn arguments_of(env: &CallEnv<'_>, record: &Record, to: &EditedTo) -> Result<Value, String> {
    if record.tool != env.name() {
        return Err(format!("it is a call of `{}`", record.tool));
    }
    if record.fingerprint != to.fingerprint {
        return Err("its arguments are not the edited ones".into());
    }
    let text = record
        .info
        .args
        .as_deref()
        .ok_or("its record keeps no arguments")?;
    serde_json::from_str(text).map_err(|e| format!("its arguments do not read as JSON ({e})"))
}

/// The edited call's answer, telling the model of the edit: an output
/// says so in its [`CallMeta::edited`](super::CallMeta::edited); a call
/// that still waits for a person, or that a person denied, says so in its
/// message. Other errors name the edited call's key already.
pub(super) fn tell<O>(
    result: Result<CallOutput<O>, IdemError>,
    edit: Option<Box<Edit>>,
) -> Result<CallOutput<O>, IdemError> {
    let Some(edit) = edit else {
        return result;
    };
    let said = |rest: &str| {
        format!(
            "{} edited the arguments of this call to {}; the edited call {rest}",
            edit.by,
            crate::text::json_safe(&edit.arguments.to_string()),
        )
    };
    match result {
        Ok(mut called) => {
            called.meta.edited = Some(edit);
            Ok(called)
        }
        Err(IdemError::ApprovalPending { tool, key, message }) => Err(IdemError::ApprovalPending {
            message: said(&format!("awaits approval: {message}")),
            tool,
            key,
        }),
        Err(IdemError::ApprovalDenied {
            tool,
            reason,
            deduplicated,
        }) => Err(IdemError::ApprovalDenied {
            reason: said(&format!("was denied: {reason}")),
            tool,
            deduplicated,
        }),
        Err(e) => Err(e),
    }
}
