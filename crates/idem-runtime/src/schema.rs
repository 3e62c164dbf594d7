//! Checking a call's arguments against its tool's JSON Schema (feature
//! `schema-validation`).
//!
//! Deserializing into the tool's argument type already enforces the
//! schema's structure (types, required fields, enums), since both come from
//! the same Rust type. What only the schema says — `minimum`/`maximum`,
//! `pattern`, `minLength`, `format` and the like, added with `#[schemars(…)]`
//! — is checked here, before anything runs.

use serde_json::Value;

/// A tool's compiled input schema.
pub struct ArgumentSchema {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl std::fmt::Debug for ArgumentSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArgumentSchema").finish_non_exhaustive()
    }
}

impl ArgumentSchema {
    /// Compile the input schema of tool `name`.
    pub fn compile(name: &str, schema: &Value) -> Result<Self, String> {
        let location = format!("urn:idem:tool:{name}");
        let mut schemas = boon::Schemas::new();
        let mut compiler = boon::Compiler::new();
        compiler
            .add_resource(&location, schema.clone())
            .map_err(|e| format!("{e:#}"))?;
        let index = compiler
            .compile(&location, &mut schemas)
            .map_err(|e| format!("{e:#}"))?;
        Ok(ArgumentSchema { schemas, index })
    }

    /// Check `args`; on failure, one line per violated rule, with where.
    pub fn check(&self, args: &Value) -> Result<(), String> {
        self.schemas.validate(args, self.index).map_err(|e| {
            let mut lines = Vec::new();
            leaves(&e, &mut lines);
            lines.join("; ")
        })
    }
}

/// The innermost causes: the rules actually broken.
fn leaves(e: &boon::ValidationError<'_, '_>, out: &mut Vec<String>) {
    if e.causes.is_empty() {
        let at = e.instance_location.to_string();
        let at = if at.is_empty() { "/".to_owned() } else { at };
        out.push(format!("at `{at}`: {}", e.kind));
    } else {
        for cause in &e.causes {
            leaves(cause, out);
        }
    }
}
