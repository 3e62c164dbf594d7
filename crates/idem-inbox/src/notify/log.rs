//! The delivery log operators read on the inbox's `/deliveries` page: the
//! latest attempts of this instance (a bounded ring), and its totals since
//! it started. What each delivery came to is also in the store (the
//! outbox's records), and a delivery given up on is logged on stderr: a
//! failing endpoint is never silent.

use std::collections::VecDeque;
use std::sync::Mutex;

use idem_runtime::clock::Timestamp;

/// How many lines the log keeps.
const LINES: usize = 200;

/// What one line says happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Happened {
    /// Delivered: the endpoint answered `status` on attempt `attempt`.
    Delivered {
        /// The status.
        status: u16,
        /// The attempt.
        attempt: u32,
    },
    /// Attempt `attempt` failed with `error`; another follows.
    Retrying {
        /// The attempt.
        attempt: u32,
        /// Why.
        error: String,
    },
    /// Given up on after `attempt` attempts.
    Failed {
        /// The last attempt.
        attempt: u32,
        /// Why.
        error: String,
    },
}

/// One line of the log.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    /// When.
    pub at: Timestamp,
    /// The endpoint's name.
    pub endpoint: String,
    /// The event's id.
    pub event: String,
    /// Its kind (`pending`).
    pub kind: &'static str,
    /// The record's key.
    pub key: String,
    /// Its tool, as recorded.
    pub tool: String,
    /// What happened.
    pub happened: Happened,
    /// Whether an instance that died had claimed it before.
    pub again: bool,
}

/// Counts since this instance started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    /// Deliveries this instance made (a 2xx answer).
    pub delivered: u64,
    /// Attempts that failed and were tried again.
    pub retries: u64,
    /// Deliveries given up on.
    pub failed: u64,
    /// Events found already delivered (by another instance, or before a
    /// restart) and not sent again.
    pub already: u64,
    /// Deliveries taken over from an instance that died mid-delivery.
    pub taken_over: u64,
}

/// The log.
#[derive(Debug, Default)]
pub(crate) struct Log {
    inner: Mutex<(VecDeque<Line>, Totals)>,
}

impl Log {
    /// Add `line`.
    pub(crate) fn push(&self, line: Line) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let totals = &mut inner.1;
        match &line.happened {
            Happened::Delivered { .. } => totals.delivered += 1,
            Happened::Retrying { .. } => totals.retries += 1,
            Happened::Failed { .. } => totals.failed += 1,
        }
        if line.again && !matches!(line.happened, Happened::Retrying { .. }) {
            totals.taken_over += 1;
        }
        if inner.0.len() == LINES {
            inner.0.pop_front();
        }
        inner.0.push_back(line);
    }

    /// Count an event found delivered already.
    pub(crate) fn already(&self) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .already += 1;
    }

    /// The lines, newest first, and the totals.
    pub(crate) fn read(&self) -> (Vec<Line>, Totals) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (inner.0.iter().rev().cloned().collect(), inner.1)
    }
}
