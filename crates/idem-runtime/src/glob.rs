//! Globs of names: tool names in `idem proxy`'s configuration, tools and
//! namespaces in the inbox's approval rules and webhooks. `*` is any run
//! of characters (`/` included), `?` one character, `[abc]` and `[!abc]`
//! one of (or none of) a set; every other character is itself. `glob`'s
//! `Pattern` matches, case-sensitive and with no
//! special `/` or leading `.`.

use std::fmt;

use ::glob::{MatchOptions, Pattern};

/// A checked glob.
///
/// ```
/// use idem_runtime::glob::Glob;
///
/// let glob = Glob::new("mcp/billing/*")?;
/// assert!(glob.matches("mcp/billing/alice"));
/// assert!(!glob.matches("mcp/support/bob"));
/// assert!(Glob::new("refund?")?.matches("refunds"));
/// # Ok::<(), idem_runtime::glob::GlobError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Glob(Pattern);

/// Names match as written: `*` crosses `/` (namespaces such as
/// `mcp/billing/alice`), a leading `.` is not special.
const NAMES: MatchOptions = MatchOptions {
    case_sensitive: true,
    require_literal_separator: false,
    require_literal_leading_dot: false,
};

impl Glob {
    /// `pattern`, checked: an unclosed `[` or a `**` inside a word is an
    /// error that says where.
    pub fn new(pattern: &str) -> Result<Glob, GlobError> {
        Pattern::new(pattern).map(Glob).map_err(|e| GlobError {
            pattern: pattern.to_owned(),
            reason: e.msg,
            at: e.pos,
        })
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        self.0.matches_with(name, NAMES)
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Glob").field(&self.as_str()).finish()
    }
}

/// A glob that cannot be used as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the glob `{pattern}` is not valid at character {}: {reason}", .at + 1)]
pub struct GlobError {
    /// The glob.
    pub pattern: String,
    /// What is wrong.
    pub reason: &'static str,
    /// Where (from 0).
    pub at: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(pattern: &str, name: &str) -> bool {
        Glob::new(pattern).unwrap().matches(name)
    }

    #[test]
    fn globs_match_runs_and_single_characters() {
        assert!(glob("charge_*", "charge_card"));
        assert!(glob("charge_*", "charge_"));
        assert!(!glob("charge_*", "refund_card"));
        assert!(glob("mcp/billing/*", "mcp/billing/alice"));
        assert!(glob("*/billing/*", "mcp/billing/alice"));
        assert!(glob("refund?", "refunds"));
        assert!(!glob("refund?", "refund"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXXbYYc"));
        assert!(!glob("a*b*c", "aXXbYY"));
        assert!(glob("*e*e*", "delete"));
        assert!(glob(".hidden*", ".hidden_tool"));
        assert!(!glob("Charge_*", "charge_card"));
    }

    #[test]
    fn a_broken_glob_says_where() {
        let error = Glob::new("charge_[ab").unwrap_err();
        assert_eq!(error.at, 7, "{error}");
        assert!(error.to_string().contains("`charge_[ab`"), "{error}");
    }
}
