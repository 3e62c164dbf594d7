use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Args {
    pub id: u64,
}

/// Overridden below.
#[tool(class = "read", name = "fetch-order", description = "Fetch an order by id.")]
async fn get_order(args: Args) -> Result<u64, ToolError> {
    Ok(args.id)
}

/// First line.
///
///   Indented second paragraph.
#[doc = "Third, as an attribute."]
#[tool(class = "read")]
fn documented(args: Args) -> Result<u64, ToolError> {
    Ok(args.id)
}

#[doc = concat!("Built by ", "a macro.")]
#[tool(class = "read")]
fn macro_doc(args: Args) -> Result<u64, ToolError> {
    Ok(args.id)
}

/// A raw identifier keeps its name without `r#`.
#[tool(class = "read")]
fn r#match(args: Args) -> Result<u64, ToolError> {
    Ok(args.id)
}

fn main() {
    assert_eq!(get_order::SPEC.name, "fetch-order");
    assert_eq!(get_order::SPEC.description, "Fetch an order by id.");
    assert_eq!(
        documented::SPEC.description,
        "First line.\n\n  Indented second paragraph.\nThird, as an attribute."
    );
    assert_eq!(macro_doc::SPEC.description, "Built by a macro.");
    assert_eq!(r#match::SPEC.name, "match");
}
