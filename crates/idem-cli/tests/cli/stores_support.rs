//! Calls the store scenarios of the `idem` program share
//! (`mod stores_support;`, beside `mod support;`): the key of a charge
//! whose outcome is unknown as `idem key` derives it from a transcript,
//! and its resolution from the command line.
#![allow(dead_code)] // each test file uses its own subset

use idem::prelude::*;

use crate::support;
use crate::support::tools::{timed_out_charge, App};
use crate::support::{Idem, Run};

/// The key of `tool`'s call `call_id` in `namespace`, as `idem key` derives
/// it from a transcript.
pub async fn key_from_transcript(tool: &str, call_id: &str, namespace: &str) -> String {
    let out = support::run(
        &[
            "key",
            "--tool",
            tool,
            "--call-id",
            call_id,
            "--namespace",
            namespace,
        ],
        &[],
    )
    .await;
    out.ok().trim().to_owned()
}

/// [`timed_out_charge`] and its key from the transcript: the call id and
/// the key of a charge whose outcome is unknown.
pub async fn unknown_charge(exec: &Executor<App>, app: &App, namespace: &str) -> (String, String) {
    let call_id = timed_out_charge(exec, app, namespace).await;
    let key = key_from_transcript("charge_card", &call_id, namespace).await;
    (call_id, key)
}

/// `idem resolve KEY SETTLEMENT… --by ada --reason REASON`: the settlement
/// is `--release`, `--failed MESSAGE` or `--succeeded OUTPUT`, and any
/// options after it.
pub async fn resolve_by_ada(idem: &Idem, key: &str, settlement: &[&str], reason: &str) -> Run {
    let mut args = vec!["resolve", key];
    args.extend_from_slice(settlement);
    args.extend(["--by", "ada", "--reason", reason]);
    idem.run(&args).await
}
