//! Text from records, shown as what it is.
//!
//! Records hold text that a model or a downstream service wrote: error
//! messages, call ids, arguments, approval messages. Printed raw, a clear
//! screen, a cursor move, a carriage return or a bidirectional override in
//! that text could redraw what an operator reads, such as the `Arguments:`
//! line of the call they are about to approve. Every record-derived text the
//! program, the inbox and the proxy show to a person goes through [`visible`], which writes each
//! such character as an escape (`\u{1b}`, `\r`, `\u{202e}`); `--json` output
//! goes through [`json_safe`], which writes them as JSON escapes, so scripts
//! still read back the original strings.
//!
//! Backslashes are left as they are: a path stays readable, and a
//! backslash typed into a record cannot hide anything, it only shows.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` must not reach a terminal as itself: every C0 and C1 control
/// (tab, line feed, carriage return, escape and DEL included), every
/// Unicode bidirectional mark, embedding, override and isolate, and the
/// invisible format characters that can join, split or hide text
/// (zero-width spaces and joiners, the word joiner and invisible operators,
/// the byte-order mark, line and paragraph separators, the soft hyphen,
/// Hangul fillers, interlinear annotations and the tag characters that can
/// smuggle invisible text).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00ad}'
                | '\u{034f}'
                | '\u{061c}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{3164}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// `text` with every character [`needs_escape`] names written as a visible
/// escape: `\n`, `\r` and `\t` for those three, `\u{…}` (hexadecimal, as
/// Rust writes it) for the others. Text with none is borrowed, unchanged.
///
/// The result holds only printable characters, so escaping it again
/// changes nothing, and it stays on one line.
pub fn visible(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find(needs_escape) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Serialized JSON with every character [`needs_escape`] names written as a
/// JSON escape (`\u202e`, a surrogate pair above U+FFFF), so that it parses
/// back to the same strings and never carries one raw. `serde_json`
/// escapes C0 controls itself but writes DEL, C1 controls and bidirectional
/// overrides as they are.
///
/// Outside its strings JSON text is ASCII punctuation, digits, letters and
/// whitespace, which this leaves alone (the whitespace between tokens is
/// only ever space and line feed in what `serde_json` writes, and a raw line
/// feed never occurs inside a string).
pub fn json_safe(json: &str) -> Cow<'_, str> {
    let escape = |c: char| needs_escape(c) && !matches!(c, ' ' | '\n');
    let Some(first) = json.find(escape) else {
        return Cow::Borrowed(json);
    };
    let mut out = String::with_capacity(json.len() + 8);
    out.push_str(&json[..first]);
    for c in json[first..].chars() {
        if escape(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        for text in [
            "",
            "charge_card",
            "ada@example.com",
            "C:\\path",
            "café — ok ✓",
        ] {
            assert!(
                matches!(visible(text), Cow::Borrowed(t) if t == text),
                "{text}"
            );
        }
    }

    #[test]
    fn terminal_controls_are_written_as_escapes() {
        assert_eq!(visible("a\rb"), "a\\rb");
        assert_eq!(visible("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(
            visible("\x1b[2J\x1b[1A\x1b[2K"),
            "\\u{1b}[2J\\u{1b}[1A\\u{1b}[2K"
        );
        assert_eq!(visible("\x1b]0;approved\x07"), "\\u{1b}]0;approved\\u{7}");
        assert_eq!(visible("del\x7f"), "del\\u{7f}");
        assert_eq!(visible("csi\u{9b}2J"), "csi\\u{9b}2J");
        assert_eq!(visible("nul\0"), "nul\\u{0}");
    }

    #[test]
    fn bidirectional_and_invisible_characters_are_written_as_escapes() {
        // "Arguments: {"amount": 1}" that reads reversed on screen.
        assert_eq!(visible("1\u{202e}0001"), "1\\u{202e}0001");
        for c in [
            '\u{061c}',
            '\u{200e}',
            '\u{200f}',
            '\u{202a}',
            '\u{202b}',
            '\u{202c}',
            '\u{202d}',
            '\u{202e}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{200b}',
            '\u{200c}',
            '\u{200d}',
            '\u{2060}',
            '\u{feff}',
            '\u{2028}',
            '\u{2029}',
            '\u{e0041}',
        ] {
            let text = format!("a{c}b");
            let shown = visible(&text);
            assert_eq!(shown, format!("a\\u{{{:x}}}b", c as u32));
            assert!(!shown.contains(c));
        }
    }

    #[test]
    fn escaping_twice_changes_nothing_and_keeps_one_line() {
        let text = "x\x1b]0;t\x07\r\n\u{202e}\u{85}y";
        let once = visible(text).into_owned();
        assert_eq!(visible(&once), once);
        assert!(!once.chars().any(needs_escape), "{once}");
        assert_eq!(once.lines().count(), 1);
    }

    #[test]
    fn json_keeps_its_strings_and_loses_its_raw_controls() {
        let original = "pay \u{202e}01\u{7f}\u{9b}2J \x1b]0;t\x07 \u{e0041}";
        let value = serde_json::json!({ "note": original, "list": [1, "\r"] });
        let json = serde_json::to_string_pretty(&value).unwrap();
        assert!(json.contains('\u{202e}'), "serde_json writes U+202E raw");
        let safe = json_safe(&json);
        assert!(
            !safe.chars().any(|c| needs_escape(c) && c != '\n'),
            "{safe}"
        );
        assert!(
            safe.contains("\\u202e") && safe.contains("\\udb40\\udc41"),
            "{safe}"
        );
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
    }
}
