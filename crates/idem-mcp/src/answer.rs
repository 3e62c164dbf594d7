//! What a model reads: every refusal, duplicate, unknown outcome and
//! pending approval in plain words — what happened, whether anything ran,
//! and what to do next (call again, wait, ask the user, do nothing). The
//! codes stay in `_meta` ([`ERROR_META`](crate::ERROR_META)) for programs.

use std::time::Duration;

use idem_runtime::error::ErrorKind;
use idem_runtime::text::duration::ago;
use serde_json::Value;

use idem_runtime::key::KeyError;
use idem_runtime::{IdemError, ToolError};

/// What the answer may tell the model it can do.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Hints<'a> {
    /// The argument that marks a deliberate repeat, when the tool has it.
    pub(crate) repeat_argument: Option<&'a str>,
    /// The tool only reads: a failure of unknown effect had none, so
    /// calling again is safe.
    pub(crate) read: bool,
}

/// The text of a duplicate's answer, before its output: the effect
/// already happened, when, and that nothing ran again.
pub(crate) fn already_done(
    tool: &str,
    at_millis: Option<u64>,
    now_millis: u64,
    hints: Hints<'_>,
) -> String {
    let when = match at_millis {
        Some(at) => format!(
            " at {} ({})",
            utc(at),
            ago(Duration::from_millis(now_millis.saturating_sub(at)))
        ),
        None => String::new(),
    };
    let again = match hints.repeat_argument {
        Some(argument) => format!(
            " If the user wants it done a second time, call `{tool}` again with the same arguments \
             and `\"{argument}\": 1` (2 for a third time, and so on)."
        ),
        None => String::new(),
    };
    format!(
        "Already done: an earlier call of `{tool}` did this{when}, so it was not done again. \
         Its result is below; use it as this call's result.{again}"
    )
}

/// The text of an answer whose call an approver edited before it ran,
/// before its output: who changed the arguments to what (escaped), and
/// that the call as sent never ran.
pub(crate) fn edited(tool: &str, by: &str, arguments: &Value) -> String {
    let arguments = idem_runtime::text::json_safe(&arguments.to_string()).into_owned();
    format!(
        "Edited before it ran: {by} changed the arguments of this `{tool}` call to {arguments} \
         and approved it. It ran once with those arguments; the arguments you sent never ran. \
         Its result is below; tell the user what was changed."
    )
}

/// The text of an error, for the model: one sentence set per error, each
/// saying what happened, whether anything ran, and what to do next.
pub(crate) fn error(tool: &str, e: &IdemError, hints: Hints<'_>) -> String {
    match e {
        IdemError::Tool {
            error,
            deduplicated: true,
            ..
        } => recorded_failure(tool, error.message()),
        IdemError::Tool { error, .. } => tool_failed(tool, error, hints.read),
        IdemError::Key {
            source: KeyError::NoSource { .. },
            ..
        } => no_key_sent(tool),
        IdemError::Key { source, .. } => unusable_key(tool, source),
        IdemError::Store { .. } => store_unreachable(tool),
        IdemError::Superseded { .. } => superseded(tool),
        IdemError::KeyReused { .. } => key_reused(tool),
        IdemError::InFlight { .. } => in_flight(tool),
        IdemError::OutcomeUnknown { reason, .. } => outcome_unknown(tool, reason),
        IdemError::OutcomeNotRecorded {
            key, repeatable, ..
        } => started_not_recorded(tool, key.as_str(), *repeatable),
        IdemError::ApprovalDenied { reason, .. } => approval_denied(tool, reason),
        IdemError::ApprovalPending { message, .. } => approval_pending(tool, message),
        IdemError::ApprovalRequired { .. } => no_way_to_approve(tool),
        IdemError::NotRecorded { .. } => not_recorded(tool),
        IdemError::KeyAwaitsOtherArguments { .. } => awaits_other_arguments(tool),
        IdemError::RecordedOutputMismatch { .. } => unreadable_record(tool),
        IdemError::InvalidArguments { detail, .. } => invalid_arguments(tool, detail),
        IdemError::ArgumentsTooLarge { len, max, .. } => arguments_too_large(tool, *len, *max),
        IdemError::OutputNotSerializable { .. } => output_not_recorded(tool),
        // New variants: the message the error carries, which always says
        // whether anything ran.
        other => other.to_string(),
    }
}

