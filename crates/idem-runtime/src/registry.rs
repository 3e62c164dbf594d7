//! A registry of tools, looked up by name for dispatch from model output,
//! and the source of tool definitions: each provider's are written by its
//! [`Provider`](crate::provider::Provider), as
//! [`Registry::tools_for::<P>`](Registry::tools_for) (MCP's in the `idem`
//! crate's `mcp` module).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::class::ClassKind;
use crate::error::IdemError;
use crate::executor::{CallOutput, Executor, RunContext};
use crate::tool::{Tool, ToolSpec};

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A tool behind a trait object: what the dispatcher calls with JSON.
/// Implemented for every [`Tool<S>`].
pub trait DynTool<S>: Send + Sync + 'static {
    /// Name, description and options.
    fn spec(&self) -> ToolSpec;
    /// The class.
    fn class(&self) -> ClassKind;
    /// JSON Schema of the arguments.
    fn input_schema(&self) -> Value;
    /// JSON Schema of the output as the tool writes it, when the output
    /// type has one ([`ToolDef::output_schema`](crate::tool::ToolDef::output_schema))
    /// that says something: never the schema of an output that may be any
    /// JSON (`serde_json::Value`'s).
    fn output_schema(&self) -> Option<Value>;
    /// The output schema as MCP declares it (`outputSchema`): the output
    /// schema when it describes a JSON object, since MCP before 2026-07-28
    /// accepts no other (a tool with a string output declares none, and its
    /// output is sent as text only).
    fn mcp_output_schema(&self) -> Option<Value> {
        self.output_schema()
            .filter(|schema| schema.get("type").and_then(Value::as_str) == Some("object"))
    }
    /// Deserialize `args` (naming the offending field on failure) and run
    /// the call through `exec`; the output comes back as JSON.
    fn call_json<'a>(
        &'a self,
        exec: &'a Executor<S>,
        args: Value,
        call_id: Option<String>,
        run: RunContext,
    ) -> BoxFuture<'a, Result<CallOutput<Value>, IdemError>>;
}

impl<S: Send + Sync + 'static, T: Tool<S>> DynTool<S> for T {
    fn spec(&self) -> ToolSpec {
        *self.runtime_spec()
    }

    fn class(&self) -> ClassKind {
        self.runtime_class()
    }

    fn input_schema(&self) -> Value {
        let mut schema = serde_json::to_value(T::input_schema()).unwrap_or_else(|_| json!({}));
        if let Some(obj) = schema.as_object_mut() {
            // Provider APIs want the bare object schema.
            obj.remove("$schema");
        }
        standard_formats_only(&mut schema);
        schema
    }

    fn output_schema(&self) -> Option<Value> {
        let mut schema = serde_json::to_value(T::output_schema()?).ok()?;
        standard_formats_only(&mut schema);
        let obj = schema.as_object_mut()?;
        obj.remove("$schema");
        // `true`, or `{"title": "AnyValue"}`: any JSON at all.
        let constrains = |key: &String| !matches!(key.as_str(), "title" | "description");
        obj.keys().any(constrains).then_some(schema)
    }

    fn call_json<'a>(
        &'a self,
        exec: &'a Executor<S>,
        args: Value,
        call_id: Option<String>,
        run: RunContext,
    ) -> BoxFuture<'a, Result<CallOutput<Value>, IdemError>> {
        Box::pin(async move {
            let args: T::Args = serde_path_to_error::deserialize(&args).map_err(|e| {
                let path = e.path().to_string();
                IdemError::InvalidArguments {
                    tool: self.runtime_spec().name.to_owned(),
                    detail: if path == "." {
                        e.into_inner().to_string()
                    } else {
                        format!("at `{path}`: {}", e.into_inner())
                    },
                }
            })?;
            let called = exec.execute_dispatched(self, args, call_id, run).await?;
            let output = serde_json::to_value(&called.output).map_err(|e| {
                IdemError::OutputNotSerializable {
                    tool: self.runtime_spec().name.to_owned(),
                    detail: e.to_string(),
                }
            })?;
            Ok(CallOutput {
                output,
                meta: called.meta,
            })
        })
    }
}

/// Two tools share a name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a tool named `{0}` is already registered; tool names must be unique")]
pub struct DuplicateTool(pub String);

/// Tools by name, in registration order.
///
/// ```
/// use idem_runtime::registry::Registry;
///
/// let registry: Registry = Registry::new();
/// assert!(registry.is_empty());
/// ```
pub struct Registry<S = ()> {
    tools: Vec<Arc<dyn DynTool<S>>>,
    by_name: HashMap<&'static str, usize>,
    /// Compiled input schemas, by tool position.
    #[cfg(feature = "schema-validation")]
    schemas: Vec<Arc<crate::schema::ArgumentSchema>>,
}

impl<S> Default for Registry<S> {
    fn default() -> Self {
        Registry {
            tools: Vec::new(),
            by_name: HashMap::new(),
            #[cfg(feature = "schema-validation")]
            schemas: Vec::new(),
        }
    }
}

