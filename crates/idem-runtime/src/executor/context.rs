//! Where a call comes from ([`RunContext`], [`RepeatWindow`]) and what a
//! caller may set beyond its key source (`CallOptions`).

use std::time::Duration;

#[cfg(doc)]
use super::CallBuilder;
use crate::key::Namespace;
use crate::record::Reason;
use crate::retry::RetryPolicy;

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
    /// Who makes the calls, as authenticated (an MCP caller's principal,
    /// a signed-in user): recorded with a call that waits for approval,
    /// for the approval rules' `forbid_self_approval`. `None`: the
    /// namespace is the principal.
    pub principal: Option<String>,
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
            principal: None,
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

    /// Made by `principal`, as authenticated ([`RunContext::principal`]).
    pub fn principal(mut self, principal: impl Into<String>) -> Self {
        self.principal = Some(principal.into());
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

/// What a call may set beyond its key source.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallOptions {
    /// The retry policy, instead of the tool's default (boxed: every
    /// call's builder carries the option, few set it).
    pub(crate) retry: Option<Box<RetryPolicy>>,
    /// How long to wait for a pending approval, instead of the executor's.
    pub(crate) approval_wait: Option<Duration>,
}
