use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct SendEmail {
    pub email: String,
    pub subject: String,
}

/// Send an email.
#[tool(class = "non_idempotent_write", max_attempts = 3)]
async fn send_email(_args: SendEmail) -> Result<(), ToolError> {
    Ok(())
}

/// Delete an account.
#[tool(class = "irreversible", max_attempts = 2)]
async fn delete_account(_args: SendEmail) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
