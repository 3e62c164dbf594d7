//! Canonical JSON: RFC 8785, the JSON Canonicalization Scheme (JCS).
//!
//! Two JSON texts that mean the same thing canonicalize to the same bytes:
//! object members are sorted by the UTF-16 code units of their names,
//! insignificant whitespace is dropped, strings use the shortest escapes of
//! ECMAScript's `JSON.stringify`, and numbers are written as ECMAScript's
//! `Number.prototype.toString` writes the IEEE-754 double they denote, so
//! `1`, `1.0` and `1e0` are all `1`.
//!
//! JCS treats every number as a double. An integer that a double cannot hold
//! exactly (beyond ±2^53) would silently become a *different* integer and
//! could make two different argument sets look equal, so it is refused with
//! [`CanonicalError::InexactInteger`]; send such values as strings.

use serde::Serialize;
use serde_json::Value;

mod ser;

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// A float was NaN or infinite; JSON cannot express it.
    #[error("non-finite number at `{path}`: JSON (and RFC 8785) cannot express NaN or infinity")]
    NonFinite {
        /// JSON-pointer-like path of the offending value.
        path: String,
    },
    /// An integer outside ±2^53 that an IEEE-754 double cannot hold exactly.
    #[error("integer {value} at `{path}` cannot be represented exactly in canonical JSON (RFC 8785 numbers are IEEE-754 doubles); send it as a string")]
    InexactInteger {
        /// JSON-pointer-like path of the offending value.
        path: String,
        /// The integer as written.
        value: String,
    },
    /// The value could not be serialized to JSON at all.
    #[error("arguments could not be serialized to JSON: {0}")]
    Serialize(String),
}

/// Largest integer magnitude every double between 0 and it can represent.
const MAX_EXACT: u64 = 1 << 53;

/// Canonicalize a JSON value into RFC 8785 bytes (UTF-8).
pub fn canonicalize(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::with_capacity(64);
    write_value(&mut out, value)?;
    Ok(out)
}

/// Serialize `value` with serde straight into canonical JSON text.
///
/// The result equals `canonicalize(&serde_json::to_value(value)?)`, but no
/// `Value` is built, and NaN or infinity is refused with
/// [`CanonicalError::NonFinite`] where `serde_json::to_value` would silently
/// write `null`.
pub fn to_canonical_string<T: Serialize + ?Sized>(value: &T) -> Result<String, CanonicalError> {
    ser::to_string(value)
}

fn write_value(out: &mut String, value: &Value) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item).map_err(|e| e.under(&i.to_string()))?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            // Maps usually iterate in JCS order already (a BTreeMap sorts by
            // UTF-8 bytes, which agrees with UTF-16 order unless names mix
            // U+E000..U+FFFF with astral characters): sort only when not.
            let in_order = map
                .keys()
                .zip(map.keys().skip(1))
                .all(|(a, b)| utf16_order(a, b).is_le());
            if in_order {
                write_members(out, map.iter())?;
            } else {
                let mut members: Vec<(&String, &Value)> = map.iter().collect();
                members.sort_by(|(a, _), (b, _)| utf16_order(a, b));
                write_members(out, members.into_iter())?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// RFC 8785 §3.2.3: names sort by their UTF-16 code units.
///
/// UTF-8 bytes sort by code point, which agrees with UTF-16 except between
/// U+E000..=U+FFFF and astral characters; so only the first character
/// that differs is compared as UTF-16.
pub(super) fn utf16_order(a: &str, b: &str) -> std::cmp::Ordering {
    let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    // The bytes before `common` agree, so this is a boundary in both.
    let start = (0..=common)
        .rev()
        .find(|&i| a.is_char_boundary(i))
        .unwrap_or(0);
    match (a[start..].chars().next(), b[start..].chars().next()) {
        (Some(x), Some(y)) => {
            let (mut ux, mut uy) = ([0u16; 2], [0u16; 2]);
            x.encode_utf16(&mut ux).cmp(&y.encode_utf16(&mut uy))
        }
        // One is a prefix of the other.
        _ => a.len().cmp(&b.len()),
    }
}

fn write_members<'a>(
    out: &mut String,
    members: impl Iterator<Item = (&'a String, &'a Value)>,
) -> Result<(), CanonicalError> {
    for (i, (name, member)) in members.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, name);
        out.push(':');
        write_value(out, member).map_err(|e| e.under(name))?;
    }
    Ok(())
}

