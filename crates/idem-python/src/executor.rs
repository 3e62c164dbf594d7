//! The executor as Python sees it: opened on a store URL, it runs the
//! calls of decorated functions with the guarantees of their class.

use std::sync::Arc;

use idem_runtime::approval::{AllowList, Approval, ApprovalDecision, Callback, DenyAll};
use idem_runtime::dispatch::{check_arguments, Arguments, DEFAULT_MAX_ARGUMENT_BYTES};
use idem_runtime::error::IdemError;
use idem_runtime::executor::{CallOutput, InFlightPolicy, RepeatWindow, RunContext};
use idem_runtime::key::Namespace;
use idem_runtime::registry::DynTool;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use pyo3_async_runtimes::TaskLocals;
use serde_json::Value;

use crate::block::block_on;
use crate::errors;
use crate::json::{to_json, to_python};
use crate::tool::{seconds, PyCall, Runner, ToolDefinition};

/// The tokio runtime every executor of the process shares (the one
/// pyo3-async-runtimes runs `acall`'s futures on).
fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// Runs tool calls through idem's executor, on one store.
#[pyclass(frozen, module = "idem_agents._native", name = "Executor")]
pub(crate) struct Executor {
    inner: idem_runtime::Executor<()>,
}

/// A successful call's output and how it was obtained.
#[pyclass(frozen, module = "idem_agents._native", name = "CallResult")]
pub(crate) struct CallResult {
    /// The tool's output (a duplicate's: the recorded one).
    #[pyo3(get)]
    output: Py<PyAny>,
    /// Whether the output is an earlier call's recorded result (the tool
    /// did not run).
    #[pyo3(get)]
    deduplicated: bool,
    /// The idempotency key (`None` for a read).
    #[pyo3(get)]
    key: Option<String>,
    /// Attempts this call made (0 when deduplicated).
    #[pyo3(get)]
    attempts: u32,
    /// The tool.
    #[pyo3(get)]
    tool: &'static str,
    /// The tool's class.
    #[pyo3(get)]
    cls: &'static str,
    /// Set when an approver edited the arguments before approving:
    /// `{"by", "original_key", "arguments"}`, the arguments the call ran
    /// with; the arguments as called never ran. `None` otherwise.
    #[pyo3(get)]
    edited: Option<Py<PyAny>>,
}

#[pymethods]
impl CallResult {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "CallResult(tool={:?}, deduplicated={}, attempts={}, key={}, output={})",
            self.tool,
            if self.deduplicated { "True" } else { "False" },
            self.attempts,
            self.key
                .as_deref()
                .map_or("None".into(), |k| format!("{k:?}")),
            self.output.bind(py).repr()?
        ))
    }
}

/// What a call's Python side hands over besides the function itself.
#[derive(Default)]
struct CallSite {
    call_id: Option<String>,
    run: RunContext,
    run_step: Option<(String, u64)>,
}

fn namespace(name: &str) -> PyResult<Namespace> {
    Namespace::new(name).map_err(|e| PyValueError::new_err(format!("namespace: {e}")))
}

