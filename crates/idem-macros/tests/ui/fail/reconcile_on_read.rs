use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct SendEmail {
    pub email: String,
    pub subject: String,
}

/// Look up the last email sent to an address.
#[tool(class = "read", reconcile = find_it)]
async fn last_email(args: SendEmail) -> Result<String, ToolError> {
    Ok(args.subject)
}

fn main() {}
