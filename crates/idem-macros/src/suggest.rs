//! "Did you mean …?" for misspelled option and class names.

/// The candidate closest to `given`, if it is close enough to be what the
/// user meant.
pub(crate) fn closest<'a>(given: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let given = given.to_ascii_lowercase();
    let (best, distance) = candidates
        .iter()
        .map(|c| (*c, strsim::levenshtein(&given, c)))
        .min_by_key(|(_, d)| *d)?;
    // A third of the word may be wrong; a prefix (`idempotent` for
    // `idempotent_write`) is also a strong enough hint.
    let threshold = (given.len().max(best.len()) / 3).max(1);
    if distance <= threshold || (given.len() >= 3 && best.starts_with(&given)) {
        Some(best)
    } else {
        None
    }
}

/// ": did you mean `x`?" or nothing.
pub(crate) fn did_you_mean(given: &str, candidates: &[&str]) -> String {
    match closest(given, candidates) {
        Some(c) => format!(": did you mean `{c}`?"),
        None => String::new(),
    }
}

/// "`read` tool" with its article: "a `read` tool", "an `irreversible` tool".
pub(crate) fn a_tool(class: &str) -> String {
    let article = if class.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} `{class}` tool")
}

/// "`a`, `b` or `c`".
pub(crate) fn one_of(candidates: &[&str]) -> String {
    let quoted: Vec<String> = candidates.iter().map(|c| format!("`{c}`")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLASSES: &[&str] = &[
        "read",
        "idempotent_write",
        "non_idempotent_write",
        "irreversible",
    ];

    #[test]
    fn typos_and_prefixes_are_recognised() {
        assert_eq!(
            closest("idempotant_write", CLASSES),
            Some("idempotent_write")
        );
        assert_eq!(closest("idempotent", CLASSES), Some("idempotent_write"));
        assert_eq!(closest("reed", CLASSES), Some("read"));
        assert_eq!(closest("Irreversable", CLASSES), Some("irreversible"));
        assert_eq!(closest("timout", &["timeout", "ttl"]), Some("timeout"));
    }

    #[test]
    fn unrelated_words_get_no_suggestion() {
        assert_eq!(closest("write", CLASSES), None);
        assert_eq!(closest("banana", &["timeout", "ttl"]), None);
    }

    #[test]
    fn articles_follow_the_sound() {
        assert_eq!(a_tool("read"), "a `read` tool");
        assert_eq!(a_tool("irreversible"), "an `irreversible` tool");
        assert_eq!(
            a_tool("non_idempotent_write"),
            "a `non_idempotent_write` tool"
        );
    }

    #[test]
    fn lists_read_naturally() {
        assert_eq!(one_of(&["a"]), "`a`");
        assert_eq!(one_of(&["a", "b", "c"]), "`a`, `b` or `c`");
    }
}
