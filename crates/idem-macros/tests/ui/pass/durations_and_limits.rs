use idem::prelude::*;
use std::time::Duration;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Args {
    pub id: u64,
}

/// Every duration unit, a retry limit and a key version.
#[tool(class = "idempotent_write", ttl = "7d", timeout = "250ms", max_attempts = 5, key_version = 3, store_args = false)]
async fn put(_args: Args) -> Result<(), ToolError> {
    Ok(())
}

/// A read may have a timeout and a retry limit.
#[tool(class = "read", timeout = "5m", max_attempts = 1)]
async fn get(_args: Args) -> Result<(), ToolError> {
    Ok(())
}

/// A non-idempotent write may have a TTL and a timeout.
#[tool(class = "non_idempotent_write", ttl = "24h", timeout = "30s")]
async fn post(_args: Args) -> Result<(), ToolError> {
    Ok(())
}

fn main() {
    assert_eq!(put::SPEC.ttl, Some(Duration::from_secs(7 * 86_400)));
    assert_eq!(put::SPEC.timeout, Some(Duration::from_millis(250)));
    assert_eq!(put::SPEC.max_attempts, Some(5));
    assert_eq!(put::SPEC.key_version, 3);
    assert!(!put::SPEC.store_args);
    assert_eq!(get::SPEC.timeout, Some(Duration::from_secs(300)));
    assert_eq!(get::SPEC.max_attempts, Some(1));
    assert_eq!(post::SPEC.ttl, Some(Duration::from_secs(86_400)));
    assert_eq!(post::SPEC.timeout, Some(Duration::from_secs(30)));
}
