//! A Python function as an idem tool.
//!
//! Its shape is known only at run time, as an upstream tool of `idem
//! proxy` is: [`ToolDefinition`] holds the spec (leaked once per decorated
//! function, as the proxy leaks one per upstream tool) and the class, and
//! each call is a [`PyCall`] — the definition, the Python function and the
//! call's own Python arguments — run through the runtime's dynamic entry
//! point ([`DynTool::call_json`](idem_runtime::registry::DynTool)) like
//! any dispatched call.
//!
//! A plain `def` called with `call` runs on the calling thread, inside
//! the executor's poll, the lease renewed from the runtime meanwhile
//! ([`ToolCtx::run_blocking`]); otherwise the function runs on a thread of
//! tokio's blocking pool holding the GIL, or on the caller's asyncio
//! event loop (an `async def` called with `acall`), outside the
//! executor's own task: the lease is renewed and the timeout counted
//! while it runs.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::class::{ClassKind, NonIdempotentWrite};
use idem_runtime::ctx::ToolCtx;
use idem_runtime::error::{ErrorKind, ToolError};
use idem_runtime::tool::{KeyMaterial, KeySpec, Reconciled, Tool, ToolDef, ToolSpec};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use serde_json::Value;

use crate::context::Context;
use crate::json::{to_json, to_python};

/// A decorated function's definition: name, description, class and
/// options (made by `idem_agents.tool`).
#[pyclass(frozen, module = "idem_agents._native")]
pub(crate) struct ToolDefinition {
    pub(crate) spec: &'static ToolSpec,
    pub(crate) class: ClassKind,
    /// `runner(args, ctx)`: the decorated function behind the package's
    /// own wrapper (pydantic models, the context argument, the output's
    /// JSON form), once bound ([`ToolDefinition::bind`]). Returns a
    /// coroutine for an `async def` function.
    pub(crate) func: Option<Arc<Py<PyAny>>>,
    pub(crate) is_async: bool,
    /// `reconcile(args, ctx)`, the hook of a call whose owner vanished.
    pub(crate) reconcile: Option<Arc<Py<PyAny>>>,
    pub(crate) reconcile_is_async: bool,
}

/// Give `text` the `'static` lifetime a [`ToolSpec`] holds: a tool is
/// defined once, when its module is imported.
fn leak(text: &str) -> &'static str {
    Box::leak(text.to_owned().into_boxed_str())
}

/// `seconds` as a duration, refused unless positive (`what` names it).
pub(crate) fn seconds(seconds: Option<f64>, what: &str) -> PyResult<Option<Duration>> {
    seconds
        .map(|s| {
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| PyValueError::new_err(format!("{what} must be positive, not {s}")))
        })
        .transpose()
}

#[pymethods]
impl ToolDefinition {
    /// A definition; `key` is `"default"`, `"natural"` or `"custom"`.
    #[new]
    #[pyo3(signature = (name, description, cls, key="default", natural_fields=None, natural_window=None, ttl=None, timeout=None, max_attempts=None, has_reconcile=false, key_version=None, store_args=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &str,
        description: &str,
        cls: &str,
        key: &str,
        natural_fields: Option<Vec<String>>,
        natural_window: Option<f64>,
        ttl: Option<f64>,
        timeout: Option<f64>,
        max_attempts: Option<u32>,
        has_reconcile: bool,
        key_version: Option<u32>,
        store_args: bool,
    ) -> PyResult<Self> {
        let class = ClassKind::from_str(cls).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let mut spec = ToolSpec::new(leak(name), leak(description));
        spec.key = match key {
            "default" => KeySpec::Default,
            "custom" => KeySpec::Custom,
            "natural" => {
                let fields: Vec<&'static str> = natural_fields
                    .unwrap_or_default()
                    .iter()
                    .map(|f| leak(f))
                    .collect();
                KeySpec::Natural {
                    fields: Box::leak(fields.into_boxed_slice()),
                    window: seconds(natural_window, "a natural key's window")?,
                }
            }
            other => {
                return Err(PyValueError::new_err(format!(
                    "unknown key source `{other}`: default, natural or custom"
                )))
            }
        };
        spec.ttl = seconds(ttl, "ttl")?;
        spec.timeout = seconds(timeout, "timeout")?;
        spec.max_attempts = max_attempts;
        spec.has_reconcile = has_reconcile;
        if let Some(version) = key_version {
            spec.key_version = version;
        }
        spec.store_args = store_args;
        Ok(ToolDefinition {
            spec: Box::leak(Box::new(spec)),
            class,
            func: None,
            is_async: false,
            reconcile: None,
            reconcile_is_async: false,
        })
    }

    /// This definition with the function its calls run, `runner(args,
    /// ctx)`, and the reconcile hook's, if any: what every call of the
    /// tool shares, handed over once rather than with each call.
    #[pyo3(signature = (runner, is_async, reconcile=None, reconcile_is_async=false))]
    fn bind(
        &self,
        runner: Py<PyAny>,
        is_async: bool,
        reconcile: Option<Py<PyAny>>,
        reconcile_is_async: bool,
    ) -> ToolDefinition {
        ToolDefinition {
            spec: self.spec,
            class: self.class,
            func: Some(Arc::new(runner)),
            is_async,
            reconcile: reconcile.map(Arc::new),
            reconcile_is_async,
        }
    }

    /// The tool's name.
    #[getter]
    fn name(&self) -> &'static str {
        self.spec.name
    }

    /// The tool's class, as `tool(cls=…)` spells it.
    #[getter]
    fn cls(&self) -> &'static str {
        self.class.as_str()
    }
}

