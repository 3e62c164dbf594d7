use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct SendEmail {
    pub email: String,
    pub subject: String,
}

/// Send anything.
#[tool(class = "idempotent_write")]
async fn send<T: serde::Serialize>(_args: T) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
