//! Retry policy: how many attempts, and how long to pause between them.
//!
//! *Whether* an error may be retried is not a policy choice: it follows from
//! the tool's class and the error's kind (see [`may_retry`]). The policy only
//! says how often and how patiently.

use std::time::Duration;

use crate::class::ClassKind;
use crate::error::ErrorKind;

/// Exponential backoff with optional jitter, honouring `retry-after`.
///
/// ```
/// use idem_runtime::retry::RetryPolicy;
/// use std::time::Duration;
///
/// let policy = RetryPolicy::exponential()
///     .max_attempts(5)
///     .initial_delay(Duration::from_millis(100))
///     .max_delay(Duration::from_secs(5))
///     .without_jitter();
/// assert_eq!(policy.delay(1, None), Duration::from_millis(100));
/// assert_eq!(policy.delay(3, None), Duration::from_millis(400));
/// // A server's retry-after wins when it is longer.
/// assert_eq!(policy.delay(1, Some(Duration::from_secs(2))), Duration::from_secs(2));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    max_attempts: u32,
    initial_delay: Duration,
    max_delay: Duration,
    factor: f64,
    jitter: bool,
    max_retry_after: Duration,
}

impl Default for RetryPolicy {
    /// 3 attempts, 200 ms doubling to 10 s, with jitter; a retry-after longer
    /// than 60 s ends the retries.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            factor: 2.0,
            jitter: true,
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The default policy, to adjust with the builder methods.
    pub fn exponential() -> Self {
        Self::default()
    }

    /// No retries: one attempt.
    pub fn none() -> Self {
        Self::default().max_attempts(1)
    }

    /// Attempts in all, the first included (at least 1).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// Pause before the first retry.
    pub fn initial_delay(mut self, d: Duration) -> Self {
        self.initial_delay = d;
        self
    }

    /// Longest pause between attempts.
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = d;
        self
    }

    /// Growth factor of the pause (2.0 by default).
    pub fn factor(mut self, f: f64) -> Self {
        self.factor = if f.is_finite() && f >= 1.0 { f } else { 1.0 };
        self
    }

    /// Pauses are exact (tests, demos).
    pub fn without_jitter(mut self) -> Self {
        self.jitter = false;
        self
    }

    /// A server asking to wait longer than this ends the retries.
    pub fn max_retry_after(mut self, d: Duration) -> Self {
        self.max_retry_after = d;
        self
    }

    /// Attempts in all.
    pub fn attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The pause after failed attempt number `attempt` (from 1), honouring a
    /// `retry_after` the server sent. With jitter the backoff part is drawn
    /// uniformly from its upper half, so concurrent retriers spread out.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        let exp = self.factor.powi(attempt.saturating_sub(1).min(64) as i32);
        let base = self.initial_delay.as_secs_f64() * exp;
        let capped = base.min(self.max_delay.as_secs_f64());
        let backoff = if self.jitter {
            capped * (0.5 + rand::random::<f64>() * 0.5)
        } else {
            capped
        };
        let backoff = Duration::from_secs_f64(backoff.max(0.0));
        retry_after.map_or(backoff, |ra| ra.max(backoff))
    }

    /// Whether a server's retry-after is too long to wait for.
    pub fn retry_after_too_long(&self, retry_after: Option<Duration>) -> bool {
        retry_after.is_some_and(|ra| ra > self.max_retry_after)
    }
}

/// Whether an error of `kind` from a tool of `class` may be retried: only
/// `read` and `idempotent_write` tools, only transient and ambiguous errors.
pub fn may_retry(class: ClassKind, kind: ErrorKind) -> bool {
    class.is_retry_safe() && matches!(kind, ErrorKind::Transient | ErrorKind::Ambiguous)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_retry_safe_classes_retry_and_never_permanent_errors() {
        use ClassKind::*;
        use ErrorKind::*;
        for class in ClassKind::ALL {
            for kind in [Transient, Ambiguous, Permanent] {
                let expected = matches!(class, Read | IdempotentWrite) && kind != Permanent;
                assert_eq!(may_retry(class, kind), expected, "{class} {kind}");
            }
        }
    }

    #[test]
    fn jittered_delays_stay_within_bounds() {
        let p = RetryPolicy::exponential()
            .initial_delay(Duration::from_millis(100))
            .max_delay(Duration::from_millis(300));
        for attempt in 1..10 {
            let d = p.delay(attempt, None);
            assert!(d <= Duration::from_millis(300), "{d:?}");
            assert!(d >= Duration::from_millis(50), "{d:?}");
        }
        assert!(p.retry_after_too_long(Some(Duration::from_secs(61))));
        assert!(!p.retry_after_too_long(Some(Duration::from_secs(1))));
    }
}
