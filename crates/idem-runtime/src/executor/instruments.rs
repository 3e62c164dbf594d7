//! The executor's OpenTelemetry instruments (feature `otel`): the
//! `gen_ai.execute_tool.duration` histogram and idem's counters. They know
//! nothing of a call but the attributes they are given.

use std::time::Duration;

use opentelemetry::metrics::{Counter, Histogram};
use opentelemetry::KeyValue;

use crate::class::ClassKind;

pub use opentelemetry::metrics::Meter;

/// `gen_ai.operation.name`, as telemetry's spans say it.
const OPERATION: &str = "execute_tool";

/// The instrumentation scope idem's meter is named for (with the
/// crate's version) when it comes from the global meter provider.
pub const OTEL_SCOPE: &str = "idem";

/// The explicit bucket boundaries the GenAI conventions give
/// `gen_ai.execute_tool.duration`, in seconds.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// An executor's OpenTelemetry instruments.
pub(super) struct Instruments {
    /// Every call, one sample each, by what idem decided
    /// (`idem.outcome`): its count is the calls' count.
    duration: Histogram<f64>,
    pub(super) takeovers: Counter<u64>,
    pub(super) unknown_outcomes: Counter<u64>,
    pub(super) approvals_requested: Counter<u64>,
    pub(super) approvals_granted: Counter<u64>,
    pub(super) approvals_denied: Counter<u64>,
    pub(super) store_errors: Counter<u64>,
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
    pub(super) fn new(meter: &Meter) -> Self {
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
    pub(super) fn add(&self, counter: &Counter<u64>, tool: &'static str, class: ClassKind) {
        counter.add(1, &base(tool, class));
    }

    /// One record per call: the histogram's sample, whose count by
    /// `idem.outcome` is what counters would count. Each instrument
    /// record hashes its attributes and takes a lock in the SDK.
    pub(super) fn call_ended(
        &self,
        (tool, class): (&'static str, ClassKind),
        ending: EndAttributes,
        elapsed: Duration,
    ) {
        // On the stack, the optional ones last. Every key and value is
        // a `&'static str`: nothing here allocates.
        let [tool, class] = base(tool, class);
        let outcome = KeyValue::new("idem.outcome", ending.outcome);
        let mut attributes = [
            KeyValue::new("gen_ai.operation.name", OPERATION),
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

fn base(tool: &'static str, class: ClassKind) -> [KeyValue; 2] {
    [
        KeyValue::new("gen_ai.tool.name", tool),
        KeyValue::new("idem.class", class.as_str()),
    ]
}

/// How a call ended, as the histogram's attributes tell it (from
/// telemetry's `Ending`).
#[derive(Debug, Clone, Copy)]
pub(super) struct EndAttributes {
    /// `idem.outcome`.
    pub(super) outcome: &'static str,
    /// `error.type`, when the call failed.
    pub(super) error_type: Option<&'static str>,
    /// `idem.refusal`, when idem refused it.
    pub(super) refusal: Option<&'static str>,
}
