//! rmcp `Tool` definitions from a registry: the same name, description,
//! input schema, class annotations and output schema as
//! [`Registry::mcp_tools`], as typed rmcp values.
//!
//! [`Registry::mcp_tools`]: crate::Registry::mcp_tools

use std::sync::Arc;

use idem_runtime::registry::DynTool;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::Value;

use crate::Registry;

/// The rmcp definition of one tool.
///
/// The annotations come from the tool's class
/// ([`ClassKind::annotations`](crate::ClassKind::annotations)), so what
/// the tool advertises and how idem runs it cannot disagree.
pub fn tool_definition<S: 'static>(tool: &dyn DynTool<S>) -> Tool {
    let spec = tool.spec();
    let hints = tool.class().annotations();
    let annotations = ToolAnnotations::new()
        .read_only(hints.read_only_hint)
        .destructive(hints.destructive_hint)
        .idempotent(hints.idempotent_hint)
        .open_world(hints.open_world_hint);
    let definition = Tool::new(spec.name, spec.description, object(tool.input_schema()))
        .with_annotations(annotations);
    match tool.mcp_output_schema() {
        Some(output) => definition.with_raw_output_schema(object(output)),
        None => definition,
    }
}

/// The rmcp definitions of every tool of `registry`, in registration
/// order.
///
/// ```
/// use idem::prelude::*;
/// # #[derive(Clone, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
/// # struct Query { city: String }
///
/// /// Current temperature in a city, in °C.
/// #[tool(class = "read")]
/// async fn weather(query: Query) -> Result<f64, ToolError> {
///     Ok(21.5)
/// }
///
/// let registry: Registry = tools![weather];
/// let tools = idem::mcp::tool_definitions(&registry);
/// assert_eq!(tools[0].name, "weather");
/// assert_eq!(tools[0].annotations.as_ref().unwrap().read_only_hint, Some(true));
/// // MCP declares only object outputs; a number is sent as text.
/// assert!(tools[0].output_schema.is_none());
/// ```
pub fn tool_definitions<S: 'static>(registry: &Registry<S>) -> Vec<Tool> {
    registry.iter().map(|t| tool_definition(&**t)).collect()
}

/// A schema as rmcp holds it: a JSON object (a tool's schemas always are;
/// anything else stands for "any object").
fn object(schema: Value) -> Arc<JsonObject> {
    match schema {
        Value::Object(object) => Arc::new(object),
        _ => Arc::new(JsonObject::from_iter([(
            "type".to_owned(),
            "object".into(),
        )])),
    }
}
