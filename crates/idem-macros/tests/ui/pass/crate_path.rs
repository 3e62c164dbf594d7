// `crate = …` names the facade explicitly (here under its own name).

/// Arguments.
#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Args {
    pub id: u64,
}

/// A tool whose generated code goes through `::idem`.
#[idem::tool(class = "read", crate = ::idem)]
async fn get(args: Args) -> Result<u64, idem::ToolError> {
    Ok(args.id)
}

fn main() {
    assert_eq!(<get as idem::ToolDef>::SPEC.name, "get");
}
