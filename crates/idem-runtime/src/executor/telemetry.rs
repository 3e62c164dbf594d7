//! How a call's end is told: the fields of its `execute_tool` span (the
//! OpenTelemetry GenAI conventions' names, and idem's own under `idem.*`),
//! and, with the `otel` feature, OpenTelemetry instruments.
//!
//! The span's fields are listed in `doc/telemetry.md`; what this module
//! decides is the outcome a call ended with, from its result and two facts
//! the phases gathered on the way (whether the tool body ran, whether the
//! call joined another call of its key in flight).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::class::ClassKind;
use crate::error::IdemError;
use crate::key::{IdempotencyKey, Namespace};
use crate::record::Fence;
use crate::tool::ToolSpec;

use super::call::CallOutput;
use super::env::CallEnv;
use super::metrics::Metrics;

/// The two facts about a call that its phases gather on the way and that
/// only its end tells: how many attempts of the tool body it made, and
/// whether it answered from another call of its key in flight. Atomics,
/// because the phases that learn them hold the call by shared reference.
#[derive(Debug, Default)]
pub(super) struct Progress {
    /// Attempts of the tool body this call made (0: it never ran).
    attempts: AtomicU32,
    /// Set when this call waited for another call of its key in flight
    /// (in this process or another) and answers from its outcome.
    joined: AtomicBool,
}

impl Progress {
    /// The tool body has run `attempts` times.
    pub(super) fn attempted(&self, attempts: u32) {
        self.attempts.store(attempts, Ordering::Relaxed);
    }

    /// The call answers from another call of its key.
    pub(super) fn joined(&self) {
        self.joined.store(true, Ordering::Relaxed);
    }
}

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
        o.add(counted_in!(o, what), env);
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
    env.core
        .metrics
        .otel
        .call_ended(env, &ending, env.started.elapsed());
}

#[cfg(feature = "otel")]
pub use instruments::{Meter, OTEL_SCOPE};

#[cfg(feature = "otel")]
pub(super) use instruments::Instruments;

#[cfg(feature = "otel")]
mod instruments {
    use std::time::Duration;

    use opentelemetry::metrics::{Counter, Histogram};
    use opentelemetry::KeyValue;

    use super::Ending;
    use crate::executor::env::CallEnv;

    pub use opentelemetry::metrics::Meter;

    /// The instrumentation scope idem's meter is named for (with the
    /// crate's version) when it comes from the global meter provider.
    pub const OTEL_SCOPE: &str = "idem";

    /// The explicit bucket boundaries the GenAI conventions give
    /// `gen_ai.execute_tool.duration`, in seconds.
    const DURATION_BUCKETS: [f64; 14] = [
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
    ];

    /// An executor's OpenTelemetry instruments.
    pub(in crate::executor) struct Instruments {
        /// Every call, one sample each, by what idem decided
        /// (`idem.outcome`): its count is the calls' count.
        duration: Histogram<f64>,
        pub(in crate::executor) takeovers: Counter<u64>,
        pub(in crate::executor) unknown_outcomes: Counter<u64>,
        pub(in crate::executor) approvals_requested: Counter<u64>,
        pub(in crate::executor) approvals_granted: Counter<u64>,
        pub(in crate::executor) approvals_denied: Counter<u64>,
        pub(in crate::executor) store_errors: Counter<u64>,
    }

    impl std::fmt::Debug for Instruments {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Instruments").finish_non_exhaustive()
        }
    }

    impl Default for Instruments {
        /// From the global meter provider, as it is when the executor is
        /// built.
        fn default() -> Self {
            let scope = opentelemetry::InstrumentationScope::builder(OTEL_SCOPE)
                .with_version(env!("CARGO_PKG_VERSION"))
                .build();
            Instruments::new(&opentelemetry::global::meter_with_scope(scope))
        }
    }

    impl Instruments {
        pub(in crate::executor) fn new(meter: &Meter) -> Self {
            let counter = |name: &'static str, description: &'static str| {
                meter
                    .u64_counter(name)
                    .with_unit("{call}")
                    .with_description(description)
                    .build()
            };
            Instruments {
                duration: meter
                    .f64_histogram("gen_ai.execute_tool.duration")
                    .with_unit("s")
                    .with_description(
                        "Duration of tool calls, by what idem decided (idem.outcome): \
                         executed, deduplicated, joined, refused, unknown, \
                         awaiting_approval, denied.",
                    )
                    .with_boundaries(DURATION_BUCKETS.to_vec())
                    .build(),
                takeovers: counter(
                    "idem.takeovers",
                    "Calls that took a key over from an owner that vanished.",
                ),
                unknown_outcomes: counter(
                    "idem.unknown_outcomes",
                    "Calls whose outcome could not be known.",
                ),
                approvals_requested: counter(
                    "idem.approvals.requested",
                    "Approvals asked of a policy or given with the call.",
                ),
                approvals_granted: counter("idem.approvals.granted", "Approvals granted."),
                approvals_denied: counter("idem.approvals.denied", "Approvals denied."),
                store_errors: meter
                    .u64_counter("idem.store.errors")
                    .with_unit("{error}")
                    .with_description("Store operations that failed.")
                    .build(),
            }
        }

        /// Add one to `counter`, with the call's tool and class.
        pub(in crate::executor) fn add(&self, counter: &Counter<u64>, env: &CallEnv<'_>) {
            counter.add(1, &base(env));
        }

        /// One record per call: the histogram's sample, whose count by
        /// `idem.outcome` is what counters would count. Each instrument
        /// record hashes its attributes and takes a lock in the SDK.
        pub(super) fn call_ended(&self, env: &CallEnv<'_>, ending: &Ending, elapsed: Duration) {
            // On the stack, the optional ones last. Every key and value is
            // a `&'static str`: nothing here allocates.
            let [tool, class] = base(env);
            let outcome = KeyValue::new("idem.outcome", ending.outcome.as_str());
            let mut attributes = [
                KeyValue::new("gen_ai.operation.name", super::OPERATION),
                tool,
                KeyValue::new("gen_ai.tool.type", "function"),
                class,
                outcome.clone(),
                outcome.clone(),
                outcome,
            ];
            let mut n = 5;
            if let Some(error_type) = ending.error_type {
                attributes[n] = KeyValue::new("error.type", error_type);
                n += 1;
            }
            if let Some(refusal) = ending.refusal {
                attributes[n] = KeyValue::new("idem.refusal", refusal);
                n += 1;
            }
            self.duration
                .record(elapsed.as_secs_f64(), &attributes[..n]);
        }
    }

    fn base(env: &CallEnv<'_>) -> [KeyValue; 2] {
        [
            KeyValue::new("gen_ai.tool.name", env.spec.name),
            KeyValue::new("idem.class", env.class.as_str()),
        ]
    }
}
