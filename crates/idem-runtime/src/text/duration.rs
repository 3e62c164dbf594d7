//! Durations in words, the three ways idem's readers see them: short in a
//! table column ([`short`]: `3m`), exact in a sentence that states a rule
//! ([`exact`]: "10 minutes"), and roughly how long ago in a sentence about
//! what happened ([`ago`]: "3 minutes ago"); and a time beside now, as a
//! table column or the inbox shows it ([`relative`]: "3m ago", "in 30s").

use std::time::Duration;

use crate::clock::Timestamp;

/// `d` in its largest whole unit, as a table column shows it: `45s`,
/// `3m`, `5h`, `2d` (hours up to two days, so "36h" is not "1d").
pub fn short(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// `d` exactly, in the largest unit that divides it: "90 days", "1 hour",
/// "10 minutes", "90 seconds" (hours up to two days, so a day is "24
/// hours"). For rules a reader relies on (a repeat window, a timeout, how
/// long a record is kept), where a rounded figure would mislead.
pub fn exact(d: Duration) -> String {
    let secs = d.as_secs();
    let (n, unit) = if secs.is_multiple_of(86_400) && secs >= 172_800 {
        (secs / 86_400, "day")
    } else if secs.is_multiple_of(3600) && secs >= 3600 {
        (secs / 3600, "hour")
    } else if secs.is_multiple_of(60) && secs >= 60 {
        (secs / 60, "minute")
    } else {
        (secs, "second")
    };
    plural(n, unit)
}

/// How long ago something `d` back happened, rounded down to its largest
/// unit: "just now", "1 second ago", "3 minutes ago", "2 days ago".
pub fn ago(d: Duration) -> String {
    let secs = d.as_secs();
    let (n, unit) = match secs {
        0 => return "just now".to_owned(),
        1..=59 => (secs, "second"),
        60..=3599 => (secs / 60, "minute"),
        3600..=86_399 => (secs / 3600, "hour"),
        _ => (secs / 86_400, "day"),
    };
    format!("{} ago", plural(n, unit))
}

/// How long ago `at` was at `now`, short ("just now", "12s ago", "3m
/// ago", "2d ago"), or how far ahead it is ("in 30s"): when a lease runs
/// out, when a call began to wait.
///
/// ```
/// use idem_runtime::clock::Timestamp;
/// use idem_runtime::text::duration::relative;
///
/// let now = Timestamp(600_000);
/// assert_eq!(relative(now, Timestamp(420_000)), "3m ago");
/// assert_eq!(relative(now, Timestamp(630_000)), "in 30s");
/// ```
pub fn relative(now: Timestamp, at: Timestamp) -> String {
    if at <= now {
        let ago = at.until(now);
        if ago < Duration::from_secs(1) {
            "just now".to_owned()
        } else {
            format!("{} ago", short(ago))
        }
    } else {
        format!("in {}", short(now.until(at)))
    }
}

/// "1 minute", "2 minutes".
fn plural(n: u64, unit: &str) -> String {
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_column_shows_the_largest_whole_unit() {
        let shown: Vec<String> = [0, 59, 60, 3599, 3600, 172_799, 172_800]
            .map(|s| short(secs(s)))
            .into();
        assert_eq!(shown, ["0s", "59s", "1m", "59m", "1h", "47h", "2d"]);
    }

    #[test]
    fn a_rule_is_stated_exactly() {
        assert_eq!(exact(secs(600)), "10 minutes");
        assert_eq!(exact(secs(3600)), "1 hour");
        assert_eq!(exact(secs(90)), "90 seconds");
        assert_eq!(exact(secs(5400)), "90 minutes");
        assert_eq!(exact(secs(1)), "1 second");
        assert_eq!(exact(secs(86_400)), "24 hours");
        assert_eq!(exact(secs(90 * 86_400)), "90 days");
        assert_eq!(exact(secs(36 * 3600)), "36 hours");
    }

    #[test]
    fn what_happened_is_said_roughly() {
        assert_eq!(ago(secs(0)), "just now");
        assert_eq!(ago(secs(1)), "1 second ago");
        assert_eq!(ago(secs(150)), "2 minutes ago");
        assert_eq!(ago(secs(7200)), "2 hours ago");
        assert_eq!(ago(secs(86_400 * 3)), "3 days ago");
    }
}
