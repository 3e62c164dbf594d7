use idem::prelude::*;
use idem::{Executor, RetryPolicy};

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Charge {
    pub cents: u64,
}

/// Charge a card.
#[tool(class = "non_idempotent_write")]
async fn charge_card(_args: Charge) -> Result<(), ToolError> {
    Ok(())
}

async fn run(exec: Executor) {
    let _ = exec
        .call(charge_card, Charge { cents: 100 })
        .call_id("call_1")
        .retry(RetryPolicy::exponential())
        .await;
}

fn main() {}
