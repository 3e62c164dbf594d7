//! Times as people and scripts read them: RFC 3339 in UTC for JSON and
//! `show`, "3m ago" in tables, and the two forms `--since` accepts (a
//! duration back from now, or an RFC 3339 time).
//!
//! Written out rather than taken from a date crate: idem only ever needs
//! UTC instants after 1970, which is a page of arithmetic (Howard
//! Hinnant's `days_from_civil`; its inverse is `Timestamp::civil`).

use std::time::Duration;

use idem_runtime::clock::Timestamp;
pub(crate) use idem_runtime::text::parse_duration;

const MS_PER_DAY: u64 = 86_400_000;

/// `at` as RFC 3339 in UTC with milliseconds: `2026-05-01T09:30:00.250Z`.
pub(crate) fn rfc3339(at: Timestamp) -> String {
    at.rfc3339()
}

/// How long ago `at` was at `now` ("12s ago", "3m ago", "5h ago",
/// "2d ago"), or how far ahead it is ("in 30s").
pub(crate) fn relative(now: Timestamp, at: Timestamp) -> String {
    if at <= now {
        let ago = at.until(now);
        if ago < Duration::from_secs(1) {
            "just now".to_owned()
        } else {
            format!("{} ago", span(ago))
        }
    } else {
        format!("in {}", span(now.until(at)))
    }
}

/// How long from `since` to `now`, in its largest whole unit (`45s`,
/// `3m`, `5h`, `2d`): how long an unknown outcome has waited.
pub(crate) fn age(now: Timestamp, since: Timestamp) -> String {
    span(since.until(now))
}

/// A span in its largest whole unit: `45s`, `3m`, `5h`, `2d`.
fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// What `--since` means at `now`: a duration back from now (`90s`, `15m`,
/// `2h`, `7d`, `1w`, `1h30m`) or an RFC 3339 time (or a date, taken as
/// midnight UTC).
pub(crate) fn parse_since(given: &str, now: Timestamp) -> Result<Timestamp, String> {
    let given = given.trim();
    if let Some(back) = parse_duration(given) {
        let back = u64::try_from(back.as_millis()).unwrap_or(u64::MAX);
        return Ok(Timestamp(now.as_millis().saturating_sub(back)));
    }
    parse_rfc3339(given).ok_or_else(|| {
        format!(
            "--since {given:?} is neither a duration (90s, 15m, 2h, 7d, 1h30m) nor an RFC 3339 time (2026-05-01T09:00:00Z)"
        )
    })
}

/// An RFC 3339 time (`2026-05-01T09:00:00Z`, `2026-05-01T11:00:00.5+02:00`)
/// or a date (`2026-05-01`, midnight UTC), at or after 1970.
pub(crate) fn parse_rfc3339(text: &str) -> Option<Timestamp> {
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<u64> {
        let part = text.get(range)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    let days = days_from_civil(y as i64, m as u32, d as u32);
    if days < 0 {
        return None;
    }
    let midnight = days as u64 * MS_PER_DAY;
    if b.len() == 10 {
        return Some(Timestamp(midnight));
    }
    if !matches!(b[10], b'T' | b't' | b' ') || b.len() < 20 || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (h, min, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if h > 23 || min > 59 || s > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0;
    if b[i] == b'.' {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        // Milliseconds: the first three digits, the rest truncated.
        let frac = &text[i + 1..i + 1 + digits.min(3)];
        millis = frac.parse::<u64>().ok()? * 10u64.pow(3 - frac.len() as u32);
        i += 1 + digits;
    }
    let offset_ms: i64 = match &b[i..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (oh, om) = (num(i + 1..i + 3)?, num(i + 4..i + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let ms = ((oh * 60 + om) * 60_000) as i64;
            if *sign == b'+' {
                ms
            } else {
                -ms
            }
        }
        _ => return None,
    };
    // A leap second reads as the last millisecond of its minute.
    let in_day = (h * 3600 + min * 60 + s.min(59)) * 1000 + if s == 60 { 999 } else { millis };
    let utc = (midnight + in_day) as i64 - offset_ms;
    u64::try_from(utc).ok().map(Timestamp)
}

fn is_leap(y: u64) -> bool {
    y.is_multiple_of(4) && (!y.is_multiple_of(100) || y.is_multiple_of(400))
}

fn days_in_month(y: u64, m: u64) -> u64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_print_as_rfc3339_utc() {
        assert_eq!(rfc3339(Timestamp(0)), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century year) 12:34:56.789
        assert_eq!(
            rfc3339(Timestamp(951_827_696_789)),
            "2000-02-29T12:34:56.789Z"
        );
        assert_eq!(
            rfc3339(Timestamp(1_798_761_599_999)),
            "2026-12-31T23:59:59.999Z"
        );
    }

    #[test]
    fn rfc3339_round_trips_and_reads_offsets() {
        for ms in [0, 951_827_696_789, 1_798_761_599_999, 4_102_444_800_000] {
            assert_eq!(parse_rfc3339(&rfc3339(Timestamp(ms))), Some(Timestamp(ms)));
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
        assert_eq!(
            parse_since("15m", now),
            Ok(Timestamp(1_000_000_000 - 900_000))
        );
        assert_eq!(
            parse_since("1970-01-01T00:00:01Z", now),
            Ok(Timestamp(1000))
        );
        let err = parse_since("last tuesday", now).unwrap_err();
        assert!(
            err.contains("\"last tuesday\"") && err.contains("RFC 3339"),
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
        assert_eq!(relative(Timestamp(0), Timestamp(3 * MS_PER_DAY)), "in 3d");
    }
}
