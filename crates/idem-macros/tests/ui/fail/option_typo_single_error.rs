use idem::prelude::*;
use idem::Executor;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct SendEmail {
    pub email: String,
    pub subject: String,
}

// One typo in an option, and the tool is used elsewhere: the typo is the
// only error. The tool is still generated (with the option left at its
// default), so `tools![…]` and `executor.call(…)` see it.

/// Send an email.
#[tool(class = "idempotent_write", timout = "5s")]
async fn send_email(_args: SendEmail) -> Result<(), ToolError> {
    Ok(())
}

async fn run(executor: Executor) {
    let _registry: idem::Registry = tools![send_email];
    let _ = executor
        .call(
            send_email,
            SendEmail {
                email: "a@example.com".into(),
                subject: "hi".into(),
            },
        )
        .call_id("c")
        .await;
}

fn main() {
    let _ = run;
}