impl CanonicalError {
    /// The path is built while the error travels up, so the success path
    /// pays nothing for it.
    fn under(mut self, segment: &str) -> Self {
        if let CanonicalError::NonFinite { path } | CanonicalError::InexactInteger { path, .. } =
            &mut self
        {
            let rest = if path == "/" { "" } else { path.as_str() };
            *path = format!("/{segment}{rest}");
        }
        self
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) -> Result<(), CanonicalError> {
    let double = if let Some(u) = n.as_u64() {
        if u > MAX_EXACT && (u as f64) as u64 != u {
            return Err(CanonicalError::InexactInteger {
                path: "/".to_owned(),
                value: u.to_string(),
            });
        }
        u as f64
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() > MAX_EXACT && (i as f64) as i64 != i {
            return Err(CanonicalError::InexactInteger {
                path: "/".to_owned(),
                value: i.to_string(),
            });
        }
        i as f64
    } else {
        n.as_f64().unwrap_or(f64::NAN)
    };
    write_double(out, double)
}

/// ECMAScript's `Number.prototype.toString` of a finite double.
pub(super) fn write_double(out: &mut String, double: f64) -> Result<(), CanonicalError> {
    if !double.is_finite() {
        return Err(CanonicalError::NonFinite {
            path: "/".to_owned(),
        });
    }
    if double == 0.0 {
        // ECMAScript prints -0 as "0".
        out.push('0');
    } else {
        out.push_str(ryu_js::Buffer::new().format_finite(double));
    }
    Ok(())
}

/// Whether `bytes` hold a control character, a quote or a backslash: eight
/// bytes at a time, with the classic "has a byte less than n" bit tricks
/// (exact for n <= 128).
fn needs_escape(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    let less_than = |v: u64, n: u8| v.wrapping_sub(ONES * u64::from(n)) & !v & HIGH != 0;
    let has = |v: u64, b: u8| less_than(v ^ (ONES * u64::from(b)), 1);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let v = u64::from_ne_bytes(chunk.try_into().expect("chunks of eight"));
        if less_than(v, 0x20) || has(v, b'"') || has(v, b'\\') {
            return true;
        }
    }
    chunks
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

pub(super) fn write_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push('"');
    if !needs_escape(bytes) {
        // Nothing to escape (the usual case).
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        // Only ASCII needs escaping, so slicing at `i` is on a char boundary.
        let escape: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            b'\t' => "\\t",
            b'\n' => "\\n",
            0x0C => "\\f",
            b'\r' => "\\r",
            0x00..=0x1F => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_escape_agrees_with_a_byte_by_byte_check() {
        let slow = |b: &[u8]| b.iter().any(|&c| c < 0x20 || c == b'"' || c == b'\\');
        for len in 0..20 {
            for pos in 0..len {
                for byte in 0..=255u8 {
                    let mut text = vec![b'a'; len];
                    text[pos] = byte;
                    assert_eq!(needs_escape(&text), slow(&text), "{text:?}");
                }
            }
        }
    }

    #[test]
    fn utf16_order_agrees_with_comparing_utf16_code_units() {
        let names = [
            "",
            "a",
            "ab",
            "b",
            "\u{7f}",
            "\u{80}",
            "\u{e000}",
            "\u{ffff}",
            "\u{10000}",
            "\u{1f600}",
            "a\u{e000}",
            "a\u{1f600}",
            "\u{e000}a",
            "\u{1f600}a",
            "é",
            "éa",
        ];
        for a in names {
            for b in names {
                assert_eq!(
                    utf16_order(a, b),
                    a.encode_utf16().cmp(b.encode_utf16()),
                    "{a:?} vs {b:?}"
                );
            }
        }
    }

    fn canon(text: &str) -> String {
        canonicalize(&serde_json::from_str(text).unwrap()).unwrap()
    }

    /// RFC 8785 §3.2.2.
    #[test]
    fn rfc_8785_example() {
        let input = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        assert_eq!(
            canon(input),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    /// RFC 8785 §3.2.3: sorting by UTF-16 code units, not by UTF-8 bytes or
    /// code points (the emoji sorts before U+FB33).
    #[test]
    fn rfc_8785_sorting() {
        let input = r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let out = canon(input);
        let names: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(&out)
            .unwrap()
            .values()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        // serde_json's Map is ordered by key; re-derive the order from the text.
        let order: Vec<usize> = [
            "Carriage Return",
            "One",
            "Control",
            "Latin Small",
            "Euro Sign",
            "Emoji",
            "Hebrew",
        ]
        .iter()
        .map(|n| out.find(n).unwrap())
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{out}");
        assert_eq!(names.len(), 7);
    }

    /// RFC 8785 Appendix B: IEEE-754 doubles and their canonical spelling.
    #[test]
    fn rfc_8785_numbers() {
        let cases: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for &(bits, want) in cases {
            let v = Value::from(f64::from_bits(bits));
            assert_eq!(canonicalize(&v).unwrap(), want, "bits {bits:#018x}");
            // Parsing the canonical text back gives the same double.
            assert_eq!(canon(want), want);
        }
    }

    #[test]
    fn spelling_of_numbers_and_whitespace_do_not_matter() {
        assert_eq!(canon("[1, 1.0, 1e0, 10e-1, 100E-2]"), "[1,1,1,1,1]");
        assert_eq!(
            canon(r#"{ "b" : 2 , "a" : { "y":1,"x":[ ] } }"#),
            r#"{"a":{"x":[],"y":1},"b":2}"#
        );
    }

    #[test]
    fn big_integers_that_doubles_cannot_hold_are_refused() {
        let err = canonicalize(&serde_json::json!({"id": 9007199254740993u64})).unwrap_err();
        assert_eq!(
            err,
            CanonicalError::InexactInteger {
                path: "/id".into(),
                value: "9007199254740993".into()
            }
        );
        // Exactly representable large integers are fine.
        assert_eq!(
            canonicalize(&serde_json::json!(1u64 << 60)).unwrap(),
            "1152921504606847000"
        );
        assert!(canonicalize(&serde_json::json!(-9007199254740993i64)).is_err());
    }

    #[test]
    fn non_finite_typed_arguments_are_refused() {
        #[derive(Serialize)]
        struct Args {
            amount: f64,
        }
        let err = to_canonical_string(&Args { amount: f64::NAN }).unwrap_err();
        assert_eq!(
            err,
            CanonicalError::NonFinite {
                path: "/amount".into()
            }
        );
        assert_eq!(
            to_canonical_string(&Args { amount: 1.5 }).unwrap(),
            r#"{"amount":1.5}"#
        );
    }

    /// Objects share per-thread buffers: one abandoned half-way by an
    /// error, or nested in another being reordered, leaves nothing behind
    /// in the next.
    #[test]
    fn objects_after_a_failed_or_nested_object_are_unaffected() {
        #[derive(Serialize)]
        struct Inner {
            z: f64,
            a: u8,
        }
        #[derive(Serialize)]
        struct Outer {
            y: Inner,
            b: Vec<Inner>,
        }
        let outer = |z: f64| Outer {
            y: Inner { z, a: 1 },
            b: vec![Inner { z: 2.0, a: 3 }, Inner { z: 4.0, a: 5 }],
        };
        let err = to_canonical_string(&outer(f64::INFINITY)).unwrap_err();
        assert_eq!(
            err,
            CanonicalError::NonFinite {
                path: "/y/z".into()
            }
        );
        let expected = r#"{"b":[{"a":3,"z":2},{"a":5,"z":4}],"y":{"a":1,"z":1.5}}"#;
        for _ in 0..3 {
            assert_eq!(to_canonical_string(&outer(1.5)).unwrap(), expected);
        }
    }

    /// The direct writer and the `Value` route agree on every shape serde
    /// can produce.
    #[test]
    fn typed_and_value_routes_agree() {
        use std::collections::{BTreeMap, HashMap};

        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Nested {
            zeta: Option<u8>,
            alpha_beta: Vec<f32>,
            unit: (),
        }

        #[derive(Serialize)]
        enum Shape {
            Unit,
            Newtype(i64),
            Tuple(u8, String),
            Struct { z: bool, a: char },
        }

        #[derive(Serialize)]
        struct Args {
            to: String,
            subject: &'static str,
            amount: f64,
            count: u64,
            negative: i32,
            big: u64,
            shapes: Vec<Shape>,
            nested: Nested,
            by_number: BTreeMap<u32, String>,
            by_name: HashMap<String, serde_json::Value>,
            emoji_and_private_use: BTreeMap<String, u8>,
            bytes: serde_bytes_like::Bytes,
            #[serde(flatten)]
            extra: BTreeMap<String, i8>,
        }

        mod serde_bytes_like {
            pub(crate) struct Bytes(pub Vec<u8>);
            impl serde::Serialize for Bytes {
                fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                    s.serialize_bytes(&self.0)
                }
            }
        }

        let args = Args {
            to: "ada@example.com".into(),
            subject: "Tab\there \"quoted\" \u{7f} \u{1} é €",
            amount: 1e21,
            count: 9_007_199_254_740_992,
            negative: -0,
            big: 1 << 60,
            shapes: vec![
                Shape::Unit,
                Shape::Newtype(-42),
                Shape::Tuple(7, "x".into()),
                Shape::Struct { z: true, a: 'q' },
            ],
            nested: Nested {
                zeta: None,
                alpha_beta: vec![0.1, -0.0, 3.5],
                unit: (),
            },
            by_number: [(10, "ten".into()), (9, "nine".into())].into(),
            by_name: [("b".to_owned(), serde_json::json!({"y": [1, 2.50, null]}))].into(),
            emoji_and_private_use: [("\u{1F600}".to_owned(), 1), ("\u{FB33}".to_owned(), 2)].into(),
            bytes: serde_bytes_like::Bytes(vec![0, 255]),
            extra: [("0extra".to_owned(), -1)].into(),
        };
        let direct = to_canonical_string(&args).unwrap();
        let via_value = canonicalize(&serde_json::to_value(&args).unwrap()).unwrap();
        assert_eq!(direct, via_value);
        // Spot checks of the tricky parts.
        assert!(direct.contains(r#""amount":1e+21"#), "{direct}");
        assert!(
            direct.contains(r#""by_number":{"10":"ten","9":"nine"}"#),
            "{direct}"
        );
        assert!(direct.find("\u{1F600}").unwrap() < direct.find("\u{FB33}").unwrap());
    }

    #[test]
    fn typed_route_reports_paths_and_refuses_inexact_integers() {
        #[derive(Serialize)]
        struct Inner {
            values: Vec<f64>,
        }
        #[derive(Serialize)]
        struct Args {
            inner: Inner,
            id: u64,
        }
        let err = to_canonical_string(&Args {
            inner: Inner {
                values: vec![1.0, f64::INFINITY],
            },
            id: 1,
        })
        .unwrap_err();
        assert_eq!(
            err,
            CanonicalError::NonFinite {
                path: "/inner/values/1".into()
            }
        );
        let err = to_canonical_string(&Args {
            inner: Inner { values: vec![] },
            id: 9_007_199_254_740_993,
        })
        .unwrap_err();
        assert_eq!(
            err,
            CanonicalError::InexactInteger {
                path: "/id".into(),
                value: "9007199254740993".into()
            }
        );
    }
}
