//! What a model reads: every refusal, duplicate, unknown outcome and
//! pending approval in plain words — what happened, whether anything ran,
//! and what to do next (call again, wait, ask the user, do nothing). The
//! codes stay in `_meta` ([`ERROR_META`](crate::ERROR_META)) for programs.

use idem_runtime::error::ErrorKind;
use serde_json::Value;

use idem_runtime::key::KeyError;
use idem_runtime::IdemError;

/// What the answer may tell the model it can do.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Hints<'a> {
    /// The argument that marks a deliberate repeat, when the tool has it.
    pub(crate) repeat_argument: Option<&'a str>,
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
            ago(now_millis.saturating_sub(at) / 1000)
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

/// The text of an error, for the model.
pub(crate) fn error(tool: &str, e: &IdemError) -> String {
    match e {
        IdemError::Tool {
            error,
            deduplicated: true,
            ..
        } => format!(
            "An identical earlier call of `{tool}` failed, and this is its recorded answer: {}. \
             Nothing ran now. Calling again with the same arguments gives the same answer; \
             fix the arguments or tell the user.",
            error.message()
        ),
        IdemError::Tool { error, .. } => match error.kind() {
            ErrorKind::Transient => format!(
                "`{tool}` failed before it took effect: {}. Nothing happened, so it is safe \
                 to call again with the same arguments in a moment.",
                error.message()
            ),
            ErrorKind::Ambiguous => format!(
                "`{tool}` failed, and it may or may not have taken effect: {}. Do not call it \
                 again on your own; tell the user it needs checking.",
                error.message()
            ),
            _ => format!(
                "`{tool}` failed: {}. It did not take effect. Fix the arguments if they are the \
                 cause, or tell the user.",
                error.message()
            ),
        },
        IdemError::Key {
            source: KeyError::NoSource { .. },
            ..
        } => format!(
            "`{tool}` was not run: this server runs it only when the client sends an idempotency \
             key with the call (the MCP `_meta` field `io.idem/idempotencyKey`), and this client \
             sent none. Nothing ran. Putting a key into the arguments does not help; tell the \
             user this tool cannot be used from this client."
        ),
        IdemError::Key { source, .. } => format!(
            "`{tool}` was not run: the key sent with the call is unusable ({source}). Nothing \
             ran. Tell the user; the client's configuration needs fixing."
        ),
        IdemError::Store { .. } => format!(
            "`{tool}` was not run: the server cannot reach the store where it records its calls, \
             and it never acts without recording. Nothing ran. Try again in a minute; if it \
             keeps failing, tell the user."
        ),
        IdemError::Superseded { .. } => format!(
            "`{tool}` took too long, and another worker of the server took the call over; this \
             answer is not the final one. Call again with the same arguments in a few seconds \
             to receive the outcome. It will not be done twice."
        ),
        IdemError::KeyReused { .. } => format!(
            "`{tool}` was not run: the key of this call was already used for a call with other \
             arguments. Nothing ran. A new action needs a new key; do not send this one again."
        ),
        IdemError::InFlight { .. } => format!(
            "An identical call of `{tool}` is still running, so it was not started a second \
             time. Wait a few seconds, then call again with the same arguments to receive its \
             result."
        ),
        IdemError::OutcomeUnknown { reason, .. } => format!(
            "An identical call of `{tool}` was started earlier, but its result was never \
             recorded ({reason}), so nobody knows whether it took effect. It will not be run \
             again. Do not call it again; tell the user a person has to check whether it \
             happened and settle it."
        ),
        IdemError::ApprovalDenied { reason, .. } => format!(
            "A person declined this call of `{tool}` ({reason}). Nothing ran, and it will not \
             run with these arguments. Tell the user; do not call it again."
        ),
        IdemError::ApprovalPending { message, .. } => {
            let why = if message.is_empty() {
                String::new()
            } else {
                format!(" ({message})")
            };
            format!(
                "`{tool}` needs a person's approval before it runs, and nobody has decided \
                 yet{why}. Nothing ran. Tell the user it is waiting for approval. Once it is \
                 approved, call again with the same arguments and it runs once; calling again \
                 before then only repeats this answer."
            )
        }
        IdemError::ApprovalRequired { .. } => format!(
            "`{tool}` needs a person's approval, and this server has no way to ask for one. \
             Nothing ran. Tell the user."
        ),
        IdemError::NotRecorded { .. } => format!(
            "`{tool}` was not run: this server is replaying recorded calls and this one has no \
             record. Nothing ran."
        ),
        IdemError::KeyAwaitsOtherArguments { .. } => format!(
            "`{tool}` was not run: an earlier request for the same thing, with other arguments, \
             is waiting for a person's decision. Nothing ran. Tell the user; once it is decided, \
             call again."
        ),
        IdemError::RecordedOutputMismatch { .. } => format!(
            "An identical call of `{tool}` was done earlier, but its recorded result can no \
             longer be read. Nothing ran again. Tell the user."
        ),
        IdemError::InvalidArguments { detail, .. } => format!(
            "The arguments for `{tool}` are not valid: {detail}. Nothing ran. Fix them and call \
             again."
        ),
        IdemError::ArgumentsTooLarge { len, max, .. } => format!(
            "The arguments for `{tool}` are {len} bytes, more than the {max} this server accepts. \
             Nothing ran. Send less."
        ),
        IdemError::OutputNotSerializable { .. } => format!(
            "`{tool}` ran, but its result could not be recorded, so it cannot be shown. Do not \
             call it again; tell the user."
        ),
        // New variants: the message the error carries, which always says
        // whether anything ran.
        other => other.to_string(),
    }
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

/// "3 minutes ago".
fn ago(secs: u64) -> String {
    let (n, unit) = match secs {
        0 => return "just now".to_owned(),
        1..=59 => (secs, "second"),
        60..=3599 => (secs / 60, "minute"),
        3600..=86_399 => (secs / 3600, "hour"),
        _ => (secs / 86_400, "day"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
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
    fn ages_are_in_words() {
        assert_eq!(ago(1), "1 second ago");
        assert_eq!(ago(185), "3 minutes ago");
        assert_eq!(ago(7200), "2 hours ago");
    }

    #[test]
    fn a_duplicate_says_it_was_done_when_and_how_to_mean_it_again() {
        let text = already_done(
            "send_email",
            Some(1_796_083_200_000),
            1_796_083_380_000,
            Hints {
                repeat_argument: Some("intended_repeat"),
            },
        );
        assert!(text.starts_with("Already done"), "{text}");
        assert!(
            text.contains("2026-12-01 00:00:00 UTC (3 minutes ago)"),
            "{text}"
        );
        assert!(text.contains("`\"intended_repeat\": 1`"), "{text}");
    }
}
