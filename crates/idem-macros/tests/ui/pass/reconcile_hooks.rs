use idem::prelude::*;
use idem::Reconciled;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Charge {
    pub cents: u64,
}

#[derive(Clone)]
pub struct Ledger;

/// Charge a card.
#[tool(class = "non_idempotent_write", reconcile = find_charge)]
async fn charge(args: Charge, State(_ledger): State<Ledger>) -> Result<u64, ToolError> {
    Ok(args.cents)
}

/// The hook takes `&args`, the context and the tool's `State` parameters.
async fn find_charge(
    args: &Charge,
    ctx: &ToolCtx,
    State(_ledger): State<Ledger>,
) -> Result<Reconciled<u64>, ToolError> {
    Ok(match ctx.key() {
        Some(_) => Reconciled::Applied(args.cents),
        None => Reconciled::Unknown,
    })
}

mod hooks {
    use super::*;

    pub async fn never_found(_args: &Charge, _ctx: &ToolCtx) -> Result<Reconciled<()>, ToolError> {
        Ok(Reconciled::NotApplied)
    }
}

/// Wire money.
#[tool(class = "irreversible", reconcile = hooks::never_found)]
fn wire(_args: Charge) -> Result<(), ToolError> {
    Ok(())
}

fn main() {
    assert!(charge::SPEC.has_reconcile);
    assert!(wire::SPEC.has_reconcile);
}
