// An `idempotent_write` tool with the context and state access.

/// Send an email to a customer.
#[tool(class = "idempotent_write", timeout = "30s", max_attempts = 5)]
async fn send_email(
    args: SendEmail,
    ctx: &ToolCtx,
    State(mailer): State<Mailer>,
) -> Result<EmailSent, ToolError> {
    let message_id = format!("<{}@example.com>", ctx.key().unwrap());
    mailer.send(&args.to, &message_id).await?;
    Ok(EmailSent { message_id })
}
