use idem::prelude::*;

/// Not deserializable: no `Deserialize` derive.
#[derive(Clone, serde::Serialize, schemars::JsonSchema)]
pub struct SendEmail {
    pub email: String,
}

/// Send an email.
#[tool(class = "idempotent_write")]
async fn send_email(_args: SendEmail) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