/// The approval policy `approvals` names: `"deny"`, `"pending"` (a person
/// decides later, with `idem approve` or the inbox), a list of the tools
/// approved without asking, or a function of the request returning
/// `("approved", by)`, `("denied", reason)` or `("pending", message)`.
fn approvals(
    builder: idem_runtime::executor::ExecutorBuilder<()>,
    approvals: &Bound<'_, PyAny>,
) -> PyResult<idem_runtime::executor::ExecutorBuilder<()>> {
    if approvals.is_none() {
        return Ok(builder);
    }
    if let Ok(word) = approvals.cast::<PyString>() {
        return match word.to_str()? {
            "deny" => Ok(builder.approvals(DenyAll)),
            "pending" => Ok(builder.approvals(Callback::new(|_| async {
                Ok(ApprovalDecision::Pending {
                    message: "waiting for a person: `idem approve KEY` or the inbox".into(),
                })
            }))),
            other => Err(PyValueError::new_err(format!(
                "approvals={other:?}: \"deny\", \"pending\", a list of tool names or a function"
            ))),
        };
    }
    if let Ok(list) = approvals.cast::<PyList>() {
        let tools: Vec<String> = list.extract()?;
        return Ok(builder.approvals(AllowList::new(tools)));
    }
    if !approvals.is_callable() {
        return Err(PyTypeError::new_err(
            "approvals: \"deny\", \"pending\", a list of tool names or a function",
        ));
    }
    let decide = Arc::new(approvals.clone().unbind());
    Ok(builder.approvals(Callback::new(move |request| {
        let decide = decide.clone();
        async move {
            let asked = tokio::task::spawn_blocking(move || {
                Python::attach(|py| -> PyResult<(String, String)> {
                    let info = PyDict::new(py);
                    info.set_item("tool", &request.tool)?;
                    info.set_item("key", request.key.as_str())?;
                    info.set_item("namespace", request.namespace.as_str())?;
                    info.set_item("call_id", request.call_id.as_deref())?;
                    info.set_item("arguments", to_python(py, &request.args)?)?;
                    decide.call1(py, (info,))?.extract(py)
                })
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("the approval function failed: {e}"))?;
            Ok(match asked.0.as_str() {
                "approved" => ApprovalDecision::Approved(Approval::granted_by(asked.1)),
                "pending" => ApprovalDecision::Pending { message: asked.1 },
                _ => ApprovalDecision::Denied { reason: asked.1 },
            })
        }
    })))
}

#[pymethods]
impl Executor {
    /// An executor on the store `store` names (`sqlite://idem.db`,
    /// `memory:`, `redis://…`, `postgres://…`).
    #[new]
    #[pyo3(signature = (store, *, namespace=None, approvals=None, lease=None, ttl=None, timeout=None, reject_in_flight=false, worker=None, approval_wait=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        store: &str,
        namespace: Option<&str>,
        approvals: Option<&Bound<'_, PyAny>>,
        lease: Option<f64>,
        ttl: Option<f64>,
        timeout: Option<f64>,
        reject_in_flight: bool,
        worker: Option<String>,
        approval_wait: Option<f64>,
    ) -> PyResult<Self> {
        let url = store.to_owned();
        let opened = py.detach(|| block_on(runtime(), idem::store::connect(&url)));
        let store = opened.map_err(|e| errors::store_error(py, &e))?;
        let mut builder = idem_runtime::Executor::builder_shared(store);
        if let Some(name) = namespace {
            builder = builder.namespace(self::namespace(name)?);
        }
        if let Some(lease) = seconds(lease, "lease")? {
            builder = builder.lease(lease);
        }
        if let Some(ttl) = seconds(ttl, "ttl")? {
            builder = builder.ttl(ttl);
        }
        if let Some(timeout) = seconds(timeout, "timeout")? {
            builder = builder.timeout(timeout);
        }
        if let Some(wait) = seconds(approval_wait, "approval_wait")? {
            builder = builder.approval_wait(wait);
        }
        if reject_in_flight {
            builder = builder.on_in_flight(InFlightPolicy::Reject);
        }
        if let Some(worker) = worker {
            builder = builder.worker(worker);
        }
        if let Some(policy) = approvals {
            builder = self::approvals(builder, policy)?;
        }
        Ok(Executor {
            inner: builder.build(),
        })
    }

    /// The store, described without its password.
    #[getter]
    fn store(&self) -> String {
        self.inner.store().describe()
    }

    /// Whether this executor replays (writes answer from their records
    /// and never run).
    #[getter]
    fn replaying(&self) -> bool {
        self.inner.is_replaying()
    }

    /// An executor on the same store that performs no side effects.
    fn replay(&self) -> Executor {
        Executor {
            inner: self.inner.replaying(),
        }
    }

    /// Run one call and wait for it (`idem_agents.Executor.call` makes
    /// `request`).
    fn call(&self, py: Python<'_>, request: Request<'_>) -> PyResult<CallResult> {
        let (call, json, site) = prepare(py, request, Runner::Blocking)?;
        let exec = &self.inner;
        let done = py.detach(|| {
            block_on(
                runtime(),
                call.call_json(exec, json, site.call_id, site.run),
            )
        });
        finish(py, &call, done)
    }

    /// Run one call from asyncio: an awaitable of the call's result.
    fn acall<'py>(&self, py: Python<'py>, request: Request<'py>) -> PyResult<Bound<'py, PyAny>> {
        let locals = TaskLocals::with_running_loop(py)?.copy_context(py)?;
        let (call, json, site) = prepare(py, request, Runner::Loop(locals))?;
        let exec = self.inner.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let done = call.call_json(&exec, json, site.call_id, site.run).await;
            Python::attach(|py| finish(py, &call, done))
        })
    }
}

