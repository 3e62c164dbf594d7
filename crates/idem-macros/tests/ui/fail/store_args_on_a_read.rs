use idem::prelude::*;

/// Look a customer up.
#[tool(class = "read", store_args = false)]
async fn lookup(args: Args) -> Result<String, ToolError> {
    Ok(args.email)
}

#[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
struct Args {
    email: String,
}

fn main() {}
