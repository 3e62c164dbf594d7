use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct SendEmail {
    pub email: String,
    pub subject: String,
}

// Three mistakes, one build: each is reported at its own token.

/// Send an email.
#[tool(class = "read", ttl = "7d", max_atempts = 3)]
async fn send_email<T>(_args: SendEmail) -> Result<(), ToolError> {
    Ok(())
}

fn main() {}
