//! What a running tool knows about its call ([`Context`]): the key to pass
//! downstream, derived sub-keys, the run and step, the attempt.

use idem_runtime::ctx::ToolCtx;
use pyo3::prelude::*;

/// The call a tool function is running for (`ctx` in `def tool(args, ctx)`).
#[pyclass(frozen, module = "idem_agents._native", name = "Context")]
pub(crate) struct Context {
    ctx: ToolCtx,
    run: Option<(String, u64)>,
}

impl Context {
    /// The context of `ctx`, for a call made in `run` (its id and step).
    pub(crate) fn new(ctx: &ToolCtx, run: Option<(String, u64)>) -> Self {
        Context {
            ctx: ctx.clone(),
            run,
        }
    }
}

#[pymethods]
impl Context {
    /// The idempotency key (64 hex digits), to pass downstream as an
    /// `Idempotency-Key` header or a Message-ID; `None` for a read.
    #[getter]
    fn key(&self) -> Option<String> {
        self.ctx.key().map(|k| k.as_str().to_owned())
    }

    /// A key derived from this call's for one of its requests (`label`
    /// names it), the same on every attempt and every replay.
    fn sub_key(&self, label: &str) -> Option<String> {
        self.ctx.sub_key(label).map(|k| k.as_str().to_owned())
    }

    /// The tool's name.
    #[getter]
    fn tool(&self) -> &'static str {
        self.ctx.tool()
    }

    /// The tool's class.
    #[getter]
    fn cls(&self) -> &'static str {
        self.ctx.class().as_str()
    }

    /// The tenant the call is keyed in.
    #[getter]
    fn namespace(&self) -> String {
        self.ctx.namespace().as_str().to_owned()
    }

    /// The model's call id, when the call has one.
    #[getter]
    fn call_id(&self) -> Option<String> {
        self.ctx.call_id().map(str::to_owned)
    }

    /// The agent run the call belongs to, when it was made with one.
    #[getter]
    fn run_id(&self) -> Option<String> {
        self.run.as_ref().map(|(id, _)| id.clone())
    }

    /// The run's step that made the call (0 without a run).
    #[getter]
    fn step(&self) -> u64 {
        self.run.as_ref().map_or(0, |(_, step)| *step)
    }

    /// This attempt's number, from 1.
    #[getter]
    fn attempt(&self) -> u32 {
        self.ctx.attempt()
    }

    /// Whether the call no longer owns its key (its lease was lost to a
    /// newer owner): a long tool checks it between requests and stops.
    #[getter]
    fn superseded(&self) -> bool {
        self.ctx.is_superseded()
    }

    fn __repr__(&self) -> String {
        format!(
            "Context(tool={:?}, key={:?}, attempt={})",
            self.ctx.tool(),
            self.key(),
            self.ctx.attempt()
        )
    }
}
