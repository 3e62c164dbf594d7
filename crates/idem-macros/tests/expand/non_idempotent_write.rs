// A `non_idempotent_write` tool with a natural key (find-or-create).

/// Create a customer unless one with this email exists.
#[tool(
    class = "non_idempotent_write",
    key = natural(fields(email = normalize_email, country), window = "24h"),
    ttl = "7d",
    key_version = 2,
)]
async fn create_customer(args: NewCustomer, State(db): State<Db>) -> Result<CustomerId, ToolError> {
    db.insert(args).await
}
