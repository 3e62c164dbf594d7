//! `idem purge --expired`: delete what already reads as absent.

use idem_runtime::operator::Operator;

use super::Output;
use crate::error::CliError;
use crate::render::json::DeletedJson;

/// `idem purge --expired`: delete expired records, saying how many.
pub(super) async fn run(operator: &Operator, out: &Output) -> Result<(), CliError> {
    let deleted = operator.purge_expired().await?;
    if out.json {
        return out.json(&DeletedJson { key: None, deleted });
    }
    let s = if deleted == 1 { "" } else { "s" };
    out.text(&format!("purged {deleted} expired record{s}\n"))
}
