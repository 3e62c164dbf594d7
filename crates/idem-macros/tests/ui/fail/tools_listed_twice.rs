use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Query {
    pub city: String,
}

/// Current weather.
#[tool(class = "read")]
async fn weather(_args: Query) -> Result<f64, ToolError> {
    Ok(20.0)
}

fn main() {
    let _registry: idem::Registry = tools![weather, weather];
}
