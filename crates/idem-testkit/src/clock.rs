//! The virtual clock: the store's time is tokio's, so that pausing tokio's
//! clock pauses the store's too, and a lease expires exactly when the
//! timers of the schedule say it does.

use std::time::Duration;

use idem_runtime::clock::{Clock, Timestamp};

/// The instant a [`TokioClock`] reads at its start: 2023-11-14T22:13:20Z,
/// fixed so that every run of a seed sees the same timestamps.
pub const EPOCH: Timestamp = Timestamp(1_700_000_000_000);

/// A [`Clock`] that reads tokio's clock as an offset from [`EPOCH`]. Under
/// a runtime whose time is paused it is virtual: it moves only when every
/// task waits for a timer, and then straight to the next one.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading [`EPOCH`] now. Needs a tokio runtime with time
    /// enabled.
    pub fn new() -> Self {
        TokioClock {
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed: Duration = self.start.elapsed();
        EPOCH.plus(elapsed)
    }
}
