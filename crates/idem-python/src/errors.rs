//! idem's errors as Python exceptions: each [`IdemError`] becomes the
//! exception class of its code (`idem_agents.errors`), carrying the code,
//! the words a model should read, the key and whether the answer came
//! from an earlier call's record.

use idem_runtime::error::{ErrorCode, IdemError};
use idem_runtime::store::StoreError;
use idem_runtime::ToolResult;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::json::to_python;

/// The Python module that defines the exception classes.
const ERRORS: &str = "idem_agents.errors";

/// `error` as the exception of its code, made by
/// `idem_agents.errors._from_native`.
pub(crate) fn to_py(py: Python<'_>, error: IdemError, tool: &str) -> PyErr {
    match build(py, error, tool) {
        Ok(err) => err,
        Err(failed) => failed,
    }
}

/// A store that cannot be opened, as `idem_agents.errors.StoreUnavailable`.
pub(crate) fn store_error(py: Python<'_>, error: &StoreError) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let info = PyDict::new(py);
        info.set_item("code", ErrorCode::StoreUnavailable.as_str())?;
        info.set_item("message", error.to_string())?;
        info.set_item("deduplicated", false)?;
        raise(py, &info)
    };
    build().unwrap_or_else(|failed| failed)
}

fn raise(py: Python<'_>, info: &Bound<'_, PyDict>) -> PyResult<PyErr> {
    let exception = py.import(ERRORS)?.getattr("_from_native")?.call1((info,))?;
    Ok(PyErr::from_value(exception))
}

fn build(py: Python<'_>, error: IdemError, tool: &str) -> PyResult<PyErr> {
    let info = PyDict::new(py);
    info.set_item("code", error.code().as_str())?;
    info.set_item("message", error.to_string())?;
    info.set_item("key", error.key().map(|k| k.as_str().to_owned()))?;
    info.set_item("deduplicated", error.is_deduplicated())?;
    if let IdemError::Tool { error: cause, .. } = &error {
        info.set_item("kind", cause.kind().to_string())?;
        info.set_item("tool_message", cause.message())?;
        if let Some(details) = cause.details() {
            info.set_item("details", to_python(py, details)?)?;
        }
    }
    // What the model reads, as the dispatcher answers it.
    let result = ToolResult {
        call_id: None,
        tool: tool.to_owned(),
        result: Err(error),
    };
    info.set_item("content", to_python(py, &result.content())?)?;
    raise(py, &info)
}
