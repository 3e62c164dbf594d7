use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Msg {
    pub to: String,
}

#[derive(Debug)]
pub struct SmtpError;

/// Send an email.
#[tool(class = "idempotent_write")]
async fn send_email(_args: Msg) -> Result<(), SmtpError> {
    Err(SmtpError)
}

fn main() {}
