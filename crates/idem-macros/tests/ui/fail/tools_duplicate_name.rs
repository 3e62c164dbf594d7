use idem::prelude::*;

#[derive(Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
pub struct Query {
    pub city: String,
}

/// Current weather.
#[tool(class = "read", name = "weather")]
async fn weather_now(_args: Query) -> Result<f64, ToolError> {
    Ok(20.0)
}

/// Tomorrow's weather.
#[tool(class = "read", name = "weather")]
async fn weather_tomorrow(_args: Query) -> Result<f64, ToolError> {
    Ok(18.0)
}

fn main() {
    let _registry: idem::Registry = tools![weather_now, weather_tomorrow];
}
