use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct SendEmail {
    pub email: String,
    pub subject: String,
}

#[tool(class = "idempotent_write")]
async fn send_email(_args: SendEmail) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
