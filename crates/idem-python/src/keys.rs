//! Keys as idem derives them (`docs/keys.md`), for a program that wants to
//! know a call's key before making it, and for the published vectors.

use idem_runtime::key::{
    derive_key, CanonicalArgs, IdempotencyKey, KeyInput, KeySource, Namespace,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::json::to_json;

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// `args`' canonical JSON text (RFC 8785) and its fingerprint (SHA-256,
/// lowercase hex).
#[pyfunction]
pub(crate) fn canonical(args: &Bound<'_, PyAny>) -> PyResult<(String, String)> {
    let value = to_json(args, "the arguments")?;
    let canonical = CanonicalArgs::from_value(&value).map_err(value_error)?;
    Ok((canonical.text, canonical.fingerprint.as_str().to_owned()))
}

/// The key of a call: `source` is `"call"` (with `call_id`), `"step"`
/// (`run_id`, `step`, `args`), `"natural"` (`fields`, `window`: the
/// window's number), `"custom"` (`material`) or `"window"` (`seconds`,
/// `number`, `repeat`, `args`).
#[pyfunction]
#[pyo3(signature = (tool, source, *, version=1, namespace="default", call_id=None, run_id=None, step=0, args=None, fields=None, window=None, material=None, seconds=None, number=None, repeat=0))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn derive(
    tool: &str,
    source: &str,
    version: u32,
    namespace: &str,
    call_id: Option<&str>,
    run_id: Option<&str>,
    step: u64,
    args: Option<&Bound<'_, PyAny>>,
    fields: Option<&Bound<'_, PyAny>>,
    window: Option<u64>,
    material: Option<&str>,
    seconds: Option<u64>,
    number: Option<u64>,
    repeat: u32,
) -> PyResult<String> {
    let missing = |what: &str| PyValueError::new_err(format!("a `{source}` key needs {what}"));
    let namespace = Namespace::new(namespace).map_err(value_error)?;
    let canonical = args
        .map(|a| {
            let value = to_json(a, "the arguments")?;
            CanonicalArgs::from_value(&value).map_err(value_error)
        })
        .transpose()?;
    let fields = fields.map(|f| to_json(f, "the fields")).transpose()?;
    let source = match source {
        "call" => KeySource::CallId(call_id.ok_or_else(|| missing("call_id"))?),
        "step" => KeySource::Step {
            run_id: run_id.ok_or_else(|| missing("run_id"))?,
            step,
            args: canonical.as_ref().ok_or_else(|| missing("args"))?,
        },
        "natural" => KeySource::Natural {
            fields: fields.as_ref().ok_or_else(|| missing("fields"))?,
            window,
        },
        "custom" => KeySource::Custom(material.ok_or_else(|| missing("material"))?),
        "window" => KeySource::Window {
            seconds: seconds.ok_or_else(|| missing("seconds"))?,
            number: number.ok_or_else(|| missing("number"))?,
            repeat,
            args: canonical.as_ref().ok_or_else(|| missing("args"))?,
        },
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown key source `{other}`: call, step, natural, custom or window"
            )))
        }
    };
    let key = derive_key(&KeyInput {
        version,
        namespace: &namespace,
        tool,
        source,
    })
    .map_err(value_error)?;
    Ok(key.as_str().to_owned())
}

/// The sub-key `label` of `key` (what `ctx.sub_key(label)` gives a tool).
#[pyfunction]
pub(crate) fn sub_key(key: &str, label: &str) -> PyResult<String> {
    let key = IdempotencyKey::parse(key).map_err(value_error)?;
    Ok(key.sub(label).as_str().to_owned())
}