/// A duplicate of a call whose tool failed: its recorded failure again,
/// and that calling again only repeats it.
fn recorded_failure(tool: &str, message: &str) -> String {
    format!(
        "An identical earlier call of `{tool}` failed, and this is its recorded answer: \
         {message}. Nothing ran now. Calling again with the same arguments gives the same \
         answer; fix the arguments or tell the user."
    )
}

/// The tool's own failure, told by what it says about the effect (its
/// [`ErrorKind`]), which decides whether calling again is safe.
fn tool_failed(tool: &str, error: &ToolError, read: bool) -> String {
    match error.kind() {
        ErrorKind::Transient => failed_before_effect(tool, error.message()),
        ErrorKind::Ambiguous if read => read_failed(tool, error.message()),
        ErrorKind::Ambiguous => failed_maybe_with_effect(tool, error.message()),
        _ => failed_without_effect(tool, error.message()),
    }
}

/// A transient failure: nothing happened, so calling again is safe.
fn failed_before_effect(tool: &str, message: &str) -> String {
    format!(
        "`{tool}` failed before it took effect: {message}. Nothing happened, so it is safe \
         to call again with the same arguments in a moment."
    )
}

/// A read that failed midway (it timed out, its connection broke): it
/// changes nothing, so calling again is safe.
fn read_failed(tool: &str, message: &str) -> String {
    format!(
        "`{tool}` failed: {message}. It only reads and changes nothing, so it is safe to call \
         it again; if it keeps failing, tell the user."
    )
}

/// An ambiguous failure: the effect may have happened, so the model must
/// not try again on its own.
fn failed_maybe_with_effect(tool: &str, message: &str) -> String {
    format!(
        "`{tool}` failed, and it may or may not have taken effect: {message}. Do not call it \
         again on your own; tell the user it needs checking."
    )
}

/// A permanent failure: no effect, and the same call fails the same way.
fn failed_without_effect(tool: &str, message: &str) -> String {
    format!(
        "`{tool}` failed: {message}. It did not take effect. Fix the arguments if they are the \
         cause, or tell the user."
    )
}

/// The server runs the tool only with a client's key, and none came: a
/// key in the arguments does not count, so the model must not invent one.
fn no_key_sent(tool: &str) -> String {
    format!(
        "`{tool}` was not run: this server runs it only when the client sends an idempotency \
         key with the call (the MCP `_meta` field `io.idem/idempotencyKey`), and this client \
         sent none. Nothing ran. Putting a key into the arguments does not help; tell the \
         user this tool cannot be used from this client."
    )
}

/// The key that came is unusable: the client's configuration, not the
/// model, can fix that.
fn unusable_key(tool: &str, source: &KeyError) -> String {
    format!(
        "`{tool}` was not run: the key sent with the call is unusable ({source}). Nothing \
         ran. Tell the user; the client's configuration needs fixing."
    )
}

/// The store is out of reach, and nothing runs unrecorded: try again later.
fn store_unreachable(tool: &str) -> String {
    format!(
        "`{tool}` was not run: the server cannot reach the store where it records its calls, \
         and it never acts without recording. Nothing ran. Try again in a minute; if it \
         keeps failing, tell the user."
    )
}

/// The call lost its key while it worked (another worker took it over):
/// this answer is not the final one, and a later identical call gets the
/// outcome.
fn superseded(tool: &str) -> String {
    format!(
        "`{tool}` took too long, and another worker of the server took the call over; this \
         answer is not the final one. Call again with the same arguments in a few seconds \
         to receive the outcome. It will not be done twice."
    )
}

/// The key was used for other arguments: a new action needs a new key.
fn key_reused(tool: &str) -> String {
    format!(
        "`{tool}` was not run: the key of this call was already used for a call with other \
         arguments. Nothing ran. A new action needs a new key; do not send this one again."
    )
}

