//! A typed call being set up ([`CallBuilder`]) and awaited
//! ([`CallFuture`]).

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::class::RetrySafe;
use crate::error::IdemError;
use crate::key::Namespace;
use crate::record::Reason;
use crate::retry::RetryPolicy;
use crate::tool::{Tool, ToolDef};

use super::context::{CallOptions, RunContext};
use super::env::ApprovalSource;
use super::output::CallOutput;
use super::pipeline::Begun;
use super::Executor;

/// A typed call being set up; `.await` it.
#[must_use = "a call does nothing until awaited"]
pub struct CallBuilder<'e, S, T: ToolDef> {
    exec: &'e Executor<S>,
    tool: T,
    args: T::Args,
    /// The provider's call id (not named `call_id`: rustc would point at a
    /// private field when the method `call_id` is not available).
    provider_id: Option<String>,
    run: RunContext,
    options: CallOptions,
    approval: ApprovalSource,
}

impl<'e, S: Send + Sync + 'static, T: Tool<S>> CallBuilder<'e, S, T> {
    pub(super) fn new(
        exec: &'e Executor<S>,
        tool: T,
        args: T::Args,
        approval: ApprovalSource,
    ) -> Self {
        CallBuilder {
            exec,
            tool,
            args,
            provider_id: None,
            run: RunContext::default(),
            options: CallOptions::default(),
            approval,
        }
    }

    /// The provider's tool-call id: the key source.
    pub fn call_id(mut self, id: impl Into<String>) -> Self {
        self.provider_id = Some(id.into());
        self
    }

    /// The run and step that make this call: the key source when there is no
    /// call id.
    pub fn run(mut self, run_id: impl Into<String>, step: u64) -> Self {
        self.run.run_id = Some(run_id.into());
        self.run.step = step;
        self
    }

    /// The tenant / principal.
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.run.namespace = Some(namespace);
        self
    }

    /// Why the call is made, in the caller's words (the model's text that
    /// led to it): recorded with the call when this claims its key first,
    /// and shown to whoever decides on it ([`Reason`]: cut when long).
    pub fn reason(mut self, text: impl Into<String>) -> Self {
        self.run.reason = Reason::new(text);
        self
    }

    /// The run, step, tenant and reason at once (replacing any set
    /// before).
    pub fn context(mut self, run: RunContext) -> Self {
        self.run = run;
        self
    }

    /// Retry with this policy. Only retry-safe classes (`read`,
    /// `idempotent_write`) may be retried.
    pub fn retry(mut self, policy: RetryPolicy) -> Self
    where
        T::Class: RetrySafe,
    {
        self.options.retry = Some(Box::new(policy));
        self
    }

    /// When this call's approval is pending, wait up to `wait` for a
    /// person's decision (then run under the approval, or return the
    /// denial) instead of returning [`IdemError::ApprovalPending`] at once.
    /// Waiting holds no lease: the decision may come from any process.
    pub fn wait_for_approval(mut self, wait: std::time::Duration) -> Self
    where
        T::Class: crate::class::NeedsApproval,
    {
        self.options.approval_wait = Some(wait);
        self
    }
}

impl<'e, S: Send + Sync + 'static, T: Tool<S>> IntoFuture for CallBuilder<'e, S, T> {
    type Output = Result<CallOutput<T::Output>, IdemError>;
    type IntoFuture = CallFuture<'e, T::Output>;

    /// Derives the key and, on a store that answers on this thread (the
    /// in-memory store; SQLite for a duplicate), claims it right here: a
    /// duplicate is then answered without a boxed future.
    fn into_future(self) -> Self::IntoFuture {
        let exec = self.exec;
        match exec.start(
            &self.tool,
            self.args,
            self.provider_id,
            self.run,
            self.options,
            self.approval,
        ) {
            Begun::Done(result) => CallFuture(Inner::Ready(Some(result))),
            Begun::Running(rest) => {
                CallFuture(Inner::Running(exec.finish::<T, T>(self.tool, rest)))
            }
        }
    }
}

/// The future of an awaited [`CallBuilder`]: ready at once when the call
/// was answered without waiting (a duplicate on the in-memory store),
/// otherwise the call's remaining phases.
#[must_use = "futures do nothing unless polled"]
pub struct CallFuture<'e, O>(Inner<'e, O>);

enum Inner<'e, O> {
    Ready(Option<Result<CallOutput<O>, IdemError>>),
    Running(Pin<Box<dyn Future<Output = Result<CallOutput<O>, IdemError>> + Send + 'e>>),
}

// The output is moved out, never pinned in place.
impl<O> Unpin for CallFuture<'_, O> {}

impl<O> Future for CallFuture<'_, O> {
    type Output = Result<CallOutput<O>, IdemError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            Inner::Ready(result) => {
                Poll::Ready(result.take().expect("CallFuture polled after it completed"))
            }
            Inner::Running(future) => future.as_mut().poll(cx),
        }
    }
}

impl<O> std::fmt::Debug for CallFuture<'_, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            Inner::Ready(_) => "CallFuture(ready)",
            Inner::Running(_) => "CallFuture(running)",
        })
    }
}
