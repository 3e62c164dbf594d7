use idem::prelude::*;
use idem::Executor;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Msg {
    pub to: String,
}

#[derive(Clone)]
pub struct Mailer;

/// Send an email.
#[tool(class = "idempotent_write")]
async fn send_email(_args: Msg, State(_mailer): State<Mailer>) -> Result<(), ToolError> {
    Ok(())
}

// The executor's state is `()`: it has no `Mailer` to give.
async fn run(exec: Executor) {
    let _ = exec.call(send_email, Msg { to: "a".into() }).call_id("c").await;
}

fn main() {}
