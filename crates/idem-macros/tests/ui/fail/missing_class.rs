use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct SendEmail {
    pub email: String,
    pub subject: String,
}

/// Send an email.
#[tool(timeout = "30s")]
async fn send_email(_args: SendEmail) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
