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

/// Whether `c` must not reach a terminal as itself, wherever it stands:
/// every control (general category Cc: tab, line feed, carriage return,
/// escape, DEL and the C1 controls included), every format character
/// (Cf: the bidirectional marks, embeddings, overrides and isolates,
/// zero-width spaces and joiners, the word joiner, invisible operators,
/// the byte-order mark, the soft hyphen, interlinear annotations, the tag
/// characters that can smuggle invisible text), line and paragraph
/// separators (Zl, Zp), private-use, surrogate and unassigned code points
/// (Co, Cs, Cn), every variation selector, and the blank letters and
/// symbols that render as nothing (the Hangul fillers, the combining
/// grapheme joiner, the Braille blank, the Mongolian vowel separator).
/// Categories, not a list, so that a character Unicode adds to them is
/// covered.
///
/// Combining marks depend on where they stand: [`visible`] escapes those
/// that do not follow a letter, and every one past the third on one
/// letter.
pub fn needs_escape(c: char) -> bool {
    use unicode_general_category::{get_general_category, GeneralCategory as G};
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    variation_selector(c)
        || matches!(
            get_general_category(c),
            G::Control
                | G::Format
                | G::LineSeparator
                | G::ParagraphSeparator
                | G::PrivateUse
                | G::Surrogate
                | G::Unassigned
        )
        || matches!(
            c,
            '\u{034f}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{180e}'
                | '\u{2800}'
                | '\u{3164}'
                | '\u{ffa0}'
        )
}

/// Whether `c` selects a variant of the character before it (and shows
/// nothing itself).
fn variation_selector(c: char) -> bool {
    matches!(c, '\u{180b}'..='\u{180f}' | '\u{fe00}'..='\u{fe0f}' | '\u{e0100}'..='\u{e01ef}')
}

/// Whether `c` is a combining mark (Mn, Mc, Me): it draws on the character
/// before it.
fn combining(c: char) -> bool {
    use unicode_general_category::{get_general_category, GeneralCategory as G};
    !c.is_ascii()
        && matches!(
            get_general_category(c),
            G::NonspacingMark | G::SpacingMark | G::EnclosingMark
        )
}

/// Whether `c` is a letter (L*), on which combining marks belong.
fn letter(c: char) -> bool {
    use unicode_general_category::{get_general_category, GeneralCategory as G};
    matches!(
        get_general_category(c),
        G::UppercaseLetter
            | G::LowercaseLetter
            | G::TitlecaseLetter
            | G::ModifierLetter
            | G::OtherLetter
    )
}

/// The most combining marks kept on one letter: enough for any script's
/// accents, too few to stack text over its neighbours.
const MARKS_PER_LETTER: usize = 3;

/// `text` with every character [`needs_escape`] names written as a visible
/// escape: `\n`, `\r` and `\t` for those three, `\u{…}` (hexadecimal, as
/// Rust writes it) for the others; so too a combining mark that follows
/// no letter (`ch_42` with a mark on its `2` shows the mark), and every
/// mark past the third on one letter. Text with none is borrowed,
/// unchanged.
///
/// The result holds only printable characters, so escaping it again
/// changes nothing, and it stays on one line.
pub fn visible(text: &str) -> Cow<'_, str> {
    // Marks kept on the letter last written (`None`: no letter last).
    let mut marks: Option<usize> = None;
    let mut escaped = None;
    for (at, c) in text.char_indices() {
        let escape = match combining(c) && !needs_escape(c) {
            true => match marks {
                Some(n) if n < MARKS_PER_LETTER => {
                    marks = Some(n + 1);
                    false
                }
                _ => true,
            },
            false => needs_escape(c),
        };
        if !combining(c) || escape {
            marks = (!escape && letter(c)).then_some(0);
        }
        if escape || escaped.is_some() {
            let out: &mut String = escaped.get_or_insert_with(|| {
                let mut out = String::with_capacity(text.len() + 8);
                out.push_str(&text[..at]);
                out
            });
            match (escape, c) {
                (true, '\n') => out.push_str("\\n"),
                (true, '\r') => out.push_str("\\r"),
                (true, '\t') => out.push_str("\\t"),
                (true, c) => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                (false, c) => out.push(c),
            }
        }
    }
    match escaped {
        Some(out) => Cow::Owned(out),
        None => Cow::Borrowed(text),
    }
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
    fn invisible_characters_are_found_by_category_and_marks_by_their_place() {
        // Issue 50's: a variation selector (supplement), an emoji's, a
        // Mongolian one, the Braille blank, and marks on a digit.
        for c in [
            '\u{e0100}',
            '\u{fe0f}',
            '\u{180b}',
            '\u{2800}',
            '\u{e000}',
            '\u{2065}',
        ] {
            assert!(needs_escape(c), "{:x}", c as u32);
            assert_eq!(
                visible(&format!("ch_42{c}")),
                format!("ch_42\\u{{{:x}}}", c as u32)
            );
        }
        assert_eq!(visible("ch_42\u{301}\u{302}"), "ch_42\\u{301}\\u{302}");
        assert_eq!(visible("\u{301}x"), "\\u{301}x", "a mark on nothing");
        // Accents on letters stay, up to three on one letter.
        for text in ["cafe\u{301}", "नमस्ते", "e\u{301}\u{302}\u{303}", "über"] {
            assert!(matches!(visible(text), Cow::Borrowed(_)), "{text}");
        }
        assert_eq!(
            visible("e\u{301}\u{302}\u{303}\u{304}\u{305}"),
            "e\u{301}\u{302}\u{303}\\u{304}\\u{305}"
        );
        let once = visible("a\u{301}\u{302}\u{303}\u{304}2\u{301}\u{fe0f}");
        assert_eq!(visible(&once), once, "escaping twice changes nothing");
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
