//! Text for a person's screen, the same in the `idem` program, the inbox
//! and the proxy: what a record holds shown escaped ([`visible`]), cut to
//! one line ([`clip`]), durations as people write them
//! ([`parse_duration`]) and put back into words ([`duration`]), and a JSON
//! value's type as a message names it ([`json_type`]).

pub mod duration;
mod escape;
pub mod timers;

use std::time::Duration;

pub use escape::{json_safe, needs_escape, visible};

const MS_PER_DAY: u64 = 86_400_000;

/// `text` cut to `max` characters, with an ellipsis when cut, on one line:
/// line breaks and other controls are shown escaped ([`visible`]),
/// so the cut counts what is seen.
pub fn clip(text: &str, max: usize) -> String {
    let one_line = visible(text);
    if one_line.chars().count() <= max {
        return one_line.into_owned();
    }
    let mut cut: String = one_line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `1h30m`, `90s`, `250ms`, `2d`, `1w`: numbers each followed by a unit.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let unit_len = rest[digits..]
            .bytes()
            .take_while(u8::is_ascii_alphabetic)
            .count();
        if digits == 0 || unit_len == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        let unit_ms: u64 = match &rest[digits..digits + unit_len] {
            "ms" => 1,
            "s" | "sec" | "secs" => 1000,
            "m" | "min" | "mins" => 60_000,
            "h" | "hr" | "hrs" => 3_600_000,
            "d" | "day" | "days" => MS_PER_DAY,
            "w" | "week" | "weeks" => 7 * MS_PER_DAY,
            _ => return None,
        };
        total = total.checked_add(Duration::from_millis(n.checked_mul(unit_ms)?))?;
        rest = rest[digits + unit_len..].trim_start();
    }
    Some(total)
}

/// The name of a JSON value's type as a message says it (`"a string"`,
/// `"an object"`, `"null"`): "`to` must be a string, not a number".
pub fn json_type(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clipped_text_stays_on_one_line() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("a\nb", 10), "a\\nb");
        assert_eq!(clip("abcdefghijkl", 6), "abcde…");
        assert_eq!(clip("\x1b[2Jok", 9), "\\u{1b}[2…");
    }

    #[test]
    fn durations_are_numbers_with_units() {
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        for bad in ["", "90", "s", "1x", "-1s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
