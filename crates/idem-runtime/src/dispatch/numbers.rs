//! Numbers as JSON Schema reads them.
//!
//! JSON Schema counts a number with a zero fractional part as an integer
//! (`1000.0` and `1e3` are valid for `"type": "integer"`), and so does the
//! key derivation (RFC 8785 writes all three as `1000`). serde does not:
//! `1000.0` for a `u32` field is "invalid type: floating point". So before
//! the arguments are checked and deserialized, the dispatcher writes every
//! integral float as the integer it is, and a model that spells an integer
//! `1000.0` is not refused for it.

use serde_json::{Number, Value};

/// 2^53: every integer of at most this magnitude is a double, exactly.
const MAX_EXACT: f64 = 9_007_199_254_740_992.0;

/// Rewrites, throughout `value` (objects and arrays, at any depth), each
/// float whose value is an integer of magnitude at most 2^53 as that
/// integer. Other numbers are left alone: `1000.5` stays a float (and an
/// integer field refuses it), and so does `1e300`, which no `i64` holds.
///
/// A number means the IEEE-754 double it denotes, as in the key derivation
/// (`docs/keys.md`), so the key does not change: the canonical form of
/// `1000.0` already is `1000`.
pub(super) fn integral_floats_as_integers(value: &mut Value) {
    // A loop over a stack, not recursion: arguments may nest deeply.
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::Number(n) => {
                if let Some(integer) = as_integer(n) {
                    *n = integer.into();
                }
            }
            Value::Array(items) => pending.extend(items.iter_mut()),
            Value::Object(members) => pending.extend(members.values_mut()),
            Value::Null | Value::Bool(_) | Value::String(_) => {}
        }
    }
}

/// The integer a float denotes, when it denotes one exactly.
fn as_integer(n: &Number) -> Option<i64> {
    if !n.is_f64() {
        return None; // already an integer
    }
    let double = n.as_f64()?;
    // -0.0 becomes 0, as RFC 8785 writes it.
    (double.fract() == 0.0 && double.abs() <= MAX_EXACT).then_some(double as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn normalised(text: &str) -> Value {
        let mut value: Value = serde_json::from_str(text).unwrap();
        integral_floats_as_integers(&mut value);
        value
    }

    #[test]
    fn integral_floats_become_integers_everywhere() {
        let value = normalised(
            r#"{"a": 1000.0, "b": 1e3, "c": [2.0, -3e0, {"d": 10E-1}], "e": {"f": -0.0}}"#,
        );
        assert_eq!(
            value,
            json!({"a": 1000, "b": 1000, "c": [2, -3, {"d": 1}], "e": {"f": 0}})
        );
        assert!(value["a"].is_i64() && value["c"][2]["d"].is_i64());
    }

    #[test]
    fn other_numbers_are_left_alone() {
        let text = r#"{"half": 1000.5, "small": 1e-7, "huge": 1e300, "past_2_53": 9007199254740994.0, "int": 18446744073709551615, "neg": -9223372036854775808, "s": "1.0"}"#;
        let value = normalised(text);
        assert_eq!(value, serde_json::from_str::<Value>(text).unwrap());
        assert!(value["half"].is_f64() && value["huge"].is_f64() && value["past_2_53"].is_f64());
        assert_eq!(value["s"], "1.0");
    }

    #[test]
    fn the_bounds_are_plus_and_minus_2_53() {
        let value = normalised(r#"[9007199254740992.0, -9007199254740992.0]"#);
        assert_eq!(
            value,
            json!([9_007_199_254_740_992_i64, -9_007_199_254_740_992_i64])
        );
    }

    #[test]
    fn deep_nesting_does_not_overflow_the_stack() {
        let mut value = json!(1.0);
        for _ in 0..100_000 {
            value = Value::Array(vec![value]);
        }
        integral_floats_as_integers(&mut value);
        let mut inner = &value;
        while let Value::Array(items) = inner {
            inner = &items[0];
        }
        assert_eq!(*inner, json!(1));
        // Dropping a Value this deep recurses; leak it in the test.
        std::mem::forget(value);
    }
}
