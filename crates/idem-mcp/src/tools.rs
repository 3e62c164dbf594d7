//! rmcp `Tool` definitions from a registry: each tool's name,
//! description and input schema ([`DynTool::input_schema`]), the
//! annotations of its class and its output schema as MCP declares it
//! ([`DynTool::mcp_output_schema`]), as typed rmcp values.

use std::sync::Arc;

use idem_runtime::registry::DynTool;
use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde_json::{json, Value};

use crate::meta::{CLASS_META, KEYING_META, REPEAT_ARGUMENT_META, WINDOW_SECONDS_META};
use crate::policy::{Keyed, Unkeyed, REPEAT_ARGUMENT};
use idem_runtime::Registry;

/// The rmcp definition of one tool.
///
/// The annotations come from the tool's class
/// ([`ClassKind::annotations`](idem_runtime::ClassKind::annotations)), so what
/// the tool advertises and how idem runs it cannot disagree; `_meta`
/// names the class ([`CLASS_META`]).
pub fn tool_definition<S: 'static>(tool: &dyn DynTool<S>) -> Tool {
    let mut meta = MetaObject::new();
    meta.insert(CLASS_META.to_owned(), tool.class().as_str().into());
    base_definition(tool).with_meta(meta)
}

/// The definition an [`McpServer`](crate::McpServer) lists under its
/// policy: [`tool_definition`]'s, and in `_meta` how the tool is keyed
/// ([`KEYING_META`]); a tool keyed by a window also gets the optional
/// [`REPEAT_ARGUMENT`] and a sentence in its description saying what a
/// repeated call does.
pub(crate) fn listed_definition<S: 'static>(
    tool: &dyn DynTool<S>,
    policy: Unkeyed,
) -> (Tool, Keyed) {
    let keyed = Keyed::of(tool, policy);
    let mut definition = tool_definition(tool);
    let meta = definition.meta.get_or_insert_with(MetaObject::new);
    meta.insert(KEYING_META.to_owned(), keyed.word().into());
    if let Keyed::Window(within) = keyed {
        meta.insert(WINDOW_SECONDS_META.to_owned(), within.as_secs().into());
        let mut schema = (*definition.input_schema).clone();
        if add_repeat_argument(&mut schema) {
            meta.insert(REPEAT_ARGUMENT_META.to_owned(), REPEAT_ARGUMENT.into());
            definition.input_schema = Arc::new(schema);
            if let Some(sentence) = keyed.sentence() {
                let description = definition.description.as_deref().unwrap_or_default();
                definition.description = Some(
                    if description.is_empty() {
                        sentence
                    } else {
                        format!("{} {sentence}", description.trim_end())
                    }
                    .into(),
                );
            }
        }
    }
    (definition, keyed)
}

/// Add [`REPEAT_ARGUMENT`] to an object schema's properties; `false` when
/// the tool has an argument of that name already (it is then not added).
fn add_repeat_argument(schema: &mut JsonObject) -> bool {
    let properties = schema.entry("properties").or_insert_with(|| json!({}));
    let Some(properties) = properties.as_object_mut() else {
        return false;
    };
    if properties.contains_key(REPEAT_ARGUMENT) {
        tracing::warn!(
            "a tool has an argument named `{REPEAT_ARGUMENT}`; it is not used to mark deliberate repeats"
        );
        return false;
    }
    properties.insert(
        REPEAT_ARGUMENT.to_owned(),
        json!({
            "type": "integer",
            "minimum": 1,
            "description": "Only to do the same thing again on purpose: 1 for the second time \
                            with these exact arguments, 2 for the third. Leave it out otherwise.",
        }),
    );
    true
}

/// Name, description, schemas and annotations.
fn base_definition<S: 'static>(tool: &dyn DynTool<S>) -> Tool {
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
/// assert_eq!(tools[0].meta.as_ref().unwrap().get("io.idem/class").unwrap(), "read");
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
