//! Who may call a server over HTTP with a bearer token (`idem proxy
//! --listen --principals FILE`, or [`Authenticator`](super::Authenticator)
//! in a server of your own): a file of principals, each with the SHA-256
//! digests of its bearer tokens. A request's `Authorization: Bearer TOKEN`
//! names its principal, and the principal is the namespace of every record
//! its calls make (`mcp/NAME/alice`), so two principals never answer each
//! other.
//!
//! ```toml
//! [[principal]]
//! name = "alice"
//! tokens = ["sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]
//! ```
//!
//! `idem principal NAME` makes a token and prints it with its entry. Tokens
//! are random 256-bit secrets, so their plain SHA-256 is enough; the file
//! holds no secret, and nothing in it is ever shown.

use std::collections::HashMap;
use std::path::Path;

use super::AuthError;

use idem_net::token::TokenDigest;
use rand::RngCore;
use serde::Deserialize;

/// The principals file, read once at start: who may call with which
/// bearer token.
///
/// ```
/// use idem::mcp::auth::{new_token, Principals};
///
/// let (token, digest) = new_token();
/// let principals = Principals::parse(&format!(
///     "[[principal]]\nname = \"alice\"\ntokens = [\"{digest}\"]\n"
/// ))?;
/// assert_eq!(principals.who_token(&token), Some("alice"));
/// # Ok::<(), idem::mcp::auth::AuthError>(())
/// ```
#[derive(Default)]
pub struct Principals {
    /// Token digest → principal name.
    by_digest: HashMap<TokenDigest, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    principal: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    tokens: Vec<String>,
}

impl Principals {
    /// Read the file at `path`; an error names the file and what is wrong
    /// (never a token).
    ///
    /// ```no_run
    /// use idem::mcp::auth::Principals;
    ///
    /// let principals = Principals::load("principals.toml".as_ref())?;
    /// # Ok::<(), idem::mcp::auth::AuthError>(())
    /// ```
    pub fn load(path: &Path) -> Result<Principals, AuthError> {
        let failed = |reason: String| AuthError::Principals {
            path: Some(path.to_owned()),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
        Principals::from_text(&text).map_err(failed)
    }

    /// Parse a principals file's text (the example of [`Principals`]).
    pub fn parse(text: &str) -> Result<Principals, AuthError> {
        Principals::from_text(text).map_err(|reason| AuthError::Principals { path: None, reason })
    }

    fn from_text(text: &str) -> Result<Principals, String> {
        let file: File = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        let mut by_digest = HashMap::new();
        for entry in file.principal {
            idem_runtime::Namespace::new(format!("mcp/{}", entry.name))
                .map_err(|e| format!("principal `{}` cannot name a namespace: {e}", entry.name))?;
            if entry.name.contains('/') {
                return Err(format!("principal `{}`: a name has no `/`", entry.name));
            }
            for token in &entry.tokens {
                let digest = TokenDigest::parse(token).ok_or_else(|| {
                    format!(
                        "principal `{}`: a token is written `sha256:` and 64 hex digits \
                             (`idem principal {}` makes one)",
                        entry.name, entry.name
                    )
                })?;
                if let Some(other) = by_digest.insert(digest, entry.name.clone()) {
                    return Err(format!(
                        "a token is listed for both `{other}` and `{}`",
                        entry.name
                    ));
                }
            }
        }
        if by_digest.is_empty() {
            return Err("no principal has a token: nobody could call".to_owned());
        }
        Ok(Principals { by_digest })
    }

    /// The principal of an `Authorization` header's value: `Bearer TOKEN`
    /// (the scheme in any case, RFC 7235) with a listed token.
    ///
    /// ```
    /// # use idem::mcp::auth::{new_token, Principals};
    /// # let (token, digest) = new_token();
    /// # let principals = Principals::parse(&format!(
    /// #     "[[principal]]\nname = \"alice\"\ntokens = [\"{digest}\"]\n"
    /// # ))?;
    /// assert_eq!(principals.who(&format!("Bearer {token}")), Some("alice"));
    /// assert_eq!(principals.who("Bearer idem_not_listed"), None);
    /// # Ok::<(), idem::mcp::auth::AuthError>(())
    /// ```
    pub fn who(&self, authorization: &str) -> Option<&str> {
        self.who_token(super::bearer(authorization)?)
    }

    /// How many principals the file names.
    pub fn len(&self) -> usize {
        let names: std::collections::HashSet<&String> = self.by_digest.values().collect();
        names.len()
    }

    /// Whether the file names no principal (never, once loaded: such a
    /// file is refused).
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }

    /// The principal of a bearer token, if the file lists it (the example
    /// of [`Principals`]).
    pub fn who_token(&self, token: &str) -> Option<&str> {
        self.by_digest
            .get(&TokenDigest::of(token))
            .map(String::as_str)
    }
}

impl std::fmt::Debug for Principals {
    /// The principals' names, never their tokens' digests.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.by_digest.values().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        f.debug_struct("Principals").field("names", &names).finish()
    }
}

/// A new token, and what the file lists for it: `(idem_…, sha256:…)`.
/// The token goes to the caller; the digest into a principal's `tokens`
/// (`idem principal NAME` prints both).
///
/// ```
/// let (token, digest) = idem::mcp::auth::new_token();
/// assert!(token.starts_with("idem_"));
/// assert!(digest.starts_with("sha256:"));
/// ```
pub fn new_token() -> (String, String) {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let token = format!("idem_{}", hex::encode(bytes));
    let digest = TokenDigest::of(&token).to_string();
    (token, digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(token_line: &str) -> String {
        format!("[[principal]]\nname = \"alice\"\ntokens = [\"{token_line}\"]\n")
    }

    #[test]
    fn a_bearer_token_names_its_principal_in_any_case_of_the_scheme() {
        let (token, line) = new_token();
        let principals = Principals::parse(&file_with(&line)).unwrap();
        assert_eq!(principals.who(&format!("Bearer {token}")), Some("alice"));
        assert_eq!(principals.who(&format!("bearer {token}")), Some("alice"));
        assert_eq!(principals.who(&format!("Basic {token}")), None);
        assert_eq!(principals.who("Bearer idem_wrong"), None);
        assert_eq!(principals.who(&token), None, "no scheme");
    }

    #[test]
    fn a_bad_file_is_refused_without_showing_a_token() {
        let error = Principals::parse(&file_with("idem_plaintext_secret"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("sha256:"), "{error}");
        assert!(!error.contains("plaintext_secret"), "{error}");
        assert!(Principals::parse("")
            .unwrap_err()
            .to_string()
            .contains("nobody"));
        let (_, line) = new_token();
        let twice = format!(
            "{}[[principal]]\nname = \"bob\"\ntokens = [\"{line}\"]\n",
            file_with(&line)
        );
        assert!(Principals::parse(&twice)
            .unwrap_err()
            .to_string()
            .contains("both"));
    }
}
