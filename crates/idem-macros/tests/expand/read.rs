// A `read` tool: a plain `fn`, no options, no state.

/// Look a customer up by email.
#[tool(class = "read")]
fn lookup_customer(args: Lookup) -> Result<Customer, ToolError> {
    Ok(Customer::find(&args.email))
}
