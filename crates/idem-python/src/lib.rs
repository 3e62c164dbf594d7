//! `idem_agents._native`: idem's executor, stores and keys for Python.
//!
//! The Python package (`python/idem_agents/`) is the face users see: the
//! `tool` decorator, `Executor.call`/`acall`, the exceptions and the
//! framework adapters. This module is what runs underneath — the Rust
//! executor and stores themselves, so a call made from Python is the same
//! record, under the same key, as the same call made from Rust or through
//! `idem proxy`. Nothing about claims, leases or keys is written again in
//! Python.

use pyo3::prelude::*;

mod block;
mod context;
mod errors;
mod executor;
mod json;
mod keys;
mod tool;

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<executor::Executor>()?;
    m.add_class::<executor::CallResult>()?;
    m.add_class::<tool::ToolDefinition>()?;
    m.add_class::<context::Context>()?;
    m.add_function(wrap_pyfunction!(keys::canonical, m)?)?;
    m.add_function(wrap_pyfunction!(keys::derive, m)?)?;
    m.add_function(wrap_pyfunction!(keys::sub_key, m)?)?;
    m.add("KEY_VERSION", idem_runtime::key::DEFAULT_KEY_VERSION)?;
    Ok(())
}
