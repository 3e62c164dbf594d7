use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct SendEmail {
    pub email: String,
    pub subject: String,
}

/// Send an email.
#[tool(class = "idempotent_write", key = natural(fields(emial, subject)))]
async fn send_email(_args: SendEmail) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
