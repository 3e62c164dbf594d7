//! Which of an upstream tool's errors are transient: the call did not take
//! effect (a lock held, a rate limit), as the upstream's error text or
//! JSON-RPC code says.

use idem_net::glob::Glob;

/// The texts and codes that mark one tool's errors transient (`transient`,
/// `transient_codes`).
#[derive(Debug, Clone, Default)]
pub(in crate::proxy) struct Transient {
    texts: Vec<Text>,
    codes: Vec<i64>,
}

/// One `transient` entry.
#[derive(Debug, Clone)]
enum Text {
    /// Found anywhere in the error.
    Contains(String),
    /// A glob over the whole error.
    Glob(Glob),
}

/// Whether `entry` is a glob rather than a text to look for.
fn is_glob(entry: &str) -> bool {
    entry.contains(['*', '?', '['])
}

impl Transient {
    /// The entries `texts` and `codes`, checked by [`Transient::check`].
    pub(in crate::proxy) fn new(texts: &[String], codes: &[i64]) -> Transient {
        let texts = texts
            .iter()
            .filter_map(|entry| match is_glob(entry) {
                true => Glob::new(entry).ok().map(Text::Glob),
                false => Some(Text::Contains(entry.clone())),
            })
            .collect();
        Transient {
            texts,
            codes: codes.to_vec(),
        }
    }

    /// The first entry of `texts` that cannot be used, and why: an empty
    /// one (it would mark every error transient) or a glob that does not
    /// parse.
    pub(in crate::proxy) fn check(texts: &[String]) -> Result<(), (&str, String)> {
        for entry in texts {
            if entry.trim().is_empty() {
                return Err((
                    entry,
                    "an empty text would make every error transient".into(),
                ));
            }
            if is_glob(entry) {
                Glob::new(entry).map_err(|e| (entry.as_str(), e.to_string()))?;
            }
        }
        Ok(())
    }

    /// Whether an error saying `text` is transient.
    pub(in crate::proxy) fn text(&self, text: &str) -> bool {
        self.texts.iter().any(|entry| match entry {
            Text::Contains(part) => text.contains(part.as_str()),
            Text::Glob(glob) => glob.matches(text),
        })
    }

    /// Whether a JSON-RPC error of `code` is transient.
    pub(in crate::proxy) fn code(&self, code: i64) -> bool {
        self.codes.contains(&code)
    }
}
