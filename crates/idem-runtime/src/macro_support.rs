//! Helpers for the code that `#[tool]` and `tools![…]` generate.
//!
//! Not a public API: the names here may change in any release. They exist
//! so the generated code stays short enough to read in `cargo expand`
//! output, and so the conversions it needs are written (and tested) once.

use std::marker::PhantomData;

/// For the impls [`url_backend!`](crate::url_backend) writes.
pub use async_trait::async_trait;

/// What [`Backend::connect`](crate::store::backend::Backend::connect)
/// returns, for the impls [`url_backend!`](crate::url_backend) writes.
pub type Opened = Result<std::sync::Arc<dyn crate::store::Store>, crate::store::StoreError>;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ToolError;
use crate::tool::KeyMaterial;

/// Turn a tool body's `Result<T, E>` into the `Result<T, ToolError>` the
/// runtime expects; `E` is anything that converts into [`ToolError`]
/// (including `ToolError` itself).
pub fn into_tool_result<T, E>(result: Result<T, E>) -> Result<T, ToolError>
where
    E: Into<ToolError>,
{
    result.map_err(Into::into)
}

/// One field of a natural key: its (normalised) value as JSON.
///
/// Serialization failures are kept and reported by [`natural_key`].
pub fn key_field<T: Serialize + ?Sized>(value: &T) -> Result<Value, serde_json::Error> {
    serde_json::to_value(value)
}

/// The key material of a natural key: the named fields as one JSON object.
///
/// Returns `None` when a field cannot be represented as JSON rather than
/// build a key from partial material (two different calls must never share
/// a key by accident); the executor then refuses the call with
/// `KeyError::NoMaterial` and nothing runs.
pub fn natural_key<const N: usize>(
    fields: [(&'static str, Result<Value, serde_json::Error>); N],
) -> Option<KeyMaterial> {
    let mut object = Map::new();
    for (name, value) in fields {
        object.insert(name.to_owned(), value.ok()?);
    }
    Some(KeyMaterial::Natural(Value::Object(object)))
}

/// The key material returned by a custom key function.
pub fn custom_key(material: impl Into<String>) -> Option<KeyMaterial> {
    Some(KeyMaterial::Custom(material.into()))
}

/// Probes whether a tool's output type has a JSON Schema, for
/// [`ToolDef::output_schema`](crate::tool::ToolDef::output_schema).
///
/// Rust has no specialization, so `#[tool]` asks by method resolution
/// ("autoref specialization"): with both traits below in scope,
/// `(&OutputSchemaProbe::<T>::NEW).output_schema()` picks
/// [`WithOutputSchema`] when `T: JsonSchema` (its receiver matches without
/// an extra borrow) and falls back to [`WithoutOutputSchema`] otherwise.
/// This only works where `T` is a concrete type, which it is in the
/// generated `impl ToolDef`.
pub struct OutputSchemaProbe<T: ?Sized>(PhantomData<fn() -> *const T>);

impl<T: ?Sized> OutputSchemaProbe<T> {
    /// The probe value.
    pub const NEW: Self = OutputSchemaProbe(PhantomData);
}

/// The output type has a schema: generate it for serde's serialize
/// contract (what the tool writes).
pub trait WithOutputSchema {
    /// The schema.
    fn output_schema(&self) -> Option<schemars::Schema>;
}

impl<T: schemars::JsonSchema + ?Sized> WithOutputSchema for OutputSchemaProbe<T> {
    fn output_schema(&self) -> Option<schemars::Schema> {
        let settings = schemars::generate::SchemaSettings::draft2020_12().for_serialize();
        Some(settings.into_generator().into_root_schema_for::<T>())
    }
}

/// The output type has no schema.
pub trait WithoutOutputSchema {
    /// `None`.
    fn output_schema(&self) -> Option<schemars::Schema>;
}

impl<T: ?Sized> WithoutOutputSchema for &OutputSchemaProbe<T> {
    fn output_schema(&self) -> Option<schemars::Schema> {
        None
    }
}

/// `a == b` for string slices, usable in constants (the duplicate-name check
/// of `tools![…]` runs at compile time).
pub const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_key_is_an_object_of_the_named_fields() {
        let material = natural_key([
            ("email", key_field("ada@example.com")),
            ("country", key_field(&"GB")),
        ]);
        assert_eq!(
            material,
            Some(KeyMaterial::Natural(serde_json::json!({
                "email": "ada@example.com",
                "country": "GB"
            })))
        );
    }

    #[test]
    fn natural_key_with_an_unserializable_field_is_refused() {
        let mut bad = std::collections::HashMap::new();
        bad.insert((1, 2), "tuple keys are not JSON object keys");
        assert_eq!(natural_key([("bad", key_field(&bad))]), None);
    }

    #[test]
    // Written exactly as `#[tool]` writes it: the explicit borrow is what
    // lets the fallback's `&&` receiver be found when there is no schema.
    #[allow(clippy::needless_borrow)]
    fn output_schema_probe_finds_a_schema_only_where_there_is_one() {
        struct NoSchema;
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Sent {
            message_id: String,
        }
        let schema = (&OutputSchemaProbe::<Sent>::NEW).output_schema().unwrap();
        assert_eq!(schema.get("type"), Some(&serde_json::json!("object")));
        assert!((&OutputSchemaProbe::<NoSchema>::NEW)
            .output_schema()
            .is_none());
    }

    #[test]
    fn str_eq_compares_bytes() {
        const { assert!(str_eq("send_email", "send_email")) };
        const { assert!(!str_eq("send_email", "send_emails")) };
        assert!(!str_eq("abc", "abd"));
    }

    #[test]
    fn tool_errors_pass_through_and_others_convert() {
        let e: Result<(), ToolError> = into_tool_result(Err(ToolError::transient("429")));
        assert_eq!(e.unwrap_err().message(), "429");
    }
}
