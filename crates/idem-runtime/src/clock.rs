//! Time, injectable so that lease and TTL behaviour is testable without
//! sleeping.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// This instant plus `d`, saturating.
    pub fn plus(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(d.as_millis().min(u64::MAX as u128) as u64),
        )
    }

    /// This instant as RFC 3339 in UTC with milliseconds:
    /// `2026-05-01T09:30:00.250Z`. An instant past the end of year 9999
    /// (a lease or TTL of `Duration::MAX`), which RFC 3339 cannot write,
    /// reads as the last millisecond it can: `9999-12-31T23:59:59.999Z`.
    ///
    /// ```
    /// use idem_runtime::clock::Timestamp;
    /// assert_eq!(Timestamp(1_796_083_200_250).rfc3339(), "2026-12-01T00:00:00.250Z");
    /// assert_eq!(Timestamp(u64::MAX).rfc3339(), "9999-12-31T23:59:59.999Z");
    /// ```
    pub fn rfc3339(self) -> String {
        format!("{:.3}Z", self.utc())
    }

    /// This instant's calendar date and time of day in UTC (the end of
    /// year 9999 at the latest, as [`Timestamp::rfc3339`]).
    pub fn civil(self) -> Civil {
        let at = self.utc();
        // jiff's fields are never negative at or after 1970.
        let field = |n: i8| u32::from(n.unsigned_abs());
        Civil {
            year: at.year().into(),
            month: field(at.month()),
            day: field(at.day()),
            hour: field(at.hour()),
            minute: field(at.minute()),
            second: field(at.second()),
            millis: u32::from(at.millisecond().unsigned_abs()),
        }
    }

    /// This instant as a date and time of day in UTC, by jiff's calendar
    /// math; saturating at the last instant of year 9999.
    fn utc(self) -> jiff::civil::DateTime {
        const EPOCH: jiff::civil::DateTime =
            jiff::civil::DateTime::constant(1970, 1, 1, 0, 0, 0, 0);
        EPOCH.saturating_add(Duration::from_millis(self.0))
    }

    /// Time from `self` until `later`, zero if `later` is not later.
    pub fn until(self, later: Timestamp) -> Duration {
        Duration::from_millis(later.0.saturating_sub(self.0))
    }
}

/// A [`Timestamp`] as a calendar date and a time of day in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// The year.
    pub year: i64,
    /// 1 to 12.
    pub month: u32,
    /// 1 to 31.
    pub day: u32,
    /// 0 to 23.
    pub hour: u32,
    /// 0 to 59.
    pub minute: u32,
    /// 0 to 59.
    pub second: u32,
    /// 0 to 999.
    pub millis: u32,
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0)
    }
}

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        Timestamp(since.as_millis() as u64)
    }
}

/// A clock that only moves when told to. Clones share the same time.
///
/// ```
/// use idem_runtime::clock::{Clock, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now().as_millis(), 3_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    millis: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at `millis` since the epoch.
    pub fn new(millis: u64) -> Self {
        ManualClock {
            millis: Arc::new(AtomicU64::new(millis)),
        }
    }

    /// Move the clock forward.
    pub fn advance(&self, by: Duration) {
        self.millis
            .fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.millis.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_read_as_utc_dates_and_times() {
        assert_eq!(Timestamp(0).rfc3339(), "1970-01-01T00:00:00.000Z");
        // A leap day of a century year, with milliseconds.
        let leap_day = Timestamp(951_827_696_789);
        assert_eq!(leap_day.rfc3339(), "2000-02-29T12:34:56.789Z");
        assert_eq!(
            leap_day.civil(),
            Civil {
                year: 2000,
                month: 2,
                day: 29,
                hour: 12,
                minute: 34,
                second: 56,
                millis: 789,
            }
        );
        assert_eq!(
            Timestamp(1_798_761_599_999).rfc3339(),
            "2026-12-31T23:59:59.999Z"
        );
        // The last instant RFC 3339 can write, and what lies past it.
        for past in [253_402_300_799_999, 253_402_300_800_000, u64::MAX] {
            assert_eq!(Timestamp(past).rfc3339(), "9999-12-31T23:59:59.999Z");
            assert_eq!(Timestamp(past).civil().year, 9999);
        }
    }
}