/// How the function is run.
pub(crate) enum Runner {
    /// From a synchronous `call`. A plain `def` function whose tool sets
    /// no timeout of its own runs inline: on the calling thread, inside
    /// the executor's poll ([`ToolCtx::run_blocking`], which keeps the
    /// lease renewed meanwhile), holding the GIL only while it runs — no
    /// thread switch. One with a timeout, which a function running on the
    /// caller's thread could not be cut short by, and an `async def` one
    /// (by `asyncio.run`), run on a blocking thread.
    Blocking,
    /// From `acall`: an `async def` function on this event loop, a plain
    /// one on a blocking thread.
    Loop(TaskLocals),
}

/// One call of a Python tool.
pub(crate) struct PyCall {
    /// The tool, its function bound ([`ToolDefinition::bind`]).
    pub(crate) def: Py<ToolDefinition>,
    /// The function, `def`'s.
    pub(crate) func: Arc<Py<PyAny>>,
    /// The arguments as the caller gave them (a dict or a model).
    pub(crate) args: Arc<Py<PyAny>>,
    pub(crate) natural: Option<Value>,
    pub(crate) custom: Option<String>,
    pub(crate) runner: Runner,
    pub(crate) run: Option<(String, u64)>,
}

impl PyCall {
    fn definition(&self) -> &ToolDefinition {
        self.def.get()
    }

    /// Run `func(args, ctx)` as [`Runner`] says; its result, as JSON.
    async fn invoke(
        &self,
        func: &Arc<Py<PyAny>>,
        is_async: bool,
        ctx: &ToolCtx,
        edited: Option<&Value>,
    ) -> Result<Value, ToolError> {
        let context = Context::new(ctx, self.run.clone());
        // The caller's own object, or for a call whose arguments an
        // approver edited, the edited JSON the executor hands over (the
        // package's wrapper validates it into the tool's model).
        let args = match edited {
            None => self.args.clone(),
            Some(json) => Python::attach(|py| to_python(py, json).map(|a| Arc::new(a.unbind())))
                .map_err(|e| {
                    ToolError::permanent(format!(
                        "the edited arguments cannot be handed to Python: {e}"
                    ))
                })?,
        };
        let func = func.clone();
        if let (Runner::Loop(locals), true) = (&self.runner, is_async) {
            let future = Python::attach(|py| {
                let start = || {
                    let coroutine = func.call1(py, (args.as_ref(), context))?;
                    pyo3_async_runtimes::into_future_with_locals(locals, coroutine.into_bound(py))
                };
                start().map_err(|e| tool_error(py, e))
            })?;
            let output = future.await;
            return Python::attach(|py| match output {
                Ok(value) => output_json(value.bind(py)),
                Err(e) => Err(tool_error(py, e)),
            });
        }
        let run = move || {
            Python::attach(|py| {
                let run = || -> PyResult<Bound<'_, PyAny>> {
                    let value = func.call1(py, (args.as_ref(), context))?.into_bound(py);
                    if is_async {
                        return py.import("asyncio")?.call_method1("run", (value,));
                    }
                    Ok(value)
                };
                match run() {
                    Ok(value) => output_json(&value),
                    Err(e) => Err(tool_error(py, e)),
                }
            })
        };
        if self.inline(is_async) {
            return ctx.run_blocking(run);
        }
        let joined = tokio::task::spawn_blocking(run).await;
        joined.map_err(|e| ToolError::ambiguous(format!("the Python tool's thread failed: {e}")))?
    }

    /// Whether the function runs inline, on the thread that made the call
    /// (see [`Runner::Blocking`]).
    fn inline(&self, is_async: bool) -> bool {
        matches!(self.runner, Runner::Blocking)
            && !is_async
            && self.definition().spec.timeout.is_none()
    }
}

