// An `irreversible` tool with a custom key, a reconcile hook and a name
// and description given in the attribute.

#[tool(
    class = "irreversible",
    name = "refund_order",
    description = "Refund an order in full. Cannot be undone.",
    key = custom(refund_key),
    reconcile = find_refund,
)]
async fn refund(args: Refund, ctx: &ToolCtx, State(payments): State<Payments>) -> Result<RefundId, ToolError> {
    payments.refund(args.order, ctx.key()).await
}
