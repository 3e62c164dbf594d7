//! Bearer tokens kept as their SHA-256 digest, written `sha256:` and 64
//! hex digits: the principals file of `idem proxy --principals` and the
//! approvers file of the inbox. Tokens are random 256-bit secrets, so a
//! plain digest is enough; the files hold no secret.

use std::fmt;

use sha2::{Digest, Sha256};

/// How a digest is written: `sha256:` and its hex digits.
pub const DIGEST_PREFIX: &str = "sha256:";

/// The SHA-256 digest of a bearer token.
///
/// ```
/// use idem_net::token::TokenDigest;
///
/// let digest = TokenDigest::of("test");
/// assert_eq!(
///     digest.to_string(),
///     "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
/// );
/// assert_eq!(TokenDigest::parse(&digest.to_string()), Some(digest));
/// assert_eq!(TokenDigest::parse("test"), None);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    /// The digest of `token`.
    pub fn of(token: &str) -> TokenDigest {
        TokenDigest(Sha256::digest(token.as_bytes()).into())
    }

    /// A digest as a file writes it (`sha256:` and 64 hex digits, in
    /// either case); `None` for anything else.
    pub fn parse(written: &str) -> Option<TokenDigest> {
        let hex = written.strip_prefix(DIGEST_PREFIX)?;
        let bytes = hex::decode(hex).ok()?;
        <[u8; 32]>::try_from(bytes).ok().map(TokenDigest)
    }
}

impl fmt::Display for TokenDigest {
    /// `sha256:` and the lowercase hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{DIGEST_PREFIX}{}", hex::encode(self.0))
    }
}

impl fmt::Debug for TokenDigest {
    /// The prefix only: a digest is not shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenDigest(sha256:…)")
    }
}
