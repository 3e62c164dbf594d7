//! What the approval rules' timers tell the model and the people deciding:
//! a request denied because nobody decided in time ([`expired`]), an
//! approval too old to run the call ([`lapsed`]), a request told to more
//! people ([`escalated`]).

use std::time::Duration;

use super::duration::exact;
use crate::clock::Timestamp;

/// Why a call nobody decided in time is denied: the reason the model
/// reads and the audit log records.
///
/// ```
/// use std::time::Duration;
/// use idem_runtime::text::timers::expired;
///
/// assert_eq!(
///     expired("refunds", Duration::from_secs(4 * 3600)),
///     "it expired: nobody approved or denied it within 4 hours (approval rule “refunds”, expires_after). If it is still wanted, make the call again as a new request",
/// );
/// ```
pub fn expired(rule: &str, after: Duration) -> String {
    format!(
        "it expired: nobody approved or denied it within {} (approval rule “{rule}”, expires_after). If it is still wanted, make the call again as a new request",
        exact(after)
    )
}

/// Why an approval did not run the call: it was given longer ago than
/// its rule lets an approval wait (`valid_for`), so the call asks again.
pub fn lapsed(rule: &str, valid_for: Duration, by: Option<&str>, at: Option<Timestamp>) -> String {
    let given = match (by, at) {
        (Some(by), Some(at)) => format!("The approval {by} gave at {}", at.rfc3339()),
        (Some(by), None) => format!("The approval {by} gave"),
        _ => "The approval".to_owned(),
    };
    format!(
        "{given} lapsed before the call ran: approval rule “{rule}” lets an approval run it only within {} of being given (valid_for), so it asks again",
        exact(valid_for)
    )
}

/// What an escalation says: the request waited undecided this long.
pub fn escalated(rule: &str, after: Duration, to: &[String]) -> String {
    let to = match to {
        [] => String::new(),
        names => format!("; told: {}", names.join(", ")),
    };
    format!(
        "nobody decided it within {} (approval rule “{rule}”, escalate_after){to}",
        exact(after)
    )
}
