//! Python values to JSON and back, as the key derivation reads them.
//!
//! Written here rather than through a serde bridge so that every value
//! JSON cannot hold is refused by name before anything runs: `NaN` and the
//! infinities (which serde_json's `Value` would quietly turn into `null`,
//! changing the arguments and their key), keys that are not strings,
//! integers beyond a double's range, and objects of no JSON type.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

/// How deep arguments may nest: as deep as serde_json reads a JSON text.
const MAX_DEPTH: usize = 128;

/// `value` as JSON, or a `ValueError` naming the first part that is not
/// JSON (`where` is the path to it, as `args.items[2]`).
pub(crate) fn to_json(value: &Bound<'_, PyAny>, path: &str) -> PyResult<Value> {
    convert(value, path, 0)
}

fn not_json(path: &str, what: String) -> PyErr {
    PyValueError::new_err(format!("{path} is not JSON: {what}"))
}

fn convert(value: &Bound<'_, PyAny>, path: &str, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(not_json(path, format!("nested deeper than {MAX_DEPTH}")));
    }
    if value.is_none() {
        return Ok(Value::Null);
    }
    // `bool` before `int`: Python's `True` is an `int` too.
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if value.cast::<PyInt>().is_ok() {
        if let Ok(i) = value.extract::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        if let Ok(u) = value.extract::<u64>() {
            return Ok(Value::Number(u.into()));
        }
        // Beyond 64 bits, the double the same digits are as JSON text (the
        // dispatcher's reading, and the key's: a number is the double it
        // denotes); beyond a double's range, no JSON number.
        return value
            .extract::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| {
                not_json(
                    path,
                    format!("the integer {value} is beyond the range of a JSON number"),
                )
            });
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        let f = f.value();
        return Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| not_json(path, format!("{f} is not a number JSON can write")));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in dict.iter() {
            let Ok(k) = k.cast::<PyString>() else {
                return Err(not_json(
                    path,
                    format!(
                        "the key {} is a {}, and JSON keys are strings",
                        k.repr()?,
                        k.get_type().name()?
                    ),
                ));
            };
            let k = k.to_str()?;
            let inner = format!("{path}.{k}");
            map.insert(k.to_owned(), convert(&v, &inner, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if value.cast::<PyList>().is_ok() || value.cast::<PyTuple>().is_ok() {
        let mut items = Vec::new();
        for (i, item) in value.try_iter()?.enumerate() {
            items.push(convert(&item?, &format!("{path}[{i}]"), depth + 1)?);
        }
        return Ok(Value::Array(items));
    }
    Err(not_json(
        path,
        format!("a {} has no JSON form", value.get_type().name()?),
    ))
}

/// `value` as Python: dicts, lists, strings, ints, floats, bools, `None`.
pub(crate) fn to_python<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any()
            }
        }
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_python(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_python(py, v)?)?;
            }
            dict.into_any()
        }
    })
}
