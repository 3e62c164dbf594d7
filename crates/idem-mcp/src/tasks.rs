//! Long waits as MCP Tasks (the `io.modelcontextprotocol/tasks` extension,
//! SEP-2663): a call that waits for an operator's approval answers a
//! client that declared the extension with a task instead of a pending
//! error, and `tasks/get` carries it on when the approval lands.
//!
//! The task is the call's record, persisted before the answer: its id is a
//! sealed ticket naming the record's key and what the call was keyed by
//! (call id, run, repeat window), bound to the principal. `tasks/get`
//! reads the record: awaiting approval or running is `working`; approved,
//! it runs the call once (with the recorded arguments, under the same key)
//! and completes with its result; decided or done, it completes with the
//! recorded outcome, as every duplicate is answered.

use rmcp::model::{Task, TaskPayload};
use serde::{Deserialize, Serialize};

use idem_runtime::clock::Timestamp;
use idem_runtime::{RepeatWindow, RunContext};

/// How often a client should ask (milliseconds).
pub(crate) const POLL_EVERY_MS: u64 = 2_000;

/// What a task id names.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct Ticket {
    /// The record's key.
    pub(crate) key: String,
    pub(crate) tool: String,
    pub(crate) call_id: Option<String>,
    pub(crate) run: Option<(String, u64)>,
    pub(crate) namespace: String,
    /// The repeat window's seconds, repeat and start, when it keyed the
    /// call.
    pub(crate) window: Option<(u64, u32, u64)>,
    /// When the task was made (milliseconds).
    pub(crate) created_at: u64,
}

impl Ticket {
    /// The run context that keys the call as it was keyed the first time.
    pub(crate) fn run(&self) -> Result<RunContext, String> {
        let namespace =
            idem_runtime::Namespace::new(self.namespace.clone()).map_err(|e| e.to_string())?;
        let mut run = RunContext::default().namespace(namespace);
        if let Some((run_id, step)) = &self.run {
            run.run_id = Some(run_id.clone());
            run.step = *step;
        }
        // The window index finds the call's effect again (it is in flight
        // or awaiting approval, so it stays there); when the call was first
        // made (the third number) no longer matters.
        if let Some((seconds, repeat, _started)) = self.window {
            run.repeat_window =
                Some(RepeatWindow::new(std::time::Duration::from_secs(seconds)).repeat(repeat));
        }
        Ok(run)
    }
}

/// `2026-12-01T14:02:11.000Z` (ISO 8601).
pub(crate) fn iso(millis: u64) -> String {
    Timestamp(millis).rfc3339()
}

/// A task in `status`, with its times.
pub(crate) fn task(
    id: String,
    created: u64,
    now: u64,
    payload: &TaskPayload,
    message: Option<&str>,
) -> Task {
    let mut task = Task::new(id, payload.status(), iso(created), iso(now))
        .with_poll_interval_ms(POLL_EVERY_MS);
    if let Some(message) = message {
        task = task.with_status_message(message);
    }
    task
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_iso_8601() {
        assert_eq!(iso(1_796_083_200_000), "2026-12-01T00:00:00.000Z");
    }

    #[test]
    fn a_ticket_keys_the_call_as_the_first_time() {
        let ticket = Ticket {
            key: "k".into(),
            tool: "refund".into(),
            call_id: None,
            run: None,
            namespace: "default/ada".into(),
            window: Some((600, 1, 1_796_083_200_000)),
            created_at: 1_796_083_200_000,
        };
        let run = ticket.run().unwrap();
        let window = run.repeat_window.unwrap();
        assert_eq!(window.repeat, 1);
        assert_eq!(run.namespace.unwrap().as_str(), "default/ada");
    }
}