/// An identical call is still running: wait, then call again for its result.
fn in_flight(tool: &str) -> String {
    format!(
        "An identical call of `{tool}` is still running, so it was not started a second \
         time. Wait a few seconds, then call again with the same arguments to receive its \
         result."
    )
}

/// An identical call started and never recorded its result: a person has
/// to find out whether it happened, and it is never run again meanwhile.
fn outcome_unknown(tool: &str, reason: &str) -> String {
    format!(
        "An identical call of `{tool}` was started earlier, but its result was never \
         recorded ({reason}), so nobody knows whether it took effect. It will not be run \
         again. Do not call it again; tell the user a person has to check whether it \
         happened and settle it."
    )
}

/// The tool started, and the store failed before its result was
/// recorded: it may have taken effect. A class that repeats safely under
/// its key may be called again; any other must not, and a person settles
/// the key.
fn started_not_recorded(tool: &str, key: &str, repeatable: bool) -> String {
    let next = if repeatable {
        "Calling again with the same arguments in a minute is safe: it repeats under the same \
         key, so it is not done twice."
            .to_owned()
    } else {
        format!(
            "Do not call it again; tell the user a person has to check whether it happened \
             and settle it (key {key})."
        )
    };
    format!(
        "`{tool}` started, but the server lost the store where it records its calls before \
         the result was recorded, so it may or may not have taken effect. {next}"
    )
}

/// A person declined the call: it will not run with these arguments.
fn approval_denied(tool: &str, reason: &str) -> String {
    format!(
        "A person declined this call of `{tool}` ({reason}). Nothing ran, and it will not \
         run with these arguments. Tell the user; do not call it again."
    )
}

/// The call waits for a person's decision (with what the approval policy
/// said, if anything); once approved, calling again runs it once.
fn approval_pending(tool: &str, message: &str) -> String {
    let why = if message.is_empty() {
        String::new()
    } else {
        format!(" ({message})")
    };
    format!(
        "`{tool}` needs a person's approval before it runs, and it is not approved \
         yet{why}. Nothing ran. Tell the user it is waiting for approval. Once it is \
         approved, call again with the same arguments and it runs once; calling again \
         before then only repeats this answer."
    )
}

/// The call needs an approval, and this server cannot ask for one.
fn no_way_to_approve(tool: &str) -> String {
    format!(
        "`{tool}` needs a person's approval, and this server has no way to ask for one. \
         Nothing ran. Tell the user."
    )
}

/// A replaying server has no record of this call, so it runs nothing.
fn not_recorded(tool: &str) -> String {
    format!(
        "`{tool}` was not run: this server is replaying recorded calls and this one has no \
         record. Nothing ran."
    )
}

/// A request under the same key, with other arguments, waits for a
/// person's decision: call again once it is decided.
fn awaits_other_arguments(tool: &str) -> String {
    format!(
        "`{tool}` was not run: an earlier request for the same thing, with other arguments, \
         is waiting for a person's decision. Nothing ran. Tell the user; once it is decided, \
         call again."
    )
}

/// An identical call was done, but its recorded result no longer reads as
/// the tool's output (its type changed since): nothing runs again.
fn unreadable_record(tool: &str) -> String {
    format!(
        "An identical call of `{tool}` was done earlier, but its recorded result can no \
         longer be read. Nothing ran again. Tell the user."
    )
}

/// The arguments are unusable (the detail says where): the model can fix
/// them.
fn invalid_arguments(tool: &str, detail: &str) -> String {
    format!(
        "The arguments for `{tool}` are not valid: {detail}. Nothing ran. Fix them and call \
         again."
    )
}

/// The arguments are larger than the server accepts: the model can send less.
fn arguments_too_large(tool: &str, len: usize, max: usize) -> String {
    format!(
        "The arguments for `{tool}` are {len} bytes, more than the {max} this server accepts. \
         Nothing ran. Send less."
    )
}

