use idem::prelude::*;
use idem::{IdempotentWrite, Irreversible, NonIdempotentWrite, Read};

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Args {
    pub id: u64,
}

/// A read.
#[tool(class = "read")]
async fn get(args: Args) -> Result<u64, ToolError> {
    Ok(args.id)
}

/// An idempotent write.
#[tool(class = "idempotent_write")]
async fn put(args: Args) -> Result<u64, ToolError> {
    Ok(args.id)
}

/// A non-idempotent write.
#[tool(class = "non_idempotent_write")]
async fn append(args: Args) -> Result<u64, ToolError> {
    Ok(args.id)
}

/// An irreversible call.
#[tool(class = "irreversible")]
async fn delete(args: Args) -> Result<u64, ToolError> {
    Ok(args.id)
}

fn class_is<T: ToolDef<Class = C>, C>() {}

fn main() {
    class_is::<get, Read>();
    class_is::<put, IdempotentWrite>();
    class_is::<append, NonIdempotentWrite>();
    class_is::<delete, Irreversible>();
}