/// The output of a tool function as JSON: what is recorded and answered
/// to duplicates. One that is not JSON is an ambiguous failure: the
/// function ran, and what it did cannot be recorded.
fn output_json(value: &Bound<'_, PyAny>) -> Result<Value, ToolError> {
    to_json(value, "the output").map_err(|e| {
        ToolError::ambiguous(format!(
            "the tool ran, but its output cannot be recorded: {e}"
        ))
    })
}

/// A Python exception raised by a tool as idem's [`ToolError`]: the kind
/// its `idem_kind` attribute names (`idem_agents.ToolError`'s), else
/// ambiguous — an exception says nothing about whether the effect took
/// place, so a non-idempotent write that raised is an unknown outcome,
/// never re-run.
fn tool_error(py: Python<'_>, error: PyErr) -> ToolError {
    let value = error.value(py);
    let kind = value
        .getattr("idem_kind")
        .ok()
        .and_then(|k| k.extract::<String>().ok());
    let kind = match kind.as_deref() {
        Some("transient") => ErrorKind::Transient,
        Some("permanent") => ErrorKind::Permanent,
        _ => ErrorKind::Ambiguous,
    };
    let name = value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    let text = value.str().map(|s| s.to_string()).unwrap_or_default();
    let message = if kind == ErrorKind::Ambiguous && value.getattr("idem_kind").is_err() {
        format!("{name}: {text}")
    } else {
        text
    };
    let mut tool_error = ToolError::new(kind, idem_runtime::text::clip(&message, 2000));
    if let Some(after) = value
        .getattr("retry_after")
        .ok()
        .and_then(|a| a.extract::<f64>().ok())
        .and_then(|a| Duration::try_from_secs_f64(a).ok())
    {
        tool_error = tool_error.with_retry_after(after);
    }
    if let Some(details) = value
        .getattr("details")
        .ok()
        .filter(|d| !d.is_none())
        .and_then(|d| to_json(&d, "details").ok())
    {
        tool_error = tool_error.with_details(details);
    }
    tool_error
}

impl ToolDef for PyCall {
    // A placeholder: the class is `runtime_class`'s, read by dispatch.
    type Class = NonIdempotentWrite;
    type Args = Value;
    type Output = Value;

    const SPEC: ToolSpec = ToolSpec::new("python", "A tool written in Python.");

    fn runtime_spec(&self) -> &'static ToolSpec {
        self.definition().spec
    }

    fn runtime_class(&self) -> ClassKind {
        self.definition().class
    }

    fn runtime_key_material(&self, _args: &Value) -> Option<KeyMaterial> {
        match &self.definition().spec.key {
            KeySpec::Natural { .. } => self.natural.clone().map(KeyMaterial::Natural),
            KeySpec::Custom => self.custom.clone().map(KeyMaterial::Custom),
            KeySpec::Default => None,
        }
    }
}

impl Tool<()> for PyCall {
    async fn call(&self, args: Value, ctx: &ToolCtx, _state: &()) -> Result<Value, ToolError> {
        let edited = ctx.arguments_edited().then_some(&args);
        self.invoke(&self.func, self.definition().is_async, ctx, edited)
            .await
    }

    async fn reconcile(
        &self,
        args: &Value,
        ctx: &ToolCtx,
        _state: &(),
    ) -> Result<Reconciled<Value>, ToolError> {
        let definition = self.definition();
        let Some(hook) = &definition.reconcile else {
            return Ok(Reconciled::Unknown);
        };
        // The package's wrapper answers `{"applied": output}`,
        // `{"not_applied": true}` or `{"unknown": true}`.
        let answer = self
            .invoke(
                hook,
                definition.reconcile_is_async,
                ctx,
                ctx.arguments_edited().then_some(args),
            )
            .await?;
        Ok(match answer.get("applied") {
            Some(output) => Reconciled::Applied(output.clone()),
            None if answer.get("not_applied").is_some() => Reconciled::NotApplied,
            None => Reconciled::Unknown,
        })
    }
}