/// The tool ran, and its result could not be recorded: it must not run
/// again, and a person has to know.
fn output_not_recorded(tool: &str) -> String {
    format!(
        "`{tool}` ran, but its result could not be recorded, so it cannot be shown. Do not \
         call it again; tell the user."
    )
}

/// The answer to a call whose `_meta` key fields were unusable.
pub(crate) fn bad_key_fields(tool: &str, problem: &str) -> String {
    format!(
        "`{tool}` was not run: {problem}. Nothing ran. Tell the user; the client's configuration \
         needs fixing."
    )
}

/// `2026-12-01 14:02:11 UTC`.
pub(crate) fn utc(millis: u64) -> String {
    let c = idem_runtime::clock::Timestamp(millis).civil();
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    )
}

/// A JSON value as a model reads it: a string as written, anything else as
/// JSON.
pub(crate) fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_in_utc() {
        assert_eq!(utc(1_796_083_200_000), "2026-12-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400_000 + 3_723_000), "2000-02-29 01:02:03 UTC");
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    }

    #[test]
    fn an_edited_call_says_who_changed_what_with_the_arguments_escaped() {
        let arguments = serde_json::json!({"customer": "eve\u{202e}", "note": "a\nb"});
        let text = edited("delete_account", "dana", &arguments);
        assert!(
            text.starts_with("Edited before it ran: dana changed the arguments of this `delete_account` call to "),
            "{text}"
        );
        assert!(
            text.contains(r#"{"customer":"eve\u202e","note":"a\nb"}"#),
            "{text}"
        );
        assert!(text.contains("the arguments you sent never ran"), "{text}");
        assert!(!text.contains('\u{202e}') && !text.contains('\n'), "{text}");
    }

    #[test]
    fn a_duplicate_says_it_was_done_when_and_how_to_mean_it_again() {
        let text = already_done(
            "send_email",
            Some(1_796_083_200_000),
            1_796_083_380_000,
            Hints {
                repeat_argument: Some("intended_repeat"),
                read: false,
            },
        );
        assert!(text.starts_with("Already done"), "{text}");
        assert!(
            text.contains("2026-12-01 00:00:00 UTC (3 minutes ago)"),
            "{text}"
        );
        assert!(text.contains("`\"intended_repeat\": 1`"), "{text}");
    }

    #[test]
    fn a_store_lost_after_the_tool_started_never_reads_as_nothing_ran() {
        let key = idem_runtime::key::IdempotencyKey::parse(&"ab".repeat(32)).unwrap();
        let lost = |repeatable| IdemError::OutcomeNotRecorded {
            tool: "git_checkout".into(),
            key: key.clone(),
            source: idem_runtime::StoreError::Unavailable {
                store: "postgres://db/idem".into(),
                cause: "connection closed".into(),
            },
            repeatable,
        };
        let once = error("git_checkout", &lost(false), Hints::default());
        assert!(!once.contains("Nothing ran"), "{once}");
        assert!(once.contains("may or may not have taken effect"), "{once}");
        assert!(once.contains("Do not call it again"), "{once}");
        assert!(
            once.contains(key.as_str()),
            "the key an operator settles: {once}"
        );
        let repeatable = error("git_checkout", &lost(true), Hints::default());
        assert!(repeatable.contains("is safe"), "{repeatable}");

        let before = IdemError::Store {
            tool: "git_checkout".into(),
            source: idem_runtime::StoreError::Unavailable {
                store: "postgres://db/idem".into(),
                cause: "connection refused".into(),
            },
        };
        let text = error("git_checkout", &before, Hints::default());
        assert!(text.contains("Nothing ran. Try again"), "{text}");
    }

    #[test]
    fn a_read_that_failed_midway_may_be_called_again_and_a_write_may_not() {
        let e = IdemError::Tool {
            tool: "search".into(),
            error: ToolError::ambiguous("no answer for 2 seconds"),
            deduplicated: false,
        };
        let read = error(
            "search",
            &e,
            Hints {
                read: true,
                ..Hints::default()
            },
        );
        assert!(read.contains("safe to call it again"), "{read}");
        let write = error("search", &e, Hints::default());
        assert!(write.contains("Do not call it again"), "{write}");
    }
}
