//! The approval rules' `expires_after`, swept: every `--refresh`, `idem
//! serve` denies the calls nobody decided in time, as their rule
//! ([`Operator::expire_due`]), so that an expired request leaves the
//! inbox and tells its caller why even if nobody calls again. Every
//! instance on a store sweeps; the denial is a fenced write, so one of
//! them makes it and the others find it made.

use std::time::Duration;

use idem_runtime::operator::Operator;

/// Sweep `operator`'s store every `every`, until aborted.
pub(crate) async fn sweep(operator: Operator, every: Duration) {
    let mut tick = tokio::time::interval(every.max(Duration::from_millis(50)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match operator.expire_due().await {
            Ok(denied) => {
                for record in denied {
                    tracing::info!(key = record.key.as_str(), tool = %record.tool, "denied: nobody decided it within its rule's expires_after");
                }
            }
            Err(e) => tracing::warn!("approval expiry: cannot sweep the store: {e}"),
        }
    }
}
