//! Calls the store scenarios of the `idem` program share
//! (`mod stores_support;`, beside `mod support;`): a charge whose outcome
//! is unknown, and its key as `idem key` derives it from a transcript.
#![allow(dead_code)] // each test file uses its own subset

use idem::prelude::*;

use crate::support;
use crate::support::tools::{charge_card, ns, App, Charge};
use crate::support::unique;

/// The charge of these scenarios.
pub fn ada() -> Charge {
    Charge {
        customer: "ada".into(),
        cents: 4900,
    }
}

/// A charge that is made but whose response never arrives: recorded as
/// unknown. Returns the call id.
pub async fn timed_out_charge(exec: &Executor<App>, app: &App, namespace: &str) -> String {
    let call_id = unique("call");
    app.payments
        .hang_next
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let err = exec
        .call(charge_card, ada())
        .call_id(&call_id)
        .namespace(ns(namespace))
        .await
        .unwrap_err();
    assert!(
        matches!(err, IdemError::OutcomeUnknown { .. }),
        "a timed-out non-idempotent write is unknown, not {err}"
    );
    call_id
}

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
