//! Times as people and scripts read them: RFC 3339 in UTC for JSON and
//! `show`, "3m ago" in tables; and the times and spans the command line
//! takes, read by clap through the value parsers here ([`duration`] and
//! [`since`]), so that a bad one is refused naming its option.
//!
//! The calendar math is jiff's, here and in `Timestamp::rfc3339`. What is
//! written out is only the grammar `--since` and `--at` accept: RFC 3339
//! (or a date), which is stricter than the ISO 8601 jiff reads.

use std::time::Duration;

use idem_runtime::clock::Timestamp;
use idem_runtime::text::duration::short;
use idem_runtime::text::parse_duration;

/// What a duration looks like, for messages.
const DURATIONS: &str = "90s, 15m, 2h, 7d or 1h30m";

pub(crate) use idem_runtime::text::duration::relative;

/// How long from `since` to `now`, in its largest whole unit (`45s`,
/// `3m`, `5h`, `2d`): how long an unknown outcome has waited.
pub(crate) fn age(now: Timestamp, since: Timestamp) -> String {
    short(since.until(now))
}

/// What `--since` names: a span back from the store's time, or a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Since {
    /// This long before now (`15m`).
    Back(Duration),
    /// This time (`2026-05-01T09:00:00Z`; a date is its midnight UTC).
    At(Timestamp),
}

impl Since {
    /// The time it names when it is `now`.
    pub(crate) fn at(self, now: Timestamp) -> Timestamp {
        match self {
            Since::Back(back) => {
                let back = u64::try_from(back.as_millis()).unwrap_or(u64::MAX);
                Timestamp(now.as_millis().saturating_sub(back))
            }
            Since::At(at) => at,
        }
    }
}

/// clap's parser of a duration option (`--ttl`, `--overdue`,
/// `--session`): `90s`, `15m`, `2h`, `7d`, `1w`, `1h30m`, `250ms`.
pub(crate) fn duration(given: &str) -> Result<Duration, String> {
    parse_duration(given).ok_or_else(|| format!("expected a duration such as {DURATIONS}"))
}

/// clap's parser of `--since`: a duration back from now (`90s`, `15m`,
/// `2h`, `7d`, `1w`, `1h30m`) or an RFC 3339 time (or a date, taken as
/// midnight UTC).
pub(crate) fn since(given: &str) -> Result<Since, String> {
    let given = given.trim();
    if let Some(back) = parse_duration(given) {
        return Ok(Since::Back(back));
    }
    parse_rfc3339(given).map(Since::At).ok_or_else(|| {
        format!("neither a duration ({DURATIONS}) nor an RFC 3339 time (2026-05-01T09:00:00Z)")
    })
}

/// An RFC 3339 time (`2026-05-01T09:00:00Z`, `2026-05-01T11:00:00.5+02:00`)
/// or a date (`2026-05-01`, midnight UTC), at or after 1970. Fractions
/// past milliseconds are truncated; a leap second reads as the last
/// millisecond of its minute.
fn parse_rfc3339(text: &str) -> Option<Timestamp> {
    let at = if shaped(text.as_bytes(), b"dddd-dd-dd") {
        let date: jiff::civil::Date = text.parse().ok()?;
        jiff::tz::Offset::UTC.to_timestamp(date.into()).ok()?
    } else {
        let (canonical, leap) = canonical_date_time(text)?;
        let at: jiff::Timestamp = canonical.parse().ok()?;
        if leap {
            // jiff reads second 60 as 59.
            at.checked_add(Duration::from_millis(999)).ok()?
        } else {
            at
        }
    };
    if at < jiff::Timestamp::UNIX_EPOCH {
        return None;
    }
    u64::try_from(at.as_millisecond()).ok().map(Timestamp)
}

/// An RFC 3339 date-time as jiff reads it exactly: `T` between the date and
/// the time, `Z` or an offset, a fraction of at most three digits (the rest
/// truncated), second 60 as 59 with no fraction; and whether it was a leap
/// second. `None` for anything else RFC 3339 does not allow (jiff's ISO
/// 8601 would also take `10:00Z` or `+0200`).
fn canonical_date_time(text: &str) -> Option<(String, bool)> {
    let b = text.as_bytes();
    let (date, rest) = b.split_at_checked(10)?;
    let (&separator, rest) = rest.split_first()?;
    let (time, mut rest) = rest.split_at_checked(8)?;
    if !shaped(date, b"dddd-dd-dd")
        || !matches!(separator, b'T' | b't' | b' ')
        || !shaped(time, b"dd:dd:dd")
    {
        return None;
    }
    let mut fraction: &[u8] = &[];
    if let Some(after_dot) = rest.strip_prefix(b".") {
        let digits = after_dot.iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        fraction = &after_dot[..digits.min(3)];
        rest = &after_dot[digits..];
    }
    let offset = match rest {
        [b'Z' | b'z'] => "Z",
        [b'+' | b'-', ..] if shaped(&rest[1..], b"dd:dd") => &text[text.len() - 6..],
        _ => return None,
    };
    let leap = &time[6..] == b"60";
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..10]);
    out.push('T');
    if leap {
        out.push_str(&text[11..17]);
        out.push_str("59");
    } else {
        out.push_str(&text[11..19]);
        if !fraction.is_empty() {
            out.push('.');
            out.extend(fraction.iter().map(|&c| char::from(c)));
        }
    }
    out.push_str(offset);
    Some((out, leap))
}

