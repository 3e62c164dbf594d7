//! `idem resolve` and `idem delete`: settling what idem refused to guess
//! (an unknown outcome, a call whose owner vanished), or removing a record.

use idem_runtime::operator::{Actor, Operator, Resolution};

use super::{find, print, refused, required, what, Output};
use crate::cli::{DeleteArgs, ResolveArgs};
use crate::error::CliError;
use crate::render::json::DeletedJson;
use crate::render::short_key;
use idem_runtime::text::visible;

/// `idem resolve`: settle the call as succeeded or failed, or release it.
pub(super) async fn resolve(
    operator: &Operator,
    args: &ResolveArgs,
    out: &Output,
) -> Result<(), CliError> {
    let resolution = resolution(args)?;
    let actor =
        Actor::new(required("--by", &args.by)?).because(required("--reason", &args.reason)?);
    let key = find(operator, &args.key).await?;
    // For the message: the record goes away on release.
    let before = operator.show(&key).await?;
    let short = short_key(key.as_str());
    let settled = match args.ttl {
        Some(ttl) => {
            operator
                .resolve_kept_for(&key, resolution, &actor, ttl)
                .await
        }
        None => operator.resolve(&key, resolution, &actor).await,
    };
    let resolved = match settled {
        Ok(resolved) => resolved,
        Err(e) => return Err(refused(operator, e).await),
    };
    match resolved {
        Some(record) => {
            let status = record.status();
            let kept = match record.expires_at() {
                Some(until) => format!(" until {}", until.rfc3339()),
                None => String::new(),
            };
            let line = format!(
                "resolved {short} ({}) as {status} by {}: every call with its key gets this outcome{kept}; nothing runs\n",
                what(&record),
                visible(&actor.by)
            );
            print(operator, &record, &line, out).await
        }
        None => released(&key, &format!(
            "released {short} ({}) by {}: the record is deleted, and the next call with its key runs the tool\n",
            what(&before),
            visible(&actor.by)
        ), out),
    }
}

/// `idem delete`: delete the record unless a live lease holds it.
pub(super) async fn delete(
    operator: &Operator,
    args: &DeleteArgs,
    out: &Output,
) -> Result<(), CliError> {
    let actor =
        Actor::new(required("--by", &args.by)?).because(required("--reason", &args.reason)?);
    let key = find(operator, &args.key).await?;
    let before = operator.show(&key).await?;
    if let Err(e) = operator.delete(&key, &actor).await {
        return Err(refused(operator, e).await);
    }
    released(
        &key,
        &format!(
            "deleted {} ({}, was {}) by {}: the next call with its key runs as new\n",
            short_key(key.as_str()),
            what(&before),
            before.status(),
            visible(&actor.by)
        ),
        out,
    )
}

/// What `--succeeded`, `--failed` or `--release` asks for; malformed JSON
/// is refused here, before the store is touched.
fn resolution(args: &ResolveArgs) -> Result<Resolution, CliError> {
    if let Some(json) = &args.succeeded {
        let output = serde_json::from_str(json).map_err(|source| CliError::OutputNotJson {
            given: json.clone(),
            source,
        })?;
        return Ok(Resolution::Succeeded(output));
    }
    if let Some(message) = &args.failed {
        return Ok(Resolution::Failed(required("--failed", message)?));
    }
    Ok(Resolution::Release)
}

fn released(
    key: &idem_runtime::key::IdempotencyKey,
    line: &str,
    out: &Output,
) -> Result<(), CliError> {
    if out.json {
        out.json(&DeletedJson {
            key: Some(key.as_str().to_owned()),
            deleted: 1,
        })
    } else {
        out.text(line)
    }
}
