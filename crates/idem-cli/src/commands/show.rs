//! `idem show KEY`: everything one record holds.

use idem_runtime::operator::Operator;

use super::{find, now, Output};
use crate::error::CliError;
use crate::render::describe::describe;
use crate::render::json::RecordJson;

/// `idem show`: the record described (or its JSON).
pub(super) async fn run(operator: &Operator, given: &str, out: &Output) -> Result<(), CliError> {
    let key = find(operator, given).await?;
    let record = operator.show(&key).await?;
    let now = now(operator).await?;
    if out.json {
        out.json(&RecordJson::new(&record, now))
    } else {
        out.text(&describe(&record, now))
    }
}