/// Whether `b` has `pattern`'s shape, where `d` is any ASCII digit and
/// every other byte stands for itself.
fn shaped(b: &[u8], pattern: &[u8]) -> bool {
    b.len() == pattern.len()
        && b.iter().zip(pattern).all(|(&c, &p)| match p {
            b'd' => c.is_ascii_digit(),
            p => c == p,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_print_as_rfc3339_utc() {
        assert_eq!(Timestamp(0).rfc3339(), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century year) 12:34:56.789
        assert_eq!(
            Timestamp(951_827_696_789).rfc3339(),
            "2000-02-29T12:34:56.789Z"
        );
        assert_eq!(
            Timestamp(1_798_761_599_999).rfc3339(),
            "2026-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn rfc3339_round_trips_and_reads_offsets() {
        for ms in [0, 951_827_696_789, 1_798_761_599_999, 4_102_444_800_000] {
            assert_eq!(parse_rfc3339(&Timestamp(ms).rfc3339()), Some(Timestamp(ms)));
        }
        assert_eq!(
            parse_rfc3339("2000-02-29T14:34:56.789+02:00"),
            Some(Timestamp(951_827_696_789))
        );
        assert_eq!(
            parse_rfc3339("2000-02-29t12:34:56.7891234z"),
            Some(Timestamp(951_827_696_789))
        );
        assert_eq!(
            parse_rfc3339("2000-02-29"),
            Some(Timestamp(951_782_400_000))
        );
        for bad in [
            "2001-02-29",
            "2026-13-01",
            "2026-05-01T24:00:00Z",
            "2026-05-01T10:00:00",
            "2026-05-01T10:00Z",
            "1969-12-31T23:59:59Z",
            "2026-05-01T10:00:00.Z",
            "yesterday",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn rfc3339_is_read_as_rfc3339_allows_and_no_further() {
        // A space for the `T`, a leap second (the last millisecond of its
        // minute), a long fraction, a negative offset.
        assert_eq!(parse_rfc3339("1970-01-01 00:00:01Z"), Some(Timestamp(1000)));
        assert_eq!(
            parse_rfc3339("1970-01-01T00:00:60.25Z"),
            Some(Timestamp(59_999))
        );
        assert_eq!(
            parse_rfc3339("1970-01-01T00:00:01.123456789012Z"),
            Some(Timestamp(1123))
        );
        assert_eq!(
            parse_rfc3339("1969-12-31T23:00:00-01:00"),
            Some(Timestamp(0))
        );
        // ISO 8601 that RFC 3339 does not allow, and the instant before
        // 1970 by less than a millisecond.
        for bad in [
            "2026-05-01T10:00:00+0200",
            "2026-05-01T10:00:00+02",
            "2026-05-01T10:00:00,5Z",
            "2026-05-01T10:00:00Z[UTC]",
            "20260501T100000Z",
            "+002026-05-01T10:00:00Z",
            "2026-05-01T10",
            "20260501",
            "1969-12-31T23:59:59.9999Z",
            "2026-05-01T10:00:00Z ",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn durations_are_numbers_with_units() {
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1h 30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2d"), Some(Duration::from_secs(172_800)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        for bad in ["", "90", "m", "3 parsecs", "-5m"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn since_reads_either_form() {
        let now = Timestamp(1_000_000_000);
        let at = |given: &str| since(given).map(|since| since.at(now));
        assert_eq!(at("15m"), Ok(Timestamp(1_000_000_000 - 900_000)));
        assert_eq!(at("1970-01-01T00:00:01Z"), Ok(Timestamp(1000)));
        let err = since("last tuesday").unwrap_err();
        assert!(
            err.contains("duration") && err.contains("RFC 3339"),
            "{err}"
        );
    }

    #[test]
    fn ages_read_in_their_largest_unit() {
        let now = Timestamp(100_000_000);
        let ago = |ms: u64| relative(now, Timestamp(now.0 - ms));
        assert_eq!(ago(500), "just now");
        assert_eq!(ago(45_000), "45s ago");
        assert_eq!(ago(180_000), "3m ago");
        assert_eq!(ago(5 * 3_600_000), "5h ago");
        assert_eq!(relative(now, Timestamp(now.0 + 30_000)), "in 30s");
        assert_eq!(relative(Timestamp(0), Timestamp(3 * 86_400_000)), "in 3d");
    }
}
