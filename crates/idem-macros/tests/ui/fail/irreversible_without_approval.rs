use idem::prelude::*;
use idem::Executor;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Account {
    pub id: u64,
}

/// Delete an account and all its data.
#[tool(class = "irreversible")]
async fn delete_account(_args: Account) -> Result<(), ToolError> {
    Ok(())
}

async fn run(exec: Executor) {
    let _ = exec.call(delete_account, Account { id: 7 }).call_id("call_1").await;
}

fn main() {}
