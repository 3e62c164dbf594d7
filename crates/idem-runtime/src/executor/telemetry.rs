//! How a call's end is told: the fields of its `execute_tool` span (the
//! OpenTelemetry GenAI conventions' names, and idem's own under `idem.*`),
//! and, with the `otel` feature, OpenTelemetry instruments.
//!
//! The span's fields are listed in `doc/telemetry.md`; what this module
//! decides is the outcome a call ended with, from its result and two facts
//! the phases gathered on the way (whether the tool body ran, whether the
//! call joined another call of its key in flight).

use crate::class::ClassKind;
use crate::error::IdemError;
use crate::key::{IdempotencyKey, Namespace};
use crate::record::Fence;
use crate::tool::ToolSpec;
use std::sync::atomic::Ordering;

use super::env::{CallEnv, Progress};
use super::metrics::Metrics;
use super::output::CallOutput;

/// The value of `gen_ai.operation.name`, and the first word of the span's
/// OpenTelemetry name.
pub(super) const OPERATION: &str = "execute_tool";

/// The OpenTelemetry name of a tool's spans, `execute_tool {tool}`, made
/// once per tool name and kept: a span's name is then a `&'static str`,
/// not text formatted for every call.
pub(super) fn span_name(tool: &'static str) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{LazyLock, RwLock};

    // Bounded by the tool names a process calls (an `idem proxy` learns
    // its upstream's names once).
    static NAMES: LazyLock<RwLock<HashMap<&'static str, &'static str>>> =
        LazyLock::new(RwLock::default);
    if let Some(name) = NAMES.read().unwrap_or_else(|p| p.into_inner()).get(tool) {
        return name;
    }
    let mut names = NAMES.write().unwrap_or_else(|p| p.into_inner());
    names
        .entry(tool)
        .or_insert_with(|| String::leak(format!("{OPERATION} {tool}")))
}

/// The call's `execute_tool` span, with the fields known at its start (the
/// OpenTelemetry GenAI names, and idem's own) and those its phases fill in
/// as they learn them.
pub(super) fn span(
    spec: &ToolSpec,
    class: ClassKind,
    call_id: Option<&str>,
    namespace: &Namespace,
) -> tracing::Span {
    tracing::info_span!(
        "execute_tool",
        // The span's kind is INTERNAL, the default.
        otel.name = span_name(spec.name),
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        gen_ai.operation.name = OPERATION,
        gen_ai.tool.name = spec.name,
        gen_ai.tool.type = "function",
        gen_ai.tool.description = spec.description,
        gen_ai.tool.call.id = call_id,
        error.type = tracing::field::Empty,
        idem.class = class.as_str(),
        idem.namespace = namespace.as_str(),
        idem.key = tracing::field::Empty,
        idem.outcome = tracing::field::Empty,
        idem.refusal = tracing::field::Empty,
        idem.attempts = tracing::field::Empty,
        idem.takeover = tracing::field::Empty,
        idem.fence = tracing::field::Empty,
        idem.approver = tracing::field::Empty,
    )
}

/// What idem decided about a call, as `idem.outcome` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// The tool body ran (successfully or not).
    Executed,
    /// Answered from the record of an earlier call; nothing ran.
    Deduplicated,
    /// Waited for another call of the same key in flight and answered
    /// from its outcome; nothing ran.
    Joined,
    /// Refused before the tool ran (key reused, in flight, store
    /// unavailable…); the reason is the error's code.
    Refused,
    /// The outcome could not be known (recorded as unknown, or a duplicate
    /// of such a call).
    Unknown,
    /// Left awaiting a person's approval.
    AwaitingApproval,
    /// The approval was denied.
    Denied,
}

impl Ended {
    pub(super) const fn as_str(self) -> &'static str {
        match self {
            Ended::Executed => "executed",
            Ended::Deduplicated => "deduplicated",
            Ended::Joined => "joined",
            Ended::Refused => "refused",
            Ended::Unknown => "unknown",
            Ended::AwaitingApproval => "awaiting_approval",
            Ended::Denied => "denied",
        }
    }
}

/// Tell the span the call's key, when a subscriber records it (the key
/// is spelled out only then).
pub(super) fn tell_key(env: &CallEnv<'_>, key: &IdempotencyKey) {
    if !env.span.is_disabled() {
        env.span.record("idem.key", key.as_str());
    }
}

/// Tell the span that the call owns its key with `fence` (`takeover`:
/// from an owner that vanished) as soon as it does (a call that is then
/// cancelled tells it too): with its key when both are known at once,
/// in one record.
pub(super) fn tell_owner(
    env: &CallEnv<'_>,
    key: Option<&IdempotencyKey>,
    fence: Fence,
    takeover: bool,
) {
    if env.span.is_disabled() {
        return;
    }
    tracing::record_all!(
        env.span,
        idem.key = key.map(IdempotencyKey::as_str),
        idem.fence = fence.0,
        idem.takeover = takeover.then_some(true),
    );
}

