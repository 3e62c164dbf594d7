//! A typed call being set up ([`CallBuilder`]), where it comes from
//! ([`RunContext`]), and what it returns ([`CallOutput`]).

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::class::{ClassKind, RetrySafe};
use crate::error::IdemError;
use crate::key::{IdempotencyKey, Namespace};
use crate::record::Reason;
use crate::retry::RetryPolicy;
use crate::tool::{Tool, ToolDef};

use super::env::ApprovalSource;
use super::pipeline::Begun;
use super::Executor;

/// Where calls come from: the agent run and its step (the key source of a
/// call without a provider call id), the tenant, and why the calls were
/// made.
///
/// The dispatcher takes one for a batch of model tool calls; a typed call
/// takes one with [`CallBuilder::context`] (or its parts with
/// [`CallBuilder::run`] and [`CallBuilder::namespace`]).
///
/// ```
/// use idem_runtime::{Namespace, RunContext};
///
/// let run = RunContext::new("run-42", 3)
///     .namespace(Namespace::new("acme").unwrap())
///     .reason("The customer asked to close the account.");
/// assert_eq!(run.run_id.as_deref(), Some("run-42"));
/// assert_eq!(run.reason.unwrap().as_str(), "The customer asked to close the account.");
/// ```
///
/// Made with [`RunContext::new`] or [`RunContext::default`] and the
/// methods below: it gains a field now and then, so it cannot be written as
/// a struct literal outside idem.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunContext {
    /// The agent run.
    pub run_id: Option<String>,
    /// The run's step that produced the calls.
    pub step: u64,
    /// The tenant / principal (the executor's default when `None`).
    pub namespace: Option<Namespace>,
    /// For a call with neither a call id nor a run: key it by the window
    /// of time it falls in, so that the same tool with the same arguments
    /// within the window is one effect ([`RepeatWindow`]). `None`: such a
    /// write is refused, as it always was.
    pub repeat_window: Option<RepeatWindow>,
    /// Why the calls are made, in the caller's words (the model's text
    /// beside its tool calls): recorded with each call that this claims
    /// first, shown to whoever decides on it. Never part of the key.
    pub reason: Option<Reason>,
}

impl RunContext {
    /// Step `step` of run `run_id`.
    pub fn new(run_id: impl Into<String>, step: u64) -> Self {
        RunContext {
            run_id: Some(run_id.into()),
            step,
            namespace: None,
            repeat_window: None,
            reason: None,
        }
    }

    /// For tenant `namespace`.
    pub fn namespace(mut self, namespace: Namespace) -> Self {
        self.namespace = Some(namespace);
        self
    }

    /// Key a call that has neither a call id nor a run by `window`.
    pub fn repeat_window(mut self, window: RepeatWindow) -> Self {
        self.repeat_window = Some(window);
        self
    }

    /// Why the calls are made ([`Reason`]: cut when long; blank text is
    /// no reason).
    pub fn reason(mut self, text: impl Into<String>) -> Self {
        self.reason = Reason::new(text);
        self
    }
}

/// How a write that carries no key of its own is keyed: by what it does.
/// The same tool with the same canonical arguments, called again within
/// `within` of the first such call's outcome, is the same effect: the
/// later calls are answered from the first one's record (or wait for it,
/// or share its approval) and nothing runs twice.
///
/// This is for callers that cannot send a key, like the chat clients of an
/// MCP server: a model that repeats a call "to be sure", or a client that
/// re-sends a request after a dropped connection, gets the first result.
/// Three rules make it safe for every write class:
///
/// - **A call in between ends the window.** A call of the same tool (in
///   the same namespace) with other arguments is a change of mind:
///   `set_status(open)`, `set_status(closed)`, `set_status(open)` runs
///   three times, while `send_email(x)` twice runs once.
/// - **An unsettled effect never lapses.** While the first call is in
///   flight, awaiting a person's approval, or of unknown outcome, an
///   identical call follows it however late it comes and whatever came in
///   between: it waits, shares the approval, or is refused as unknown;
///   it never becomes a second effect.
/// - **The window is measured from the effect's outcome**, not from a
///   clock boundary: a retry one second after a call that ran for a
///   minute is a duplicate.
///
/// A caller that means a second identical effect says so with
/// [`RepeatWindow::repeat`]. The executor keeps, per namespace and tool, a
/// small index record (tool `idem:window:TOOL`) naming the current
/// effects; it reads it on every windowed call and changes it (one
/// compare-and-swap) when an effect begins. A window longer than the
/// tool's TTL is cut to it.
///
/// ```
/// use std::time::Duration;
/// use idem_runtime::{RepeatWindow, RunContext};
///
/// let run = RunContext::default().repeat_window(RepeatWindow::new(Duration::from_secs(600)));
/// assert_eq!(run.repeat_window.unwrap().within, Duration::from_secs(600));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepeatWindow {
    /// How long after an effect's outcome an identical call is the same
    /// effect (whole seconds; at least one).
    pub within: Duration,
    /// How many identical effects the caller meant before this one: 0 for
    /// the first, 1 for a deliberate second, and so on. Each is its own
    /// effect, deduplicated within the window like the first.
    pub repeat: u32,
}

impl RepeatWindow {
    /// Calls within `within` of the first are one effect.
    pub fn new(within: Duration) -> Self {
        RepeatWindow { within, repeat: 0 }
    }

    /// This call is the `repeat`-th deliberate repetition of an identical
    /// effect (1: the second email of the same text).
    pub fn repeat(mut self, repeat: u32) -> Self {
        self.repeat = repeat;
        self
    }
}

/// What a successful call returns: the output and how it was obtained.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutput<T> {
    /// The tool's output (the recorded output for a duplicate).
    pub output: T,
    /// How it was obtained.
    pub meta: CallMeta,
}

/// How a call was carried out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct CallMeta {
    /// The tool.
    pub tool: &'static str,
    /// Its class.
    pub class: ClassKind,
    /// The idempotency key (`None` for reads).
    pub key: Option<IdempotencyKey>,
    /// The output is an earlier call's recorded result; the tool did not run.
    pub deduplicated: bool,
    /// Attempts made by this call (0 when deduplicated).
    pub attempts: u32,
}

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

/// What a call may set beyond its key source.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallOptions {
    /// The retry policy, instead of the tool's default (boxed: every
    /// call's builder carries the option, few set it).
    pub(crate) retry: Option<Box<RetryPolicy>>,
    /// How long to wait for a pending approval, instead of the executor's.
    pub(crate) approval_wait: Option<Duration>,
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