/// A call as `idem_agents.Executor` hands it over, a tuple: the tool's
/// definition (bound to its function), the arguments as given and as
/// JSON, the natural and the custom key material, then the site —
/// `call_id`, `run_id`, `step`, `namespace`, `reason`, `window` (seconds),
/// `repeat`. A tuple, not keywords: it is read on every call.
#[derive(FromPyObject)]
pub(crate) struct Request<'py>(
    Py<ToolDefinition>,
    Py<PyAny>,
    Bound<'py, PyAny>,
    Option<Bound<'py, PyAny>>,
    Option<String>,
    Option<String>,
    Option<String>,
    u64,
    Option<String>,
    Option<String>,
    Option<f64>,
    u32,
);

/// The call `request` describes: the tool's definition, bound to its
/// function and reconcile hook; its arguments as JSON; its site.
fn prepare(
    py: Python<'_>,
    request: Request<'_>,
    runner: Runner,
) -> PyResult<(PyCall, Value, CallSite)> {
    let Request(
        definition,
        args,
        json_args,
        natural,
        custom,
        call_id,
        run_id,
        step,
        namespace,
        reason,
        window,
        repeat,
    ) = request;
    let site = call_site(
        call_id,
        run_id,
        step,
        namespace.as_deref(),
        reason,
        window,
        repeat,
    )?;
    let func = definition
        .get()
        .func
        .clone()
        .ok_or_else(|| PyTypeError::new_err("the tool's definition is bound to no function"))?;
    let json = arguments(py, &definition, &json_args)?;
    let natural = natural
        .filter(|n| !n.is_none())
        .map(|n| to_json(&n, "the natural key"))
        .transpose()?;
    let call = PyCall {
        def: definition,
        func,
        args: Arc::new(args),
        natural,
        custom,
        runner,
        run: site.run_step.clone(),
    };
    Ok((call, json, site))
}

/// The call's arguments as JSON, checked as the dispatcher checks a
/// model's ([`check_arguments`]); arguments JSON cannot hold (`NaN`, a
/// key that is not text, an object of no JSON type) are idem's
/// `invalid_arguments`, larger ones than 64 KiB `arguments_too_large`,
/// before anything runs.
fn arguments(
    py: Python<'_>,
    definition: &Py<ToolDefinition>,
    json_args: &Bound<'_, PyAny>,
) -> PyResult<Value> {
    let tool = definition.get().spec.name;
    let json = to_json(json_args, "args").map_err(|e| {
        let detail = e.value(py).to_string();
        let error = IdemError::InvalidArguments {
            tool: tool.to_owned(),
            detail,
        };
        errors::to_py(py, error, tool)
    })?;
    // The dispatcher's checks: the size limit, an object, integral floats
    // as integers — the same bad input, the same error as from a model.
    check_arguments(tool, Arguments::Json(json), DEFAULT_MAX_ARGUMENT_BYTES)
        .map_err(|e| errors::to_py(py, e, tool))
}

#[allow(clippy::too_many_arguments)]
fn call_site(
    call_id: Option<String>,
    run_id: Option<String>,
    step: u64,
    namespace: Option<&str>,
    reason: Option<String>,
    window: Option<f64>,
    repeat: u32,
) -> PyResult<CallSite> {
    let mut run = match &run_id {
        Some(id) => RunContext::new(id.clone(), step),
        None => RunContext::default(),
    };
    if let Some(name) = namespace {
        run = run.namespace(self::namespace(name)?);
    }
    if let Some(reason) = reason {
        run = run.reason(reason);
    }
    if let Some(window) = seconds(window, "window")? {
        run = run.repeat_window(RepeatWindow::new(window).repeat(repeat));
    }
    Ok(CallSite {
        call_id,
        run,
        run_step: run_id.map(|id| (id, step)),
    })
}

/// A finished call as Python: its [`CallResult`], or the exception of
/// its error.
fn finish(
    py: Python<'_>,
    call: &PyCall,
    done: Result<CallOutput<Value>, IdemError>,
) -> PyResult<CallResult> {
    let name = call.def.get().spec.name;
    match done {
        Ok(called) => Ok(CallResult {
            output: to_python(py, &called.output)?.unbind(),
            deduplicated: called.meta.deduplicated,
            key: called.meta.key.map(|k| k.as_str().to_owned()),
            attempts: called.meta.attempts,
            tool: called.meta.tool,
            cls: called.meta.class.as_str(),
            edited: match called.meta.edited {
                Some(edit) => Some(
                    to_python(
                        py,
                        &serde_json::json!({
                            "by": edit.by,
                            "original_key": edit.original.as_str(),
                            "arguments": edit.arguments,
                        }),
                    )?
                    .unbind(),
                ),
                None => None,
            },
        }),
        Err(e) => Err(errors::to_py(py, e, name)),
    }
}
