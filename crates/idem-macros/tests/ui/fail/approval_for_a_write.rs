use idem::prelude::*;
use idem::{Approval, Executor};

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Msg {
    pub to: String,
}

/// Send an email.
#[tool(class = "idempotent_write")]
async fn send_email(_args: Msg) -> Result<(), ToolError> {
    Ok(())
}

async fn run(exec: Executor) {
    let approval = Approval::granted_by("ops");
    let _ = exec.call_approved(send_email, Msg { to: "a".into() }, approval).await;
}

fn main() {}
