//! Refusals logged at a bounded rate: a flood of bad sign-ins or foreign
//! requests must not become a flood of log lines (one flood wrote 65,387).
//! At most [`LINES_PER_SECOND`] refusal lines are written a second; the
//! rest are counted, and the count is said on the next line written, or
//! by [`Quiet::flush`] (every minute, with the sign-in counts) when no
//! line came after them.

use std::sync::Mutex;
use std::time::Duration;

// Tokio's clock, so that tests can pause it.
use tokio::time::Instant;

/// Refusal lines written at most per second.
pub(crate) const LINES_PER_SECOND: u32 = 20;

/// The refusal lines of one server.
#[derive(Debug)]
pub(crate) struct Quiet {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// The start of the second being counted.
    second: Instant,
    /// Lines written in it.
    written: u32,
    /// Lines held back since the last one written.
    held: u64,
}

impl Default for Quiet {
    fn default() -> Self {
        Quiet {
            state: Mutex::new(State {
                second: Instant::now(),
                written: 0,
                held: 0,
            }),
        }
    }
}

impl Quiet {
    /// Whether a refusal's line may be written now: `Some(how many were
    /// held back before it)` (to say on it), or `None` (held back, and
    /// counted).
    pub(crate) fn admit(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if now.duration_since(state.second) >= Duration::from_secs(1) {
            state.second = now;
            state.written = 0;
        }
        if state.written >= LINES_PER_SECOND {
            state.held += 1;
            return None;
        }
        state.written += 1;
        Some(std::mem::take(&mut state.held))
    }

    /// Say how many refusal lines were held back and not said since.
    pub(crate) fn flush(&self) {
        let held = std::mem::take(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()).held);
        if held > 0 {
            tracing::warn!(
                held,
                "{held} more refusals were not logged (at most {LINES_PER_SECOND} lines a second)"
            );
        }
    }
}

/// Log a refusal through `quiet`: `tracing::warn!` with its fields, and
/// `held` (the lines held back before it) when some were.
macro_rules! refused {
    ($quiet:expr, $($field:tt)*) => {
        if let Some(held) = $quiet.admit() {
            if held > 0 {
                tracing::warn!(held, $($field)*);
            } else {
                tracing::warn!($($field)*);
            }
        }
    };
}
pub(crate) use refused;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn lines_past_the_rate_are_counted_and_said_on_the_next() {
        let quiet = Quiet::default();
        for _ in 0..LINES_PER_SECOND {
            assert_eq!(quiet.admit(), Some(0));
        }
        for _ in 0..100 {
            assert_eq!(quiet.admit(), None);
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(quiet.admit(), Some(100), "the next line says how many");
        assert_eq!(quiet.admit(), Some(0));
        quiet.flush();
    }
}
