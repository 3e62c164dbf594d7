use idem::prelude::*;
use idem::Executor;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Msg {
    pub to: String,
}

// One mistake in the options of each tool. Each tool is still generated
// (without the bad option), so using them below adds nothing: four
// mistakes, four errors.

/// Send an email.
#[tool(class = "idempotent_write", timeout = "30 seconds")]
async fn send_email(_args: Msg) -> Result<(), ToolError> {
    Ok(())
}

/// Look a customer up.
#[tool(class = "read", ttl = "7d")]
async fn lookup(_args: Msg) -> Result<(), ToolError> {
    Ok(())
}

/// Charge a card.
#[tool(class = "non_idempotent_write", max_attempts = 3)]
async fn charge(_args: Msg) -> Result<(), ToolError> {
    Ok(())
}

/// Notify the on-call engineer.
#[tool(read)]
async fn notify(_args: Msg) -> Result<(), ToolError> {
    Ok(())
}

async fn run(executor: Executor) {
    let _registry: idem::Registry = tools![send_email, lookup, charge, notify];
    let _ = executor
        .call(send_email, Msg { to: "a".into() })
        .call_id("a")
        .await;
    let _ = executor
        .call(lookup, Msg { to: "a".into() })
        .call_id("b")
        .await;
}

fn main() {
    let _ = run;
}