/// How a call ended, in the span's and the instruments' terms.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ending {
    pub(super) outcome: Ended,
    /// `error.type`: the error's code (`_OTHER` never arises: every idem
    /// error has a code). `None` when the call succeeded or awaits an
    /// approval (not a failure: the caller is told to wait).
    pub(super) error_type: Option<&'static str>,
    /// `idem.refusal`: why idem refused the call.
    pub(super) refusal: Option<&'static str>,
}

/// Classify a call's result. `ran`: the tool body ran at least once;
/// `joined`: the call followed another call of its key in flight.
pub(super) fn classify<O>(
    result: &Result<CallOutput<O>, IdemError>,
    ran: bool,
    joined: bool,
) -> Ending {
    let answered = if joined {
        Ended::Joined
    } else {
        Ended::Deduplicated
    };
    let e = match result {
        Ok(c) => {
            return Ending {
                outcome: if c.meta.deduplicated {
                    answered
                } else {
                    Ended::Executed
                },
                error_type: None,
                refusal: None,
            }
        }
        Err(e) => e,
    };
    let code = e.code().as_str();
    let outcome = match e {
        IdemError::ApprovalPending { .. } => {
            return Ending {
                outcome: Ended::AwaitingApproval,
                error_type: None,
                refusal: None,
            }
        }
        _ if e.is_deduplicated() => answered,
        IdemError::OutcomeUnknown { .. } => Ended::Unknown,
        IdemError::ApprovalDenied { .. } => Ended::Denied,
        _ if ran => Ended::Executed,
        _ => Ended::Refused,
    };
    Ending {
        outcome,
        error_type: Some(code),
        refusal: (outcome == Ended::Refused).then_some(code),
    }
}

/// The counters a call adds to on its way, beside how it ended.
#[derive(Debug, Clone, Copy)]
pub(super) enum Count {
    Takeover,
    UnknownOutcome,
    ApprovalRequested,
    ApprovalGranted,
    ApprovalDenied,
    StoreError,
}

/// The field of `$of` (the counters, or their instruments) that counts
/// `$what`: the two are named alike.
macro_rules! counted_in {
    ($of:expr, $what:expr) => {
        match $what {
            Count::Takeover => &$of.takeovers,
            Count::UnknownOutcome => &$of.unknown_outcomes,
            Count::ApprovalRequested => &$of.approvals_requested,
            Count::ApprovalGranted => &$of.approvals_granted,
            Count::ApprovalDenied => &$of.approvals_denied,
            Count::StoreError => &$of.store_errors,
        }
    };
}

/// Add one to a counter (and its instrument, with the call's tool and
/// class).
pub(super) fn count(env: &CallEnv<'_>, what: Count) {
    let m = env.metrics();
    Metrics::bump(counted_in!(m, what));
    #[cfg(feature = "otel")]
    {
        let o = &m.otel;
        o.add(counted_in!(o, what), env.spec.name, env.class);
    }
}

/// Record how the call ended on its span and in the instruments.
pub(super) fn end<O>(
    env: &CallEnv<'_>,
    result: &Result<CallOutput<O>, IdemError>,
    progress: &Progress,
) {
    end_keyed(env, result, progress, None);
}

/// [`end`], recording `idem.key` too when the call's key
/// was not recorded yet (a call answered without awaiting).
pub(super) fn end_keyed<O>(
    env: &CallEnv<'_>,
    result: &Result<CallOutput<O>, IdemError>,
    progress: &Progress,
    key: Option<&IdempotencyKey>,
) {
    let attempts = progress.attempts.load(Ordering::Relaxed);
    let joined = progress.joined.load(Ordering::Relaxed);
    let ending = classify(result, attempts > 0, joined);
    let span = &env.span;
    if !span.is_disabled() {
        // One record for all of them: each record is a walk through
        // every layer (the OpenTelemetry one locks the span each time).
        // `None` fields are left out.
        let failed = ending.error_type.is_some();
        tracing::record_all!(
            span,
            idem.key = key.map(IdempotencyKey::as_str),
            idem.outcome = ending.outcome.as_str(),
            idem.attempts = attempts,
            idem.refusal = ending.refusal,
            error.type = ending.error_type,
            otel.status_code = failed.then_some("ERROR"),
            otel.status_description = result
                .as_ref()
                .err()
                .filter(|_| failed)
                .map(tracing::field::display),
        );
    }
    #[cfg(feature = "otel")]
    env.core.metrics.otel.call_ended(
        (env.spec.name, env.class),
        super::instruments::EndAttributes {
            outcome: ending.outcome.as_str(),
            error_type: ending.error_type,
            refusal: ending.refusal,
        },
        env.started.elapsed(),
    );
}
