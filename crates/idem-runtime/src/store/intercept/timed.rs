//! [`Timed`]: how long each store operation takes, as an OpenTelemetry
//! histogram (feature `otel`).

use std::time::Instant;

use async_trait::async_trait;
use opentelemetry::metrics::{Histogram, Meter};
use opentelemetry::KeyValue;

use super::{Answer, Hook, OpKind, Operation};
use crate::store::{ClaimRequest, LocalClaim, Store, StoreError};

/// Bucket boundaries of `idem.store.duration`, in seconds: from a memory
/// claim's tens of microseconds to a store timing out.
const BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// A [`Hook`] that records the duration of every operation in the
/// histogram `idem.store.duration` (seconds), by `idem.store.operation`
/// (the operation's [name](OpKind::name): `claim`, `complete`, …) and
/// `idem.store.result` (`ok` or `error`). Nothing of a key or a record is
/// a label.
///
/// ```
/// use std::sync::Arc;
///
/// use idem_runtime::store::intercept::{Interceptor, Timed};
/// use idem_runtime::store::{MemoryStore, Store};
///
/// let meter = opentelemetry::global::meter("my-service");
/// let store: Arc<dyn Store> =
///     Arc::new(Interceptor::new(Arc::new(MemoryStore::new()), Timed::new(&meter)));
/// assert_eq!(store.describe(), "memory");
/// ```
#[derive(Debug, Clone)]
pub struct Timed {
    duration: Histogram<f64>,
}

impl Timed {
    /// The histogram, made with `meter`.
    pub fn new(meter: &Meter) -> Self {
        Timed {
            duration: meter
                .f64_histogram("idem.store.duration")
                .with_unit("s")
                .with_description(
                    "Duration of store operations, by operation (idem.store.operation) and \
                     result (idem.store.result: ok, error).",
                )
                .with_boundaries(BUCKETS.to_vec())
                .build(),
        }
    }

    fn record<T>(&self, kind: OpKind, started: Instant, result: &Result<T, StoreError>) {
        let attributes = [
            KeyValue::new("idem.store.operation", kind.name()),
            KeyValue::new(
                "idem.store.result",
                if result.is_ok() { "ok" } else { "error" },
            ),
        ];
        self.duration
            .record(started.elapsed().as_secs_f64(), &attributes);
    }
}

#[async_trait]
impl Hook for Timed {
    async fn around(&self, op: Operation<'_>, store: &dyn Store) -> Result<Answer, StoreError> {
        let kind = op.kind();
        let started = Instant::now();
        let answer = op.run(store).await;
        self.record(kind, started, &answer);
        answer
    }

    fn around_local(
        &self,
        req: &ClaimRequest<'_>,
        store: &dyn Store,
    ) -> Option<Result<LocalClaim, StoreError>> {
        let started = Instant::now();
        let claimed = store.fast_path()?.claim_local(req)?;
        self.record(OpKind::Claim, started, &claimed);
        Some(claimed)
    }
}