impl<S> Clone for Registry<S> {
    fn clone(&self) -> Self {
        Registry {
            tools: self.tools.clone(),
            by_name: self.by_name.clone(),
            #[cfg(feature = "schema-validation")]
            schemas: self.schemas.clone(),
        }
    }
}

impl<S: 'static> fmt::Debug for Registry<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl<S: Send + Sync + 'static> Registry<S> {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `tool`.
    ///
    /// # Panics
    /// If a tool of the same name is registered (`tools![…]` rejects that at
    /// compile time; [`Registry::try_with`] returns it as an error).
    pub fn with<T: Tool<S>>(self, tool: T) -> Self {
        match self.try_with(tool) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    /// Add `tool`, refusing a duplicate name.
    pub fn try_with<T: Tool<S>>(mut self, tool: T) -> Result<Self, DuplicateTool> {
        self.insert(Arc::new(tool))?;
        Ok(self)
    }

    /// Add a tool behind a trait object, refusing a duplicate name.
    pub fn insert(&mut self, tool: Arc<dyn DynTool<S>>) -> Result<(), DuplicateTool> {
        let name = tool.spec().name;
        if self.by_name.contains_key(name) {
            return Err(DuplicateTool(name.to_owned()));
        }
        #[cfg(feature = "schema-validation")]
        {
            // A schema that schemars generated always compiles; if one ever
            // does not, the tool cannot be checked and must not be callable.
            let schema = crate::schema::ArgumentSchema::compile(name, &tool.input_schema())
                .unwrap_or_else(|e| {
                    panic!("the JSON Schema of tool `{name}` does not compile: {e}")
                });
            self.schemas.push(Arc::new(schema));
        }
        self.by_name.insert(name, self.tools.len());
        self.tools.push(tool);
        Ok(())
    }
}

impl<S: 'static> Registry<S> {
    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn DynTool<S>>> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    /// The compiled input schema of the tool called `name`.
    #[cfg(feature = "schema-validation")]
    pub fn argument_schema(&self, name: &str) -> Option<&crate::schema::ArgumentSchema> {
        self.by_name.get(name).map(|&i| &*self.schemas[i])
    }

    /// The registered name closest to `name`, for "did you mean".
    pub fn suggest(&self, name: &str) -> Option<&'static str> {
        self.by_name
            .keys()
            .map(|k| (strsim::normalized_damerau_levenshtein(name, k), *k))
            .filter(|(score, _)| *score >= 0.6)
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, k)| k)
    }

    /// Names in registration order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.tools.iter().map(|t| t.spec().name)
    }

    /// The tools in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn DynTool<S>>> + '_ {
        self.tools.iter()
    }

    /// How many tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// What each tool is — name, description, class, whether its
    /// arguments are stored — for programs that show records without
    /// linking the tools (`idem serve --tools FILE`): write
    /// [`Catalog::to_json`](crate::catalog::Catalog::to_json) to a file.
    pub fn catalog(&self) -> crate::catalog::Catalog {
        crate::catalog::Catalog {
            idem_tool_catalog: crate::catalog::CATALOG_FORMAT,
            tools: self
                .tools
                .iter()
                .map(|t| {
                    let spec = t.spec();
                    crate::catalog::CatalogTool {
                        name: spec.name.to_owned(),
                        description: spec.description.to_owned(),
                        class: t.class(),
                        store_args: spec.store_args,
                        ttl_ms: spec
                            .ttl
                            .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64),
                    }
                })
                .collect(),
        }
    }
}

/// The formats JSON Schema (2020-12) defines. schemars also writes its own
/// (`uint64`, `int32`, `double`, …) for Rust's number types; validators in
/// strict mode (Ajv's, which MCP clients use) refuse a schema that names a
/// format they do not know, and the range is already in `minimum` and
/// `maximum`.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// Remove from `schema`, at every depth, each `format` JSON Schema does not
/// define. Only schema keywords are touched: a property named `format` (its
/// schema is an object) and data in `default`, `examples`, `const` and
/// `enum` stay as they are.
fn standard_formats_only(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| !STANDARD_FORMATS.contains(&f))
            {
                map.remove("format");
            }
            for (key, value) in map.iter_mut() {
                if !matches!(key.as_str(), "default" | "examples" | "const" | "enum") {
                    standard_formats_only(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(standard_formats_only),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_formats_json_schema_defines_are_kept() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "cents": {"type": "integer", "format": "uint64", "minimum": 0},
                "at": {"type": "string", "format": "date-time"},
                "format": {"type": "string", "default": {"format": "uint8"}},
                "items": {"type": "array", "items": {"type": "number", "format": "double"}},
                "choice": {"anyOf": [{"type": "integer", "format": "int32"}, {"type": "null"}]}
            },
            "examples": [{"format": "int64"}]
        });
        standard_formats_only(&mut schema);
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "cents": {"type": "integer", "minimum": 0},
                    "at": {"type": "string", "format": "date-time"},
                    "format": {"type": "string", "default": {"format": "uint8"}},
                    "items": {"type": "array", "items": {"type": "number"}},
                    "choice": {"anyOf": [{"type": "integer"}, {"type": "null"}]}
                },
                "examples": [{"format": "int64"}]
            })
        );
    }
}
